"""Arrays a batch stream reads from files instead of holding them in its graph (`data_dir`).

A stream's graph holds every tensor its functions capture: the elements, the feature vectors,
the sampler's tables. tf.data service ships that graph to its dispatcher and workers, and cannot
serialise one past 2 GB. With a `data_dir`, each large array is written once to a file named by
the hash of its content, and the stream's graph holds an `ImmutableConst` op in its place: the
file's path, dtype and shape. The process that runs the stream memory-maps the file each time
the op runs, so the graph stays a few KB at any N, the mapped pages are page cache that the
processes of a machine share, and iterator checkpoints hold no array (the op is not state).

The `ImmutableConst` ops sit in a function of their own, run one element at a time, and the draw
receives the arrays as arguments. TensorFlow's constant folding evaluates an `ImmutableConst`
and copies its array whenever it instantiates a function that holds one; tf.data's parallel map
instantiates its function in as many threads as start its first calls, so ops there would copy
the arrays once per thread (BUILD_NOTES.md, "Arrays by reference").
"""

from __future__ import annotations

import hashlib
import numbers
import os
import tempfile
import threading
import weakref
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import tensorflow as tf

from tf_repulsive import _progress
from tf_repulsive import _stream_ops

# Arrays smaller than this stay in the graph (the key, a schedule's values): a file each would
# cost more than it saves.
IN_GRAPH_BYTES = 2**16
_CHUNK_BYTES = 2**26
_SUFFIX = ".tf_repulsive"


def check_directory(data_dir: object) -> str:
  """`data_dir` as an absolute path, created if missing; raises for what the stream could not map.

  Raises:
    TypeError: if `data_dir` is not a path.
    ValueError: for a URL (memory maps need a mounted file system) or a directory that cannot
      be created or written.
  """
  if not isinstance(data_dir, (str, os.PathLike)):
    raise TypeError(f"`data_dir` must be a directory path (str or os.PathLike) or None; got {data_dir!r}.")
  path = os.fspath(data_dir)
  if not isinstance(path, str) or not path:
    raise TypeError(f"`data_dir` must be a non-empty directory path; got {data_dir!r}.")
  if "://" in path:
    raise ValueError(
        f"`data_dir` = {path!r} is a URL; the stream memory-maps its files, which needs a directory on a "
        "mounted file system (a local disk, NFS, a shared volume) at the same path in every process that "
        "runs the stream.")
  path = os.path.abspath(path)
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as error:
    raise ValueError(f"`data_dir` = {path!r} cannot be created: {error}.") from error
  if not os.access(path, os.W_OK):
    raise ValueError(f"`data_dir` = {path!r} is not writable by this process, which writes the stream's arrays there.")
  return path


def check_mappable(element_spec: Any) -> None:
  """Refuses, before reading, elements that `data_dir` files cannot hold."""
  for spec in tf.nest.flatten(element_spec):
    if isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string:
      raise ValueError(
          "with `data_dir` the stream reads its elements from memory-mapped files of numbers; this dataset has "
          "a tf.string component. Map strings to numbers before the batcher (a tf.lookup table, say), or "
          "build without data_dir.")


def _unseen_message(path: str) -> str:
  return (f"tf_repulsive: this process cannot see {path}, a file of the stream's data_dir. Every process that "
          "runs the stream (each tf.data service worker) needs data_dir at the same path, holding the files "
          "the build wrote (batcher.data_files): a shared or copied directory.")


def _host_view(value: tf.Tensor) -> np.ndarray:
  """The eager tensor's values as numpy: a view of its buffer (`numpy()` would copy it), else a copy."""
  try:
    return np.from_dlpack(value)
  except (BufferError, TypeError, ValueError, RuntimeError):  # dtypes DLPack cannot describe (bfloat16, say)
    return value.numpy()


# What a worker reports for each file (`check_seen_by_workers`).
_MISSING, _SHORTER, _SAME_LENGTH = -1, 0, 1


def _seen(path: str | tf.Tensor) -> tf.Tensor:
  """Whether this process sees the file `path` (a path without glob characters)."""
  return tf.size(tf.io.matching_files(path)) > 0


def _length_status(path: tf.Tensor, length: tf.Tensor) -> tf.Tensor:
  """_MISSING, _SHORTER, _SAME_LENGTH or more (longer) for the file `path` against `length` bytes.

  Reads the start of the file, not all of it: a fixed-length record reader that skips a footer of
  `length - 1` bytes finds one one-byte record in a file of `length` bytes, none in a shorter one,
  and two or more (it stops at two) in a longer one.
  """
  def records():
    reader = tf.data.FixedLengthRecordDataset(path, record_bytes=1, footer_bytes=length - 1).take(2)
    return reader.reduce(tf.constant(_SHORTER, tf.int64), lambda count, _: count + 1)
  return tf.cond(_seen(path), records, lambda: tf.constant(_MISSING, tf.int64))


class DataFiles:
  """The large arrays of one batch stream, as files under a directory.

  The stream maps its files in one function (`mapped`) and hands the arrays to the functions
  that read them, which declare them (`receive`) and then ask `read(value)` for what to use in
  place of an eager tensor `value` they would otherwise capture.
  """

  def __init__(self, directory: str, verbose: bool):
    self.directory = directory
    self._verbose = verbose
    # Per array (by identity): its file. The reference keeps the tensor, so its id stays its own.
    self._files: dict[object, str] = {}
    # Per file: the dtype and shape of the array first written to it, which its op maps.
    self._layouts: dict[str, tuple[tf.DType, tf.TensorShape]] = {}
    # Per function graph being traced: the tensor that stands for each file's array in it.
    self._received: weakref.WeakKeyDictionary[tf.Graph, dict[str, tf.Tensor]] = weakref.WeakKeyDictionary()

  @property
  def paths(self) -> list[str]:
    """The files written (or found already written) so far."""
    return sorted(set(self._files.values()))

  def paths_of(self, values: Iterable[object]) -> list[str]:
    """The files of the large numeric arrays among `values` (written if missing), each once."""
    paths: list[str] = []
    for value in values:
      path = self._path_of(value)
      if path is not None and path not in paths:
        paths.append(path)
    return paths

  def mapped(self, paths: Sequence[str]) -> list[tf.Tensor]:
    """In a function being traced: the arrays of the files `paths`, memory-mapped each time it runs.

    A process that does not see a file fails with an `InvalidArgumentError` that names it and
    says what every process running the stream needs.
    """
    # (A path with glob characters would not match itself: the op's own NotFoundError names it.)
    seen = [tf.debugging.Assert(_seen(path), [_unseen_message(path)])
            for path in paths if not any(character in path for character in "*?[]\\")]
    arrays = []
    with tf.control_dependencies(seen):
      for path in paths:
        dtype, shape = self._layouts[path]
        arrays.append(tf.raw_ops.ImmutableConst(dtype=dtype, shape=shape, memory_region_name=path))
    return arrays

  def with_arrays(self, draws: tf.data.Dataset, draw: Callable[..., Any],
                  values_read: Iterable[object]) -> tuple[tf.data.Dataset, Callable[..., Any]]:
    """`draws` and `draw` for the stream's parallel map, the arrays `draw` reads coming with each draw.

    A function of its own maps the files of `values_read`, one draw at a time, and appends their
    arrays to the draw's element: TensorFlow copies the arrays of the files a function maps when
    it instantiates it, which the parallel map would do in each thread that starts a first call.
    """
    paths = self.paths_of(values_read)

    def with_arrays(stream, offset):
      return (stream, offset, *self.mapped(paths))

    def draw_with_arrays(stream, offset, *arrays):
      self.receive(paths, arrays)
      return draw(stream, offset)

    return _stream_ops.map_on_host(draws, with_arrays), draw_with_arrays

  def check_seen_by_workers(self, service: str, timeout: float) -> int:
    """How many workers of the tf.data service at `service` answered, each seeing every file whole.

    Runs a dataset of one element in `"parallel_epochs"` mode, which every worker registered with
    the dispatcher runs once: the element is the worker's status of each file.

    Raises:
      TypeError, ValueError: for a `service` that is not an address, a `timeout` that is not a
        positive number of seconds.
      ValueError: naming the files some worker does not see, or sees at another length.
      TimeoutError: if the workers have not all answered within `timeout` seconds.
    """
    if not isinstance(service, str) or not service:
      raise TypeError(
          f"`service` must be the dispatcher's address as a string (\"grpc://host:port\"); got {service!r}.")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
      raise ValueError(f"`timeout` must be a positive number of seconds; got {timeout!r}.")
    timeout = float(timeout)
    paths = self.paths
    lengths = [self._layouts[path][0].size * self._layouts[path][1].num_elements() for path in paths]
    statuses = tf.data.Dataset.from_tensors((tf.constant(list(paths), tf.string), tf.constant(lengths, tf.int64))).map(
        lambda path, length: tf.map_fn(lambda file: _length_status(*file), (path, length),
                                       fn_output_signature=tf.int64))
    shipped = statuses.apply(tf.data.experimental.service.distribute("parallel_epochs", service))
    answers: list[np.ndarray] = []
    failure: list[BaseException] = []

    def collect():
      try:
        answers.extend(shipped.as_numpy_iterator())
      except Exception as error:  # reported by the caller's thread
        failure.append(error)

    # A service without workers never ends the stream, and its reads cannot be cancelled: a
    # daemon thread reads it, and the caller waits for it at most `timeout` seconds.
    reader = threading.Thread(target=collect, name="tf_repulsive data_files check", daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
      raise TimeoutError(
          f"No answer from the tf.data service at {service!r} within {timeout:g} s (workers answered: "
          f"{len(answers)}): is a worker registered with that dispatcher?")
    if failure:
      raise failure[0]
    missing = sorted({path for answer in answers for path, status in zip(paths, answer) if status == _MISSING})
    other_length = sorted({path for answer in answers for path, status in zip(paths, answer)
                           if status not in (_MISSING, _SAME_LENGTH)})
    if missing or other_length:
      failing = sum(1 for answer in answers if np.any(answer != _SAME_LENGTH))
      problems = ([f"cannot see {', '.join(missing)}"] if missing else []) + (
          [f"sees {', '.join(other_length)} at another length than the build wrote (a partial or stale copy)"]
          if other_length else [])
      raise ValueError(
          f"{failing} of the {len(answers)} workers of the tf.data service at {service!r} cannot map the stream's "
          f"data files: a worker {'; a worker '.join(problems)}. Every process that runs the stream needs data_dir "
          "at the same path, holding the files the build wrote (batcher.data_files): a shared or copied directory.")
    return len(answers)

  def receive(self, paths: Sequence[str], arrays: Sequence[tf.Tensor]) -> None:
    """In a function being traced: `arrays` (its arguments, `mapped(paths)` upstream) are the files' arrays."""
    self._received[tf.compat.v1.get_default_graph()] = dict(zip(paths, arrays, strict=True))

  # Called while tf.data traces a stream function: plain Python (file writes), not for AutoGraph.
  @tf.autograph.experimental.do_not_convert
  def read(self, value: tf.Tensor) -> tf.Tensor:
    """What the function being traced uses for the eager tensor `value`: its file's array, or `value`.

    Raises:
      RuntimeError: if the function did not `receive` the file of `value` (a stream function
        reading an array the pipeline did not list).
    """
    path = self._path_of(value)
    if path is None:
      return value
    received = self._received.get(tf.compat.v1.get_default_graph(), {})
    if path not in received:
      raise RuntimeError(
          f"tf_repulsive internal error: a stream function reads {path} without receiving it; the pipeline "
          "must list every array its functions read.")
    # One file may hold arrays of two shapes (images [N, h, w] and their feature vectors [N, h·w]).
    array = received[path]
    return array if array.shape == value.shape else tf.reshape(array, value.shape)

  def _path_of(self, value: object) -> str | None:
    """The file of eager tensor `value` (written on first use), or None for what stays in the graph."""
    if not isinstance(value, tf.Tensor) or tf.is_symbolic_tensor(value) or value.dtype in (
        tf.string, tf.resource, tf.variant) or value.shape.num_elements() * value.dtype.size < IN_GRAPH_BYTES:
      return None
    key = value.ref()
    path = self._files.get(key)
    if path is None:
      path = self._files[key] = self._write(_host_view(value))
      self._layouts.setdefault(path, (value.dtype, value.shape))
    return path

  def _write(self, array: np.ndarray) -> str:
    """Writes `array`'s bytes to `<sha256 of dtype and bytes>.tf_repulsive` unless present."""
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    digest = hashlib.sha256(f"{array.dtype.str}\n".encode())
    with _progress.bar("data files (hashing)", flat.size, self._verbose) as progress:
      for start in range(0, flat.size, _CHUNK_BYTES):
        digest.update(flat[start:start + _CHUNK_BYTES].data)
        progress.update(min(_CHUNK_BYTES, flat.size - start))
    path = os.path.join(self.directory, digest.hexdigest()[:32] + _SUFFIX)
    if os.path.isfile(path) and os.path.getsize(path) == flat.size:
      return path  # written by an earlier build of the same data
    # Renamed into place when complete: a process that finds the name finds all of the file.
    descriptor, temporary = tempfile.mkstemp(dir=self.directory, suffix=".partial")
    try:
      with os.fdopen(descriptor, "wb") as file, _progress.bar("data files (writing)", flat.size,
                                                            self._verbose) as progress:
        for start in range(0, flat.size, _CHUNK_BYTES):
          file.write(flat[start:start + _CHUNK_BYTES].data)
          progress.update(min(_CHUNK_BYTES, flat.size - start))
      os.chmod(temporary, 0o644)
      os.replace(temporary, path)
    except BaseException:
      if os.path.exists(temporary):
        os.remove(temporary)
      raise
    return path
