"""`BatcherOptions`: the build's deployment and tuning knobs, grouped as `tf.data.Options` groups a dataset's."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Mapping, TypeVar

from tf_repulsive import _checks
from tf_repulsive import _data_files

_Function = TypeVar("_Function", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class BatcherOptions:
  """How a batcher reads its input, how much memory it may use, and where its arrays live.

  Pass one to `repulsive_batch(..., options=...)`. The defaults suit a dataset that fits in
  memory and a stream that runs in this process.

  Attributes:
    max_elements: the most elements the build reads. More raises: the bound guards an input of
      unknown size.
    distance_cache_bytes: memory for the N x N float32 matrix of squared distances. When it
      fits and the features have 1,024 dimensions or more, the build computes it once and each
      disk test looks distances up. Otherwise each batch computes its distances from the
      features, which costs less than the lookups in fewer dimensions. A `ModelSpace` batcher
      never builds it: each refresh would compute it again. 0 turns the cache off.
    data_dir: a directory for the arrays the stream draws from, written as memory-mapped files
      named by the hash of their content. The stream's graph then names the files and stays a
      few KB at any N: the form to ship to tf.data service. Every process that runs the stream
      must see the directory at the same path. None: the graph holds the arrays.
    verbose: show a progress bar on stderr for one-time work that takes more than about 2 s.

  Example:

  >>> import tf_repulsive
  >>> tf_repulsive.BatcherOptions(distance_cache_bytes=0, verbose=False).max_elements
  10000000
  """

  max_elements: int = 10_000_000
  distance_cache_bytes: int = 512 * 2**20
  data_dir: str | os.PathLike | None = None
  verbose: bool = True

  def __post_init__(self):
    _checks.integer(self.max_elements, "max_elements", 1)
    _checks.integer(self.distance_cache_bytes, "distance_cache_bytes", 0)
    if not isinstance(self.verbose, bool):
      raise TypeError(f"`verbose` must be True or False; got {self.verbose!r}.")
    if self.data_dir is not None:
      # An absolute path, created and checked for writing here: the error comes at construction.
      object.__setattr__(self, "data_dir", _data_files.check_directory(self.data_dir))


# Arguments `repulsive_batch` does not take, and what to pass instead.
REMOVED_ARGUMENTS: Mapping[str, str] = {
    "feature_fn": "pass the function as `features=`",
    "label_fn": "pass the function as `labels=`",
    "model_space": "pass the ModelSpace as `features=`",
    "name": "give the name of the log keys to the callback: AnnealingCallback(batcher, name=...)",
    **{knob: f"pass `options=tf_repulsive.BatcherOptions({knob}=...)`"
       for knob in ("max_elements", "distance_cache_bytes", "data_dir", "verbose")},
}


def refuses(removed: Mapping[str, str]) -> Callable[[_Function], _Function]:
  """Makes a function raise a TypeError naming the replacement of each keyword in `removed`.

  The wrapped function keeps its signature (`inspect.signature` follows `__wrapped__`).
  """
  def decorate(function: _Function) -> _Function:
    @functools.wraps(function)
    def checked(*args, **kwargs):
      for name in sorted(kwargs.keys() & removed.keys()):
        raise TypeError(f"{function.__name__}() takes no `{name}` argument: {removed[name]}.")
      return function(*args, **kwargs)
    return checked  # type: ignore[return-value]
  return decorate
