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
import warnings
import weakref
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import tensorflow as tf

from tf_repulsive import _data_file_checks as _checks
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


def check_seen_by_workers(files: DataFiles | None, service: str, timeout: float, contents: bool) -> int:
  """`DataFiles.check_seen_by_workers` of a batcher's files, or a ValueError for a batcher without."""
  if files is None:
    raise ValueError("check_data_files checks the files of a batcher built with a data_dir; this one holds its "
                     "arrays in the stream's graph, which tf.data service ships to the workers.")
  return files.check_seen_by_workers(service, timeout, contents)


def _read_with_timeout(shipped: tf.data.Dataset, service: str, timeout: float) -> list[np.ndarray]:
  """The elements of `shipped`, read within `timeout` seconds: each worker's answer."""
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
  return answers


def _flat_bytes(array: np.ndarray) -> np.ndarray:
  """The array's bytes as a flat uint8 view (a copy only when it is not contiguous)."""
  return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


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
    # Per file: the dtype and shape of the array first written to it, which its op maps, that
    # array (the truth a check compares the file with), and where the sampled check looks.
    self._layouts: dict[str, tuple[tf.DType, tf.TensorShape]] = {}
    self._arrays: dict[str, tf.Tensor] = {}
    self._samples: dict[str, _checks.Samples] = {}
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
    says what every process running the stream needs; one whose file holds other values at the
    sampled places (`_data_file_checks`) fails naming the file as damaged.
    """
    # (A path with glob characters would not match itself: the op's own NotFoundError names it.)
    seen = [tf.debugging.Assert(_checks.seen(path), [_unseen_message(path)])
            for path in paths if not any(character in path for character in "*?[]\\")]
    arrays = []
    with tf.control_dependencies(seen):
      for path in paths:
        dtype, shape = self._layouts[path]
        arrays.append(tf.raw_ops.ImmutableConst(dtype=dtype, shape=shape, memory_region_name=path))
    # A few KB of each file against what the build wrote: a damaged copy fails the draw, naming it.
    # (The function runs its asserts before it returns. The arrays are returned as mapped, not
    # through an op that TensorFlow's constant folding would replace by a copy of the file.)
    for path, array in zip(paths, arrays):
      _checks.sampled_check(path, array, self._samples[path])
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

  def check_seen_by_workers(self, service: str, timeout: float, contents: bool) -> int:
    """How many workers of the tf.data service at `service` answered, each seeing every file whole.

    Runs a dataset of one element in `"parallel_epochs"` mode, which every worker registered with
    the dispatcher runs once: the element is the worker's status of each file. With `contents`
    each worker reads every file and compares the fingerprints of its chunks with those of the
    arrays in this process's memory.

    Raises:
      TypeError, ValueError: for a `service` that is not an address, a `timeout` that is not a
        positive number of seconds, `contents` not a bool.
      ValueError: naming the files some worker does not see, sees at another length, or (with
        `contents`) sees with other bytes.
      TimeoutError: if the workers have not all answered within `timeout` seconds.
    """
    if not isinstance(service, str) or not service:
      raise TypeError(
          f"`service` must be the dispatcher's address as a string (\"grpc://host:port\"); got {service!r}.")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
      raise ValueError(f"`timeout` must be a positive number of seconds; got {timeout!r}.")
    if not isinstance(contents, bool):
      raise TypeError(f"`contents` must be True or False; got {contents!r}.")
    paths = self.paths
    lengths = [self._layouts[path][0].size * self._layouts[path][1].num_elements() for path in paths]
    expected = ([_checks.fingerprints_of(_flat_bytes(_host_view(self._arrays[path]))) for path in paths]
                if contents else None)

    def statuses(_):
      if expected is not None:
        return tf.stack([_checks.content_status(*file) for file in zip(paths, lengths, expected)])
      return tf.stack([_checks.length_status(tf.constant(path), tf.constant(length, tf.int64))
                       for path, length in zip(paths, lengths)])

    shipped = tf.data.Dataset.from_tensors(0).map(statuses).apply(
        tf.data.experimental.service.distribute("parallel_epochs", service))
    answers = _read_with_timeout(shipped, service, timeout)
    def named(matches: Callable[[int], bool]) -> str:
      return ", ".join(sorted({path for answer in answers for path, status in zip(paths, answer) if matches(status)}))

    missing = named(lambda status: status == _checks.MISSING)
    damaged = named(lambda status: status == _checks.OTHER_CONTENTS)
    other_length = named(lambda status: status == _checks.SHORTER or status > _checks.SAME_LENGTH)
    problems = ([f"cannot see {missing}"] if missing else []) + (
        [f"sees {damaged} with other bytes than the build wrote (a damaged copy)"] if damaged else []) + (
        [f"sees {other_length} at another length than the build wrote (a partial or stale copy)"]
        if other_length else [])
    if problems:
      failing = sum(1 for answer in answers if np.any(answer != _checks.SAME_LENGTH))
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
      array = _host_view(value)
      path = self._files[key] = self._write(array)
      if path not in self._layouts:
        self._layouts[path], self._arrays[path] = (value.dtype, value.shape), value
        self._samples[path] = _checks.Samples.of(array)
    return path

  def _write(self, array: np.ndarray) -> str:
    """Writes `array`'s bytes to `<sha256 of dtype and bytes>.tf_repulsive` unless it holds them already."""
    flat = _flat_bytes(array)
    digest = hashlib.sha256(f"{array.dtype.str}\n".encode())
    with _progress.bar("data files (hashing)", flat.size, self._verbose) as progress:
      for start in range(0, flat.size, _CHUNK_BYTES):
        digest.update(flat[start:start + _CHUNK_BYTES].data)
        progress.update(min(_CHUNK_BYTES, flat.size - start))
    path = os.path.join(self.directory, digest.hexdigest()[:32] + _SUFFIX)
    if os.path.isfile(path):
      if _checks.same_bytes(path, flat, self._verbose):
        return path  # written by an earlier build of the same data
      warnings.warn(_checks.damaged_message(path, "found by an earlier build's name") + " This build writes it anew.",
                    RuntimeWarning, stacklevel=2)
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
