"""`ModelSpace`: the disks drawn in the space of the model being trained, refreshed as it trains.

The features of refresh r are those of the model after r * R optimizer steps (the model that
trains step r * R), and the batches of steps r * R ... (r + 1) * R - 1 are drawn on them. A
refresh is computed in this process (the callbacks, or `batcher.refresh_features` in a custom
loop) and installed into the drawer's variables. The stream draws each step when it is taken
from it, so no step is drawn ahead of its refresh; a stage after the batcher that runs ahead
(a prefetch) waits at a refresh's first step until it is installed. Each refresh's features are
saved, so that a run resumed between two refreshes draws on the very features the uninterrupted
run drew on, not on ones recomputed from a later model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _contract
from tf_repulsive import _model_features

# How often a draw waiting for its refresh looks again.
_POLL_MICROSECONDS = 5000
# The version of a drawer no refresh was installed into yet.
NO_REFRESH = -1


@dataclasses.dataclass(frozen=True, eq=False)
class ModelSpace:
  """Distances measured on features computed from the model being trained, recomputed every `refresh_every` steps.

  Give it to `repulsive_batch(..., features=...)`. Refresh r holds
  the features of the model after r * `refresh_every` optimizer steps; the batch of step n is a
  pure function of (seed, n, the features of refresh n // refresh_every). On each refresh the
  sampler is built again on the new features: the `"auto"` radius is calibrated and mingling
  values are computed in the new space.

  `AnnealingCallback` / `BatchStreamCallback` refresh in `fit` (when it starts, and after every
  `refresh_every`-th step). A custom loop calls `batcher.refresh_features(step)` before it takes
  the batch of each step (a no-op except at a refresh).

  The stream draws each step as it is taken from it, in the taking thread (not ahead, in
  parallel, as other batchers do: the draw is on the training's critical path, a small cost next
  to a step of a model worth refreshing features for). A stage after the batcher that takes
  batches ahead (`prefetch`, a strategy's device prefetch) waits at a refresh's first step until
  that refresh is installed, up to `timeout_seconds`, then fails; nothing is drawn on other
  features. An iterator checkpoint written while such a stage waits waits with it: write them
  after `refresh_features`, or keep prefetches before the batcher.

  Each refresh's features are saved in `directory` (one `.npz` of N x d float32 per refresh), so
  that a run resumed between two refreshes (BackupAndRestore, an iterator checkpoint) continues
  on the features the interrupted run drew on; at a refresh's own step the model is the one they
  came from, and they are recomputed unless the saved ones came from identical weights.

  The elements must be Keras tuples `(x, y)` or `(x, y, sample_weight)` (`(x,)` for a source
  without labels): `x` is what the model takes (or what `inputs_fn` maps to it), `y` the labels
  the source may need.

  Attributes:
    model: the Keras model being trained.
    source: `EmbeddingFeatures()`, `GradientFeatures()` or a `FeatureSource` of your own.
    refresh_every: R, the optimizer steps between refreshes (>= 1).
    directory: where each refresh's features are saved; None: not saved, and a run can then
      resume only at a refresh's step (anywhere else raises).
    keep_last: how many refreshes' saved features are kept (older ones are deleted); None: all.
    timeout_seconds: how long a draw waits for its refresh before the stream fails.
    chunk_size: elements per model call when computing the features.
    verbose: show a progress bar for a feature computation longer than about 2 s.
    inputs_fn: for elements the model does not take as they are (when the pipeline decodes or
      featurises its batches after the batcher: audio the model takes as spectrograms, image
      files it takes decoded), a function of a chunk of the elements' `x` to the model's inputs:
      the deterministic part of that mapping, without augmentation. None: `x` as it is.
    from_training_step: take the features of the k elements each step trains on from that
      step's own forward pass, and refresh from the table they update, without a pass over the
      data. Fit `RecordingModel(model, batcher)`, which records them (TensorFlow backend; see
      "Features from the training step" in the guide). False:
      every refresh computes the features of all N.
    full_refresh_every: with `from_training_step`, the steps between refreshes that compute
      the features of all N again (a multiple of `refresh_every`); None: only the first refresh,
      at step 0, does.

  Example (a custom loop; in `fit` the callbacks call `refresh_features`):

  >>> import keras, numpy as np, tensorflow as tf, tf_repulsive
  >>> x = np.random.default_rng(0).normal(size=(200, 4)).astype("float32")
  >>> y = (x[:, 0] > 0).astype("int64")
  >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
  ...                           keras.layers.Dense(2)])
  >>> space = tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(), refresh_every=5)
  >>> batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(radius="auto"), seed=0,
  ...     start_step=0, features=space, options=tf_repulsive.BatcherOptions(verbose=False))
  >>> iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  >>> for step in range(8):
  ...   _ = batcher.refresh_features(step)
  ...   batch_x, batch_y = next(iterator)
  >>> batcher.stats().refreshes
  2
  """

  model: Any
  source: _contract.FeatureSource
  refresh_every: int
  directory: str | os.PathLike | None = None
  keep_last: int | None = None
  timeout_seconds: float = 600.0
  chunk_size: int = 512
  verbose: bool = True
  inputs_fn: Callable[[Any], Any] | None = None
  from_training_step: bool = False
  full_refresh_every: int | None = None

  def __post_init__(self):
    if not isinstance(self.model, keras.Model):
      raise TypeError(f"`model` must be the keras.Model being trained; got {self.model!r}.")
    if not isinstance(self.source, _contract.FeatureSource):
      raise TypeError(f"`source` must be a tf_repulsive.FeatureSource (EmbeddingFeatures(), GradientFeatures(), "
                      f"or a subclass); got {self.source!r}.")
    _checks.integer(self.refresh_every, "refresh_every", 1)
    _checks.integer(self.chunk_size, "chunk_size", 1)
    if self.keep_last is not None:
      _checks.integer(self.keep_last, "keep_last", 1)
    _checks.real(self.timeout_seconds, "timeout_seconds", positive=True)
    if self.inputs_fn is not None and not callable(self.inputs_fn):
      raise TypeError(f"`inputs_fn` must be a function of a chunk of the elements' x to the model's inputs, or None; "
                      f"got {self.inputs_fn!r}.")
    if self.directory is not None and not isinstance(self.directory, (str, os.PathLike)):
      raise TypeError(f"`directory` must be a path or None; got {self.directory!r}.")
    if not isinstance(self.verbose, bool):
      raise TypeError(f"`verbose` must be True or False; got {self.verbose!r}.")
    if not isinstance(self.from_training_step, bool):
      raise TypeError(f"`from_training_step` must be True or False; got {self.from_training_step!r}.")
    if self.full_refresh_every is not None:
      if not self.from_training_step:
        raise ValueError("`full_refresh_every` sets the full refreshes between refreshes from the training "
                         "step: pass from_training_step=True, or leave it None (every refresh is full).")
      _checks.integer(self.full_refresh_every, "full_refresh_every", 1)
      if self.full_refresh_every % self.refresh_every:
        raise ValueError(f"`full_refresh_every` = {self.full_refresh_every} must be a multiple of refresh_every = "
                         f"{self.refresh_every}: a full refresh replaces a refresh.")
    if self.from_training_step and keras.backend.backend() != "tensorflow":
      raise ValueError(
          f"from_training_step=True records the training step's forward pass through RecordingModel, which "
          f"needs the TensorFlow backend; this is {keras.backend.backend()!r}. Use "
          "from_training_step=False (every refresh computes all features).")

  def is_full_refresh(self, refresh: int) -> bool:
    """Whether `refresh` computes the features of all N (not from the training step's table)."""
    if not self.from_training_step or refresh == 0:
      return True
    return self.full_refresh_every is not None and (refresh * self.refresh_every) % self.full_refresh_every == 0



def model_inputs(elements: Any, source: _contract.FeatureSource) -> tuple[Any, Any]:
  """(x, y) of the materialised elements by Keras' conventions, or a TypeError saying what they must be."""
  if isinstance(elements, tuple) and (len(elements) in (2, 3) or (len(elements) == 1 and not source.needs_labels)):
    return elements[0], elements[1] if len(elements) > 1 else None
  raise TypeError(
      "a ModelSpace batcher computes the features from the elements as the model takes them: "
      "they must be (x, y) or (x, y, sample_weight) tuples" + ("" if source.needs_labels else " (or (x,))")
      + f"; got elements of structure {tf.nest.map_structure(lambda leaf: leaf.shape, elements)}. "
      "Map the dataset to that form before the batcher.")


def weights_fingerprint(model: keras.Model) -> str:
  """A digest of the model's weights: which model a refresh's features came from."""
  digest = hashlib.sha256()
  for weight in model.weights:
    digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(weight.value)).tobytes())
  return digest.hexdigest()


def _path(directory: str | os.PathLike, refresh: int) -> pathlib.Path:
  return pathlib.Path(directory) / f"refresh-{refresh:09d}.npz"


def save(space: ModelSpace, refresh: int, features: np.ndarray, fingerprint: str) -> None:
  """Writes the features of `refresh` (atomically), then deletes those beyond `keep_last`."""
  if space.directory is None:
    return
  directory = pathlib.Path(space.directory)
  directory.mkdir(parents=True, exist_ok=True)
  path = _path(directory, refresh)
  partial = path.with_suffix(".partial.npz")
  np.savez(partial, features=features, fingerprint=np.array(fingerprint))
  os.replace(partial, path)
  if space.keep_last is not None:
    saved = sorted(directory.glob("refresh-*[0-9].npz"))
    for old in saved[:-space.keep_last]:
      old.unlink(missing_ok=True)


def load(space: ModelSpace, refresh: int) -> tuple[np.ndarray, str] | None:
  """The saved features of `refresh` and their model's fingerprint, or None."""
  if space.directory is None or not _path(space.directory, refresh).exists():
    return None
  with np.load(_path(space.directory, refresh)) as saved:
    return saved["features"], str(saved["fingerprint"])


def compute(space: ModelSpace, elements: Any) -> np.ndarray:
  """The features of the model as it is now, for every element."""
  x, y = model_inputs(elements, space.source)
  return _model_features.compute_features(space.source, space.model, x, y, inputs_fn=space.inputs_fn,
                                        chunk_size=space.chunk_size, verbose=space.verbose)


def wait_for_refresh(version: tf.Variable, refresh: tf.Tensor, step: tf.Tensor, timeout_seconds: float) -> tf.Operation:
  """An op that returns once `version` is `refresh`: waits while a refresh is due, fails otherwise.

  Fails at once when no refresh was ever installed or a later one is (the stream would draw on
  other features), and after `timeout_seconds` of waiting.
  """
  polls = max(1, int(timeout_seconds * 1e6 / _POLL_MICROSECONDS))

  def pending(poll, loaded):
    return tf.logical_and(tf.logical_and(loaded != NO_REFRESH, loaded < refresh), poll < polls)

  def look_again(poll, loaded):
    with tf.control_dependencies([sleep(_POLL_MICROSECONDS)]):
      return poll + 1, version.read_value()

  _, loaded = tf.while_loop(pending, look_again, (tf.constant(0), version.read_value()))
  return tf.debugging.Assert(tf.equal(loaded, refresh), [
      "repulsive_batch: the batch of step", step, "is drawn on the features of refresh", refresh,
      "but the batcher holds those of refresh", loaded, "(-1: none). In model.fit add "
      "tf_repulsive.AnnealingCallback(batcher) (or BatchStreamCallback); in a custom loop call "
      "batcher.refresh_features(step) before taking the batch of each step, and after restoring an "
      f"iterator. A refresh that does not come within {timeout_seconds} s (ModelSpace.timeout_seconds) "
      "fails too."], summarize=3)


def sleep(microseconds: int) -> tf.Tensor:
  """Blocks the calling thread for `microseconds` (tf.data's sleep, run for one element)."""
  one = tf.data.experimental.to_variant(tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)))
  slept = tf.raw_ops.SleepDataset(input_dataset=one, sleep_microseconds=tf.constant(microseconds, tf.int64),
                                  output_types=[tf.int64], output_shapes=[[]])
  return tf.data.experimental.from_variant(slept, tf.TensorSpec([], tf.int64)).reduce(
      tf.constant(0, tf.int64), lambda total, value: total + value)
