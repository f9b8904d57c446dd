"""`repulsive_batch`: the tf.data transformation that draws each mini-batch from a point process.

The batches are a map over a stream of step numbers: the batch of step n is a pure function of
(seed, n), and n itself is data (a `Dataset.range` position), so iterator checkpoints, tf.data
service and `tf.distribute` carry it like any other element.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import re
import time
import warnings
import weakref
from typing import Any, Callable, Mapping

import numpy as np
import tensorflow as tf

from tf_repulsive import _arrays
from tf_repulsive import _checks
from tf_repulsive import _data_files
from tf_repulsive import _dataset_graph
from tf_repulsive import _model_space
from tf_repulsive import _reading
from tf_repulsive import _stream_ops
from tf_repulsive import _contract

_DEFAULT_MAX_ELEMENTS = 10_000_000
_DEFAULT_DISTANCE_CACHE_BYTES = 512 * 2**20
_KEY_SALT = 0x5EED
# Keys the draws that estimate the inclusion probabilities, apart from the stream's.
_INCLUSION_SALT = 0x1C1
# Steps are int64. The step range repeats past this bound, which no training reaches, so that the
# stream's cardinality is infinite (Keras then asks for steps_per_epoch instead of waiting for an end).
_LAST_STEP = 2**62
_UNSET = -1
# A `_next_start` that lets one stream deliver the batch of step 0 only (`allow_build_probe`).
_PROBE = -2
# Steps whose fallback count and group counts are kept (per step, as it is drawn) for the logs.
_RECORDED_STEPS = 4096
_NO_START_MESSAGE = (
    "repulsive_batch: the batch stream does not know its first step. A batcher built with "
    "start_step=None starts each stream (a new iterator, or a repeat() after the batcher) where the "
    "last batcher.start_at(step) said, and each start serves one stream: none was left for this "
    "one. In model.fit add tf_repulsive.AnnealingCallback(batcher) to the callbacks (it starts every "
    "stream at the optimizer's step, also when training resumes). In a custom training loop call "
    "batcher.start_at(int(optimizer.iterations)) before each new iterator, e.g. before each epoch's "
    "`for batch in stream.take(batcher.steps_per_epoch)`.")
# A probe stream asked for its second batch. Under a distribution strategy this is logged at every
# fit, by the prefetch of the stream Keras drops, so the message says when it is harmless.
_PROBE_ENDED_MESSAGE = (
    "repulsive_batch: this stream began unstarted, and such a stream delivers one batch only: the "
    "batch of step 0 that Keras' fit takes under a distribution strategy to build the model before "
    "any callback runs. Logged while training goes on, this is the prefetch of that dropped stream, "
    "and harmless. If it stops training, the stream that trains was never started: add "
    "tf_repulsive.AnnealingCallback(batcher) (or BatchStreamCallback) to fit's callbacks, or in a "
    "custom training loop call batcher.start_at(int(optimizer.iterations)) before each new iterator.")
_BEGUN_AGAIN_MESSAGE = (
    "repulsive_batch: a new stream of this batcher began at its fixed start_step, after an earlier "
    "stream in this process delivered the batches of later steps: it would hand out those steps' "
    "batches again (every new iterator of a fixed-start stream starts at start_step; this is what a "
    "loop `for epoch ...: for batch in stream.take(n)` does). Keep one iterator for all epochs "
    "(iterator = iter(stream), then next(iterator) per step), or build the batcher with "
    "start_step=None and call batcher.start_at(int(optimizer.iterations)) before each new iterator. "
    "In model.fit use tf_repulsive.AnnealingCallback(batcher). Last step delivered, and start_step:")


@dataclasses.dataclass(frozen=True)
class SamplingStats:
  """Counters of a pipeline's draws in this process (not part of iterator checkpoints).

  Attributes:
    batches: batches drawn (including any drawn ahead by prefetching).
    streams: batch streams (new iterators) that began drawing; an iterator restored from a
      checkpoint continues its stream.
    fallback_batches: batches the darts could not fill within `max_darts` (radius too large for
      the data near the packing limit); their remaining slots were filled uniformly at random.
    fallback_points: points supplied by that fill, over all batches.
    last_step_delivered: the step of the batch the pipeline last handed on (to `fit` or to
      transformations after the batcher); None before the first.
    report: what the sampler reported of its preparation (`BatchDrawer.report`), by name. The
      Poisson disk samplers report `radius`, the disk radius in use (the estimate when the
      sampler's is None, the calibrated one for "auto"); Easy, Dense and Anneal PDS also
      `mingling_agreement`, the share of points whose mingling value equals an exhaustive
      nearest-neighbour search's (1.0 when the search was exhaustive, N * N * d up to 2e11, else
      measured on a fixed subsample of 2000 points, at least 0.99 by construction), and with
      regression targets `target_gap`, the gap `|y_i - y_j|` beyond which a neighbour's target
      counts as another. Uniform, k-DPP, EpochShuffle and ActiveBias report nothing.
  """

  batches: int
  streams: int
  fallback_batches: int
  fallback_points: int
  last_step_delivered: int | None
  report: dict[str, float]


class _Built:
  """What applying a batcher to a dataset produced: the data, the drawer and its counters."""

  def __init__(self, drawer: _contract.BatchDrawer, data: _reading.Materialized, refreshing: bool,
               files: _data_files.DataFiles | None):
    self.drawer = drawer
    self.elements = data.elements
    # Created once, outside the dataset functions, so that the functions capture them as inputs.
    self.element_tensors = tf.nest.map_structure(_arrays.to_tensor, data.elements)
    self.files = files
    # What the stream's functions read for an eager tensor: its file's contents (`data_dir`), or
    # the tensor itself, which they capture.
    self.read: Callable[[tf.Tensor], tf.Tensor] = (lambda value: value) if files is None else files.read
    self.labels = data.labels
    self.num_points = data.features.shape[0]
    # The stream `apply` returned (weakly: the stream holds the pipeline, not the other way round).
    self.stream: Callable[[], tf.data.Dataset | None] = lambda: None
    groups = drawer.groups
    # On the host, where the draw's single-device function runs (`_stream_ops`).
    with tf.device("CPU:0"):
      # Batches drawn, streams begun, batches that needed the fallback fill, points the fill supplied.
      self.counters = tf.Variable(tf.zeros([4], tf.int64), trainable=False)
      self.last_step_delivered = tf.Variable(_UNSET, dtype=tf.int64, trainable=False)
      self.num_groups = 0 if groups is None else len(groups.levels)
      if groups is not None:
        of_points = groups.of_points.astype(np.int32)
        # A refresh regroups the points (`RepulsiveBatcher.refresh_features`).
        self.group_tensor = tf.Variable(of_points, trainable=False) if refreshing else tf.constant(of_points)
      # Ring of the last _RECORDED_STEPS steps drawn: per row the step, the points the fallback
      # fill supplied, then the batch's count of points per group.
      self.step_record = tf.Variable(
          tf.concat([tf.fill([_RECORDED_STEPS, 1], tf.constant(_UNSET, tf.int64)),
                     tf.zeros([_RECORDED_STEPS, 1 + self.num_groups], tf.int64)], axis=1), trainable=False)
      # The refresh whose features the drawer holds (model-space batchers).
      self.refresh_version = tf.Variable(_model_space.NO_REFRESH, dtype=tf.int64, trainable=False)
    # Refreshes installed in this process, and the seconds they took.
    self.refreshes = 0
    self.refresh_seconds = 0.0
    # (fingerprint of the model's weights, features) computed by the build, until the first refresh.
    self.build_features: tuple[str, np.ndarray] | None = None
    # `inclusion_weights`: each element's probability of being in a batch, and the [N] float32
    # weights 1 / probability (0 where it is 0) that the stream gathers; else None.
    self.inclusion_probabilities: np.ndarray | None = None
    self.inclusion_weights: tf.Tensor | tf.Variable | None = None


class RepulsiveBatcher:
  """A `repulsive_batch` pipeline: what `Dataset.apply` takes, and the handle to its batches.

  `dataset.apply(batcher)` reads the dataset once and returns the stream of its batches: the batch
  of step n, n = s, s + 1, ..., is one draw of the sampler over the whole dataset, a pure function
  of (seed, n). The stream is unbounded; one epoch is `steps_per_epoch` = ceil(N / batch_size)
  steps: pass it to `model.fit`, whose epoch otherwise never ends (as for any unbounded dataset).
  Where the stream starts (s):

  * `start_step=N`: at N, fixed;
  * `start_step=None` (default): where `AnnealingCallback(batcher)` says, the optimizer's step when
    `fit` starts iterating; iterating such a stream without the callback raises.

  A batcher applies to one dataset. `batcher.per_replica(input_context)` is the form for
  `tf.distribute.Strategy.distribute_datasets_from_function`: each replica gets its slice of the
  one global draw of `batch_size` elements.

  Attributes:
    batch_size: k, the global batch.
    sampler: the sampler configuration.
    seed: the seed of the draws.
    start_step: the fixed first step of every stream, or None (set by the callbacks or `start_at`).
    name: the prefix of the callbacks' log keys.
    inclusion_weights: whether each batch carries the elements' inverse inclusion probabilities
      as Keras sample weights.
    data_dir: the directory of the files the stream reads its arrays from, or None (its graph
      holds them).
  """

  def __init__(self, batch_size: int, sampler: _contract.Sampler, *, feature_fn, label_fn, seed: int,
               start_step: int | None, max_elements: int, distance_cache_bytes: int, verbose: bool, name: str,
               model_space: _model_space.ModelSpace | None, inclusion_weights: bool, data_dir: str | None):
    self.batch_size = batch_size
    self.data_dir = data_dir
    self.inclusion_weights = inclusion_weights
    self.name = name
    self.sampler = sampler
    self.seed = seed
    self.start_step = start_step
    self._feature_fn = feature_fn
    self._label_fn = label_fn
    self._max_elements = max_elements
    self._distance_cache_bytes = distance_cache_bytes
    self._verbose = verbose
    self._model_space = model_space
    self._key = tf.constant([seed, _KEY_SALT], tf.int64)
    self._built: _Built | None = None
    self._per_replica_slices = False
    # The draw covering a step, for `batch_indices` and `fallback_points` (traced once, at build).
    self._draw_once: Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None = None
    # The function whose trace the stream copies in: `_draw_once` for a drawer without a trace of
    # its own (`BatchDrawer.traced_draw`), also for one with it under `data_dir`; else None (the
    # stream calls the drawer's `draw`).
    self._copied_draw: tf.types.experimental.PolymorphicFunction | None = None
    if start_step is None:
      # Where the next stream starts, and where the last one that began in this process did start
      # (with `stats().streams`, how the callbacks check that each stream began where they said).
      with tf.device("CPU:0"):
        self._next_start = tf.Variable(_UNSET, dtype=tf.int64, trainable=False, name="repulsive_next_start")
        self._last_start = tf.Variable(_UNSET, dtype=tf.int64, trainable=False, name="repulsive_last_start")

  def __call__(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The stream of global batches of `dataset` (what `Dataset.apply` calls)."""
    built = self._build(dataset)

    def draw(stream, offset):
      indices, steps = self._draw_counted(built, stream, offset)
      return self._gather(built, indices, self._weights(built, indices)), steps

    if self._model_space is not None:
      # Drawn as they are delivered, one step at a time in the consumer's thread: after the refresh
      # of the step's features, never ahead of it, and with no draw in flight (waiting for a
      # refresh) when an iterator checkpoint is written.
      return self._finish(built, _stream_ops.unbatch_dense(_stream_ops.map_on_host(self._draws(built), draw)),
                          prefetch=False)
    draws, draw = self._with_arrays_mapped(built, self._draws(built), draw)
    return self._finish(built, _stream_ops.unbatch_dense(_stream_ops.parallel_map_on_host(draws, draw)))

  def per_replica(self, input_context: tf.distribute.InputContext) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """The form of this batcher for `distribute_datasets_from_function`.

    Returns a function for `Dataset.apply` whose stream holds, for each step, this input
    pipeline's replicas' slices of the global draw, in replica order (the order in which the
    strategy hands elements to its local replicas): replica r of step n gets elements
    r·b ... (r + 1)·b − 1 of draw n, b = batch_size / num_replicas_in_sync.

    Args:
      input_context: the `tf.distribute.InputContext` the strategy passes to the dataset function.

    Raises:
      TypeError: if `input_context` is not an InputContext.
      ValueError: if batch_size is not a multiple of the number of replicas.
    """
    if not isinstance(input_context, tf.distribute.InputContext):
      raise TypeError(f"`input_context` must be a tf.distribute.InputContext; got {input_context!r}.")
    if self._model_space is not None:
      raise ValueError(
          "a model_space batcher refreshes its features in this process and draws its global batches "
          "here: give the strategy its stream (strategy.experimental_distribute_dataset, or fit under "
          "MirroredStrategy), not per_replica pipelines.")
    replicas = input_context.num_replicas_in_sync
    pipelines = input_context.num_input_pipelines
    if self.batch_size % replicas or replicas % pipelines:
      raise ValueError(
          f"`batch_size` = {self.batch_size} (the global batch) must be a multiple of the "
          f"{replicas} replicas in sync, spread evenly over {pipelines} input pipelines.")
    local = replicas // pipelines
    first = input_context.input_pipeline_id * local
    per_replica = self.batch_size // replicas

    def apply(dataset: tf.data.Dataset) -> tf.data.Dataset:
      built = self._build(dataset)
      self._per_replica_slices = True

      def draw_slices(stream, offset):
        indices, steps = self._draw_counted(built, stream, offset)
        weights = self._weights(built, indices)
        local_slices = lambda per_step: tf.reshape(per_step, [-1, replicas, per_replica])[:, first:first + local]  # noqa: E731
        slices = self._gather(built, local_slices(indices), None if weights is None else local_slices(weights))
        return slices, tf.tile(steps[:, None], [1, local])

      draws, draw = self._with_arrays_mapped(built, self._draws(built), draw_slices)
      return self._finish(built, _stream_ops.unbatch_dense(_stream_ops.unbatch_dense(
          _stream_ops.parallel_map_on_host(draws, draw))))

    return apply

  # The handle: what callbacks, diagnostics and users ask of a built pipeline.

  @property
  def steps_per_epoch(self) -> int:
    """ceil(N / batch_size), the steps of one epoch (for `model.fit(steps_per_epoch=...)`)."""
    return math.ceil(self._require_built().num_points / self.batch_size)

  @property
  def per_replica_slices(self) -> bool:
    """Whether the stream holds replicas' slices (`per_replica`) rather than whole global batches."""
    return self._per_replica_slices

  @property
  def num_points(self) -> int:
    """N, the number of elements the batches are drawn from."""
    return self._require_built().num_points

  @property
  def elements(self) -> Any:
    """The materialised elements, nested numpy arrays with leading dimension N."""
    return self._require_built().elements

  @property
  def data_files(self) -> list[str]:
    """The files under `data_dir` the stream reads (what every process that runs it must see); [] without."""
    files = self._require_built().files
    return [] if files is None else files.paths

  def check_data_files(self, service: str, timeout: float = 60.0) -> int:
    """Checks, before the stream is shipped, that every tf.data service worker can map `data_files`.

    Each worker registered with the dispatcher at `service` reports whether it sees each file at
    the length the build wrote; nothing is drawn. A stream shipped to a worker that cannot see
    them would fail at its first batch instead.

    Example:
      Between the build and `distribute` (a dispatcher and its workers running):

      .. code-block:: python

        batcher = tf_repulsive.repulsive_batch(512, tf_repulsive.VanillaPDS(), seed=0, start_step=0,
                                               data_dir="/mnt/shared/tf_repulsive")
        stream = ds.apply(batcher)
        batcher.check_data_files("grpc://dispatcher:5000")
        shipped = stream.apply(tf.data.experimental.service.distribute(
            "distributed_epoch", "grpc://dispatcher:5000"))

    Args:
      service: the dispatcher's address, as `tf.data.experimental.service.distribute` takes it.
      timeout: seconds to wait for the workers' answers.

    Returns:
      The number of workers that answered.

    Raises:
      ValueError: the batcher has no `data_dir`; or a worker does not see a file, or sees it at
        another length (the message names the files).
      TimeoutError: no complete answer within `timeout` seconds (no worker registered, say).
    """
    if not isinstance(service, str) or not service:
      raise TypeError(
          f"`service` must be the dispatcher's address as a string (\"grpc://host:port\"); got {service!r}.")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
      raise ValueError(f"`timeout` must be a positive number of seconds; got {timeout!r}.")
    files = self._require_built().files
    if files is None:
      raise ValueError("check_data_files checks the files of a batcher built with a data_dir; this one holds its "
                       "arrays in the stream's graph, which tf.data service ships to the workers.")
    return files.check_seen_by_workers(service, float(timeout))

  @property
  def labels(self) -> np.ndarray | None:
    """`[N]` int64 labels, for samplers that need them; else None."""
    return self._require_built().labels

  @property
  def drawer(self) -> _contract.BatchDrawer:
    """The sampler's per-dataset draw (see `Sampler.build`)."""
    return self._require_built().drawer

  @property
  def model_space(self) -> _model_space.ModelSpace | None:
    """The `ModelSpace` whose features the disks are drawn on, or None (fixed features)."""
    return self._model_space

  @property
  def inclusion_probabilities(self) -> np.ndarray | None:
    """`[N]` each element's estimated probability of being in a batch, behind `inclusion_weights`; else None.

    For a `model_space` batcher, those of the refresh installed last.
    """
    return self._require_built().inclusion_probabilities

  def refresh_features(self, step: int) -> float:
    """Installs the features in force at optimizer step `step` (model-space batchers).

    Those of refresh r = step // refresh_every: the features of the model after r *
    refresh_every steps. Nothing to do when they are installed already. Otherwise, at a refresh's
    own step they are computed from the model as it is now (or read back from `directory` when
    they were saved from identical weights); between two refreshes (a resumed run) they are read
    back from `directory`. The sampler is then built on them (radius, point groups) and the
    stream continues on them. The callbacks call this in `fit`; a custom loop calls it before
    taking the batch of each step.

    Args:
      step: the optimizer step whose batch comes next.

    Returns:
      The seconds the refresh took (0.0 when nothing was to do).

    Raises:
      ValueError: for a batcher without `model_space`, a step between two refreshes whose
        features were not saved, or a refresh that changes the feature dimension.
    """
    space = self._require_model_space()
    built = self._require_built()
    step = _check_step(step)
    refresh = step // space.refresh_every
    if int(built.refresh_version.numpy()) == refresh:
      return 0.0
    began = time.perf_counter()
    at_refresh_step = step % space.refresh_every == 0
    saved = _model_space.load(space, refresh)
    fingerprint = _model_space.weights_fingerprint(space.model) if at_refresh_step else ""
    if saved is not None and (not at_refresh_step or saved[1] == fingerprint):
      features = saved[0]
    elif at_refresh_step:
      kept = built.build_features
      features = kept[1] if kept is not None and kept[0] == fingerprint else _model_space.compute(space, built.elements)
      _model_space.save(space, refresh, features, fingerprint)
    else:
      where = ("no directory is set (ModelSpace.directory)" if space.directory is None
               else f"{space.directory} does not hold them (deleted by keep_last={space.keep_last}, or never saved)")
      raise ValueError(
          f"step {step} is drawn on the features of refresh {refresh}, those of the model at step "
          f"{refresh * space.refresh_every}, and {where}: they cannot be recomputed from the model at a "
          f"later step. Resume from a checkpoint at a multiple of refresh_every={space.refresh_every}, or "
          "give the ModelSpace a directory (and keep enough refreshes) before training.")
    # The build's features, from these very weights: its drawer and inclusion weights are this refresh's.
    reuse = at_refresh_step and built.build_features is not None and built.build_features[0] == fingerprint
    built.build_features = None
    drawer = self._build_drawer(features, built.labels, previous=built.drawer)
    built.drawer.refresh_from(drawer)
    if drawer.groups is not None:
      built.group_tensor.assign(drawer.groups.of_points.astype(np.int32))
    if self.inclusion_weights and not reuse:
      self._install_inclusion_weights(drawer)
    # Last: a draw waiting for this refresh reads the drawer's state once it sees the version.
    built.refresh_version.assign(refresh)
    seconds = time.perf_counter() - began
    built.refresh_seconds += seconds
    built.refreshes += 1
    return seconds

  def refreshes_installed(self) -> int:
    """How many refreshes of the features this batcher installed in this process (model-space batchers)."""
    self._require_model_space()
    return self._require_built().refreshes

  def refresh_seconds(self) -> float:
    """The seconds this batcher's refreshes took in this process (model-space batchers)."""
    self._require_model_space()
    return self._require_built().refresh_seconds

  def _require_model_space(self) -> _model_space.ModelSpace:
    if self._model_space is None:
      raise ValueError("this batcher measures distances on fixed features; refreshes need "
                       "repulsive_batch(..., model_space=tf_repulsive.ModelSpace(...)).")
    return self._model_space

  def _check_refresh_of(self, step: int) -> None:
    """Raises if the features in force at `step` are not the ones installed (model-space batchers)."""
    if self._model_space is None:
      return
    refresh = step // self._model_space.refresh_every
    installed = int(self._require_built().refresh_version.numpy())
    if installed != refresh:
      raise ValueError(
          f"step {step} is drawn on the features of refresh {refresh}, and the batcher holds those of "
          f"{'no refresh' if installed == _model_space.NO_REFRESH else f'refresh {installed}'}: call "
          "batcher.refresh_features(step) first.")

  def batch_indices(self, step: int) -> np.ndarray:
    """The dataset indices of the global batch of step `step` (pure: the pipeline is not touched).

    Args:
      step: the global step n (>= 0).

    Returns:
      `[batch_size]` int32 array of distinct indices into the input dataset, in acceptance order.

    Raises:
      TypeError, ValueError: for a step that is not an int >= 0, or a batcher not applied yet.
    """
    step = _check_step(step)
    self._require_built()
    self._check_refresh_of(step)
    return self._draw_of(step)[0]

  def fallback_points(self, step: int) -> int:
    """How many points of the batch of `step` the fallback fill supplied (pure)."""
    step = _check_step(step)
    self._require_built()
    self._check_refresh_of(step)
    return int(self._draw_of(step)[1])

  def pi(self, step: int) -> np.ndarray | None:
    """The distribution over the drawer's point groups that the draws follow at `step`, or None.

    For Dense and Anneal PDS: pi over the mingling values 0, 1/K, ..., 1 (`BatchDrawer.pi`).
    """
    step = _check_step(step)
    drawer = self._require_built().drawer
    pi = drawer.pi(tf.constant(step, tf.int64))
    if pi is None:
      return None
    pi = np.asarray(pi, dtype=np.float64)
    groups = len(drawer.groups.levels) if drawer.groups is not None else 0
    if pi.shape != (groups,) or not np.isfinite(pi).all() or (pi < 0).any() or not pi.sum() > 0:
      raise ValueError(f"{type(drawer).__name__}.pi({step}) must be [G] = [{groups}] non-negative weights of its "
                       f"groups (BatchDrawer.groups), not all 0; got {pi!r}.")
    return pi / pi.sum()

  def group_mixes(self, steps) -> np.ndarray | None:
    """`[len(steps), G]` the share of each point group in the batches of `steps`, or None without groups.

    The groups are the drawer's (`BatchDrawer.groups`): for Easy, Dense and Anneal PDS the
    mingling values 0, 1/K, ..., 1. Read from what the pipeline recorded as it drew those steps
    in this process; steps it did not draw here (or drew more than 4096 steps ago) are recomputed.
    """
    if self._require_built().drawer.groups is None:
      return None
    counts = self._recorded(steps)[0][:, 1:].astype(np.float64)
    return counts / counts.sum(axis=1, keepdims=True)

  def fallback_counts(self, steps) -> np.ndarray:
    """`[len(steps)]` points of each step's batch that the fallback fill supplied (as `fallback_points`).

    Read from what the pipeline recorded as it drew those steps in this process; steps it did not
    draw here (or drew more than 4096 steps ago) are recomputed.
    """
    return self._recorded(steps)[0][:, 0]

  def _recorded(self, steps, recompute_at_most: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per step `[fallback points, points per group ...]` from the record, and which steps it has.

    Steps the record lacks are recomputed (a draw each) when there are at most
    `recompute_at_most` of them (None: any number); the second array is True for the steps the
    rows hold.
    """
    built = self._require_built()
    array = np.asarray(steps)
    if array.ndim == 1 and np.issubdtype(array.dtype, np.integer) and (array >= 0).all():
      steps = array.astype(np.int64)  # (a range, say: checked at once)
    else:
      steps = np.asarray([_check_step(step) for step in steps], dtype=np.int64).reshape(-1)
    rows = built.step_record.numpy()[steps % _RECORDED_STEPS]
    found = rows[:, 0] == steps
    missing = np.flatnonzero(~found)
    if self._model_space is not None and recompute_at_most is not None:
      # Only steps of the refresh installed can be drawn again here.
      installed = int(built.refresh_version.numpy())
      missing = missing[steps[missing] // self._model_space.refresh_every == installed]
    if recompute_at_most is None or missing.size <= recompute_at_most:
      for position in missing:
        if recompute_at_most is None:
          self._check_refresh_of(int(steps[position]))
        indices, fallback = self._draw_of(int(steps[position]))
        rows[position, 1] = fallback
        groups = built.drawer.groups
        if groups is not None:
          rows[position, 2:] = np.bincount(groups.of_points[indices], minlength=built.num_groups)
      found[missing] = True
    return rows[:, 1:], found

  def stats(self) -> SamplingStats:
    """Counters of the draws this pipeline made in this process."""
    built = self._require_built()
    batches, streams, fallback_batches, fallback_points = built.counters.numpy().tolist()
    last_step_delivered = int(built.last_step_delivered.numpy())
    return SamplingStats(batches=batches, streams=streams, fallback_batches=fallback_batches,
                         fallback_points=fallback_points,
                         last_step_delivered=None if last_step_delivered == _UNSET else last_step_delivered,
                         report=dict(built.drawer.report))

  def start_at(self, step: int) -> None:
    """Makes the next stream of this batcher (a new iterator) start at `step`.

    For batchers built with `start_step=None`; `AnnealingCallback` calls it with the optimizer's
    step at every epoch. One call starts one stream: a later stream without a call of its own
    fails rather than repeat the batches of this one. A stream already running is not affected:
    its position is its own (and its checkpoint's).

    Raises:
      ValueError: for a batcher with a fixed `start_step`, or a step < 0.
    """
    step = _check_step(step)
    if self.start_step is not None:
      raise ValueError(
          f"this batcher's stream starts at the fixed start_step={self.start_step}; build it "
          "with start_step=None to start it elsewhere.")
    self._next_start.assign(step)

  def transformations_after(self, dataset: tf.data.Dataset) -> list[str] | None:
    """The tf.data transformations between this batcher's stream and `dataset`, nearest the stream first.

    E.g. `["Map", "Prefetch"]` for `dataset = ds.apply(batcher).map(f).prefetch(2)`; None if
    `dataset` is not made from the stream. The callbacks use it to refuse, in `fit`, those that
    change which draw a step trains on (`shuffle`, `filter`, `skip`, `batch`, `unbatch`,
    `cache` ...).
    """
    stream = self._require_built().stream()
    if stream is None or not isinstance(dataset, tf.data.Dataset):
      return None
    return _dataset_graph.transformations_between(dataset, stream)

  def allow_build_probe(self) -> None:
    """Lets the next stream of a callback-started batcher deliver one batch (of step 0) unstarted.

    For the package's callbacks, which call it when constructed and after each `fit`: under a
    distribution strategy, Keras' `fit` takes one batch from a stream of its own to build the
    model before any callback runs, and drops that stream. A stream that begins so and asks for a
    second batch fails as an unstarted stream does; a real start (`start_at`) replaces the
    allowance. Nothing for a batcher with a fixed `start_step`.
    """
    if self.start_step is None and int(self._next_start.numpy()) == _UNSET:
      self._next_start.assign(_PROBE)

  def last_start(self) -> int | None:
    """The step at which the last stream started in this process (fixed start: `start_step`)."""
    if self.start_step is not None:
      return self.start_step
    value = int(self._last_start.numpy())
    return None if value == _UNSET else value

  # Building.

  def _require_built(self) -> _Built:
    if self._built is None:
      raise ValueError(
          "this batcher has not been applied to a dataset yet: build the pipeline with "
          "dataset.apply(batcher) first.")
    return self._built

  def _build(self, dataset: tf.data.Dataset) -> _Built:
    if not isinstance(dataset, tf.data.Dataset):
      raise TypeError(f"repulsive_batch applies to a tf.data.Dataset; got {type(dataset).__name__}.")
    if self._built is not None:
      raise ValueError(
          "this batcher already drives a pipeline; call tf_repulsive.repulsive_batch(...) again "
          "for another dataset (a sampler may configure any number of batchers).")
    sampler = self.sampler
    if self.inclusion_weights:
      _check_weighable(dataset.element_spec)
    if self.data_dir is not None:
      _check_mappable(dataset.element_spec)
    label_kind = sampler.label_kind
    if label_kind not in ("class", "target"):
      raise ValueError(f"{type(sampler).__name__}.label_kind must be 'class' or 'target'; got {label_kind!r}.")
    space = self._model_space
    # A model-space batcher measures distances on the model's features (computed below), not the input's.
    feature_fn = _no_input_features if space is not None else self._feature_fn
    data = _reading.materialize(dataset, feature_fn, self._label_fn, sampler.needs_labels, self._max_elements,
                                self._verbose, label_kind)
    num_points = data.features.shape[0]
    if self.batch_size > num_points:
      raise ValueError(
          f"`batch_size` = {self.batch_size} exceeds the dataset size N = {num_points}; a batch "
          "holds distinct elements.")
    if space is None:
      drawer = self._build_drawer(data.features, data.labels)
    else:
      # The model as it is now: the drawer's shapes and the build's checks. Which refresh the
      # stream draws on is installed later, by `refresh_features`.
      build_features = _model_space.compute(space, data.elements)
      refreshable = self._build_drawer(build_features, data.labels).refreshable()
      if refreshable is None:
        raise TypeError(
            f"{type(sampler).__name__} cannot take refreshed features (its drawer's refreshable() is None): "
            "with model_space use Uniform, VanillaPDS, EasyPDS, DensePDS or AnnealPDS.")
      drawer = refreshable
    files = None if self.data_dir is None else _data_files.DataFiles(self.data_dir, self._verbose)
    self._built = _Built(drawer, data, refreshing=space is not None, files=files)
    if self.inclusion_weights:
      self._install_inclusion_weights(drawer)
    if space is not None:
      # Kept for the first refresh: when the model has not changed since (a new training's step
      # 0), it installs these instead of a second inference pass.
      self._built.build_features = (_model_space.weights_fingerprint(space.model), build_features)
    traced_draw = drawer.traced_draw()
    # A partial, not a lambda: TensorFlow counts traces per code object, and would call one trace
    # per batcher "retracing" after a few batchers.
    copied_draw = tf.function(functools.partial(_checked_draw, drawer, self._key, batch_size=self.batch_size))
    # With `data_dir` the stream copies a trace in whatever the drawer: the copy is where every
    # array the draw takes passes through `read`.
    self._copied_draw = copied_draw if traced_draw is None or files is not None else None
    self._draw_once = copied_draw if traced_draw is None else functools.partial(traced_draw, self._key)
    # Traces the draw (the stream copies that trace in) and checks the fill at step 0.
    self._warn_if_first_batch_needs_the_fill()
    return self._built

  def _install_inclusion_weights(self, drawer: _contract.BatchDrawer) -> None:
    """Estimates `drawer`'s inclusion probabilities and installs their inverses as the stream's weights."""
    built = self._require_built()
    probabilities = drawer.inclusion_probabilities(tf.constant([self.seed, _INCLUSION_SALT], tf.int64), self._verbose)
    if probabilities is None:
      raise ValueError(
          f"inclusion_weights=True weights each element by its probability of being in a batch, which "
          f"{type(self.sampler).__name__} does not provide (its drawer's inclusion_probabilities() is None; "
          "AnnealPDS's change with the step): use Uniform, VanillaPDS, EasyPDS or DensePDS.")
    probabilities = np.asarray(probabilities, np.float64)
    if probabilities.shape != (built.num_points,) or not np.all(np.isfinite(probabilities)) or np.any(
        probabilities < 0):
      raise ValueError(
          f"{type(built.drawer).__name__}.inclusion_probabilities must return [N] = [{built.num_points}] finite "
          f"probabilities >= 0; got shape {probabilities.shape}.")
    weights = inverse_inclusion(probabilities).astype(np.float32)
    built.inclusion_probabilities = probabilities
    if built.inclusion_weights is not None:
      built.inclusion_weights.assign(weights)
      return
    with tf.device("CPU:0"):
      # A refresh estimates them again on its features (`refresh_features`).
      built.inclusion_weights = (tf.constant(weights) if self._model_space is None
                                 else tf.Variable(weights, trainable=False))

  def _build_drawer(self, features: np.ndarray, labels: np.ndarray | None,
                    previous: _contract.BatchDrawer | None = None) -> _contract.BatchDrawer:
    """The sampler's drawer for these features (replacing `previous`), its type and steps per draw checked."""
    space = self._model_space
    sampler = self.sampler
    # A model-space stream draws each step as it delivers it (see `__call__`).
    most = 16 if space is None else 1
    drawer = sampler.build(_contract.SamplingContext(
        features=features, labels=labels, batch_size=self.batch_size,
        distance_cache_bytes=self._distance_cache_bytes, verbose=self._verbose, max_steps_per_draw=most))
    if not isinstance(drawer, _contract.BatchDrawer):
      raise TypeError(
          f"{type(sampler).__name__}.build must return a tf_repulsive.BatchDrawer (subclass it); got "
          f"{type(drawer).__name__}.")
    _checks.integer(drawer.steps_per_draw, f"{type(drawer).__name__}.steps_per_draw", 1,
                    hint="It is the number of steps one draw covers.")
    if drawer.steps_per_draw > most:
      raise ValueError(
          f"{type(drawer).__name__}.steps_per_draw = {drawer.steps_per_draw} exceeds the context's "
          f"max_steps_per_draw = {most}.")
    _check_report(drawer, features.shape[0], previous)
    return drawer

  def _draw_of(self, step: int) -> tuple[np.ndarray, int]:
    """The indices and fallback count of the batch of `step` (from the draw that covers it)."""
    steps_per_draw = self._require_built().drawer.steps_per_draw
    assert self._draw_once is not None  # set with the drawer
    indices, fallback = self._draw_once(tf.constant(step - step % steps_per_draw, tf.int64))
    return indices.numpy()[step % steps_per_draw], int(fallback[step % steps_per_draw])

  def _draw_counted(self, built: _Built, stream: tf.Tensor, offset: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The indices of the stream's draw number `offset` and their steps, counted and recorded.

    `stream` is `[start, probe]` (see `_draws`). Returns `[rows, k]` and `[rows]`: the steps of
    the draw from the stream's start on (a stream that starts mid-draw skips that draw's earlier
    steps; a probe stream has its first step only).
    """
    start, probe = stream[0], stream[1] > 0
    steps_per_draw = built.drawer.steps_per_draw
    first_step = (start // steps_per_draw + offset) * steps_per_draw
    skip = tf.maximum(start - first_step, 0)
    end = tf.where(probe, skip + 1, steps_per_draw)
    checks = []
    if self.start_step is not None:
      # A fixed-start stream that begins after an earlier one delivered later steps would repeat
      # them. (One delivered batch does not count: Keras' model build under a distribution
      # strategy takes one and drops its iterator; a user's peek does the same.)
      checks.append(tf.cond(
          tf.equal(offset, 0),
          lambda: tf.debugging.assert_less_equal(
              built.last_step_delivered.read_value(), start, message=_BEGUN_AGAIN_MESSAGE),
          tf.no_op))
    space = self._model_space
    if space is not None:
      # The draw (and the point groups recorded with it) reads the refreshed state only once
      # its refresh is in: prefetching waits here. A probe (Keras' model build) draws on any.
      refresh = first_step // space.refresh_every
      checks.append(tf.cond(probe, tf.no_op, lambda: _model_space.wait_for_refresh(
          built.refresh_version, refresh, first_step + skip, space.timeout_seconds)))
    with tf.control_dependencies(checks):
      if self._copied_draw is None:
        indices, fallback = _checked_draw(built.drawer, self._key, first_step, self.batch_size)
      else:
        # The ops of the build's trace, not a second trace of the drawer's draw (nor a call op,
        # which would make tf.data instantiate the map as a multi-device function per iterator).
        indices, fallback = _stream_ops.inlined(self._copied_draw, first_step, read=built.read)
      indices, fallback = indices[skip:end], tf.cast(fallback[skip:end], tf.int64)
      steps = first_step + tf.range(skip, end, dtype=tf.int64)
      recorded = [built.counters.assign_add(tf.stack([
          tf.cast(tf.size(fallback), tf.int64), tf.cast(tf.equal(offset, 0), tf.int64),
          tf.math.count_nonzero(fallback), tf.reduce_sum(fallback)]))]
      columns = [steps[:, None], fallback[:, None]]
      if built.num_groups:
        columns.append(tf.math.bincount(tf.gather(built.read(built.group_tensor), indices), minlength=built.num_groups,
                                        maxlength=built.num_groups, dtype=tf.int64, axis=-1))
      recorded.append(built.step_record.scatter_nd_update((steps % _RECORDED_STEPS)[:, None],
                                                          tf.concat(columns, axis=1)))
    with tf.control_dependencies(recorded):
      return tf.identity(indices), steps

  def _with_arrays_mapped(self, built: _Built, draws: tf.data.Dataset,
                          draw: Callable[[tf.Tensor, tf.Tensor], Any]) -> tuple[tf.data.Dataset, Callable[..., Any]]:
    """`draws` and `draw` for the parallel map; with `data_dir`, the arrays `draw` reads come with each draw.

    A function of its own maps the files, one draw at a time, and appends their arrays to the
    draw's element: TensorFlow copies the arrays of the files a function maps when it instantiates
    it, which the parallel map would do in each thread that starts a first call (`_data_files`).
    """
    files = built.files
    if files is None:
      return draws, draw
    assert self._copied_draw is not None  # with data_dir the stream always copies the draw's trace
    values_read = tf.nest.flatten(built.element_tensors) + [built.inclusion_weights]
    if built.num_groups:
      values_read.append(built.group_tensor)
    values_read += self._copied_draw.get_concrete_function(tf.TensorSpec([], tf.int64)).captured_inputs
    paths = files.paths_of(values_read)

    def with_arrays(stream, offset):
      return (stream, offset, *files.mapped(paths))

    def draw_with_arrays(stream, offset, *arrays):
      files.receive(paths, arrays)
      return draw(stream, offset)

    return _stream_ops.map_on_host(draws, with_arrays), draw_with_arrays

  def _weights(self, built: _Built, indices: tf.Tensor) -> tf.Tensor | None:
    """`[rows, k]` the elements' inclusion weights, scaled to average 1 over each global batch; None without."""
    if built.inclusion_weights is None:
      return None
    weights = tf.gather(built.read(built.inclusion_weights), indices)
    # Keras averages the weighted losses over the batch: with weights that average 1 the step's
    # loss is the ratio estimate sum_b w_i loss_i / sum_b w_i of the dataset's mean loss.
    return weights * (self.batch_size / tf.reduce_sum(weights, axis=-1, keepdims=True))

  @staticmethod
  def _gather(built: _Built, indices: tf.Tensor, weights: tf.Tensor | None) -> Any:
    batch = tf.nest.map_structure(lambda component: tf.gather(built.read(component), indices),
                                  built.element_tensors)
    if weights is None:
      return batch
    if len(batch) == 2:
      return (*batch, weights)
    inputs, targets, sample_weight = batch
    return inputs, targets, sample_weight * tf.cast(weights, sample_weight.dtype)

  def _draws(self, built: _Built) -> tf.data.Dataset:
    """The stream of draws: per draw `[start, probe]` of the stream, and the draw's number in it.

    A `Dataset.range` of draw numbers (splittable, checkpointed) plus the start; draw j covers
    steps j·S ... j·S + S − 1, so a step's batch does not depend on where the stream started.
    `probe` is 1 for a stream that `allow_build_probe` let begin without a start.
    """
    last_draw = _LAST_STEP // built.drawer.steps_per_draw
    draws = tf.data.Dataset.range(last_draw).repeat()
    if self.start_step is not None:
      # Zipped, not mapped: a dataset function costs every new iterator its instantiation.
      fixed = tf.constant([self.start_step, 0], tf.int64)
      return tf.data.Dataset.zip(tf.data.Dataset.from_tensors(fixed).repeat(), draws)
    next_start, last_start = self._next_start, self._last_start

    # The start is read once, at the stream's first element, and then kept in the scan state,
    # which iterator checkpoints save: a restored stream continues from its own start. Reading it
    # uses it up, so that a second stream (a new iterator nobody started, a repeat() after the
    # batcher) fails instead of repeating the first one's batches.
    def locate(stream, offset):
      def read_start():
        value = next_start.read_value()
        probe = tf.equal(value, _PROBE)
        known = tf.debugging.Assert(tf.logical_or(value >= 0, probe), [_NO_START_MESSAGE])
        with tf.control_dependencies([known]):
          recorded = [tf.cond(probe, tf.no_op, lambda: last_start.assign(value).op), next_start.assign(_UNSET)]
        with tf.control_dependencies(recorded):
          return tf.stack([tf.maximum(value, 0), tf.cast(probe, tf.int64)])

      stream = tf.cond(stream[0] < 0, read_start, lambda: stream)
      # A probe stream has one batch.
      within = tf.debugging.Assert(tf.logical_or(tf.equal(stream[1], 0), tf.equal(offset, 0)),
                                   [_PROBE_ENDED_MESSAGE])
      with tf.control_dependencies([within]):
        return stream, (tf.identity(stream), offset)

    return _stream_ops.scan_on_host(draws, tf.constant([_UNSET, 0], tf.int64), locate)

  @staticmethod
  def _finish(built: _Built, batches: tf.data.Dataset, prefetch: bool = True) -> tf.data.Dataset:
    """The stream of (batch, step) as it leaves the pipeline: prefetched, the step recorded, dropped."""
    options = tf.data.Options()
    # The counters (and the start of a callback-started stream) are variables; their values are
    # not in iterator checkpoints and need not be: the stream's position and start are.
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    # Sharding the step stream by element would hand workers whole batches of different steps;
    # `per_replica` shards each step's draw instead.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    # tf.data's default static optimizations rewrite the pipeline through a serialised copy of its
    # graph, and that copy holds every tensor the dataset functions capture: the whole dataset
    # again, for every iterator. The draw is parallel already; the prefetch is the one default
    # that matters for it.
    options.experimental_optimization.apply_default_optimizations = False
    last_step_delivered = built.last_step_delivered

    # After the prefetch, so that it records what leaves the pipeline, not what is drawn ahead:
    # the callbacks refuse a step trained beyond the last one delivered (a replay, such as a
    # cache() after a take()).
    def deliver(batch, step):
      with tf.control_dependencies([last_step_delivered.assign(step)]):
        return tf.nest.map_structure(tf.identity, batch)

    if prefetch:
      batches = batches.prefetch(tf.data.AUTOTUNE)
    stream = _stream_ops.map_on_host(batches, deliver).with_options(options)
    built.stream = weakref.ref(stream)
    return stream

  def _warn_if_first_batch_needs_the_fill(self) -> None:
    # A filled batch is still k distinct points, but partly uniform: say so once, at build time,
    # rather than let the repulsion weaken unnoticed.
    built = self._require_built()
    fallback = self._draw_of(0)[1]
    if fallback:
      report = built.drawer.report
      details = "".join(f", {name} {value:.4g}" for name, value in report.items())
      advice = ""
      if "radius" in report:  # a disk sampler's: say what to change
        where = "on this data" if self.pi(0) is None else "on the points that pi favours at step 0"
        advice = (f" The radius is too large for this batch size {where}: pass radius=\"auto\" or a smaller "
                  "`radius` to the sampler (or raise `max_darts` if the disks do fit).")
      warnings.warn(
          f"the darts filled only {self.batch_size - fallback} of {self.batch_size} points of the "
          f"first batch ({type(self.sampler).__name__}{details}); a uniform fill supplied the other "
          f"{fallback}.{advice}", RuntimeWarning, stacklevel=5)


def _check_report(drawer: _contract.BatchDrawer, num_points: int, previous: _contract.BatchDrawer | None) -> None:
  """Raises unless the drawer's `report` and `groups` are as `BatchDrawer` says (at a refresh: as `previous`'s)."""
  name = type(drawer).__name__
  if not isinstance(drawer.report, Mapping) or not all(
      isinstance(key, str) and isinstance(value, numbers.Real) and not isinstance(value, bool)
      for key, value in drawer.report.items()):
    raise TypeError(f"{name}.report must map names (str) to numbers, e.g. {{'radius': 0.5}}; got {drawer.report!r}.")
  groups = drawer.groups
  if groups is None:
    if previous is not None and previous.groups is not None:
      raise ValueError(f"the refreshed {name} has no groups, and the one it replaces had; a refresh keeps them.")
    return
  if not isinstance(groups, _contract.PointGroups):
    raise TypeError(f"{name}.groups must be a tf_repulsive.PointGroups or None; got {type(groups).__name__}.")
  # AnnealingCallback's keys `<batcher>_pi_<g>` and `<batcher>_fallback_batches` are taken.
  if not isinstance(groups.name, str) or not groups.name.isidentifier() or groups.name in ("pi", "fallback_batches"):
    raise ValueError(f"{name}.groups.name must be a name for log keys other than 'pi' and 'fallback_batches', "
                     f"such as 'mingling'; got {groups.name!r}.")
  levels = np.asarray(groups.levels)
  if levels.ndim != 1 or not levels.size or not np.issubdtype(levels.dtype, np.number) or not np.isfinite(levels).all():
    raise ValueError(f"{name}.groups.levels must be a [G] array of finite numbers, G >= 1; got {groups.levels!r}.")
  of_points = np.asarray(groups.of_points)
  if (of_points.shape != (num_points,) or not np.issubdtype(of_points.dtype, np.integer)
      or of_points.min(initial=0) < 0 or of_points.max(initial=0) >= levels.size):
    raise ValueError(
        f"{name}.groups.of_points must be [N] = [{num_points}] integers in 0 ... {levels.size - 1} (one group "
        f"per point, G = len(levels) = {levels.size}); got {of_points.dtype.name} {of_points.shape}.")
  before = None if previous is None else previous.groups
  if before is not None and (before.name, len(before.levels)) != (groups.name, levels.size):
    raise ValueError(
        f"the refreshed {name}'s groups are {groups.name!r} with {levels.size} groups, and the ones it "
        f"replaces {before.name!r} with {len(before.levels)}; a refresh keeps them.")


def _checked_draw(drawer: _contract.BatchDrawer, key: tf.Tensor, first_step: tf.Tensor,
                  batch_size: int) -> tuple[tf.Tensor, tf.Tensor]:
  """`drawer.draw`, its result's shapes checked against the contract when it is traced."""
  indices, fallback = drawer.draw(key, first_step)
  steps_per_draw = drawer.steps_per_draw
  if (not indices.shape.is_compatible_with([steps_per_draw, batch_size])
      or not fallback.shape.is_compatible_with([steps_per_draw])):
    raise ValueError(
        f"{type(drawer).__name__}.draw must return indices of shape [steps_per_draw, batch_size] = "
        f"[{steps_per_draw}, {batch_size}] and fallback counts of shape [{steps_per_draw}]; got "
        f"{indices.shape} and {fallback.shape}. (A drawer of one step per draw returns "
        "indices[None], fallback[None].)")
  return tf.ensure_shape(tf.cast(indices, tf.int32), [steps_per_draw, batch_size]), tf.cast(fallback, tf.int32)


def inverse_inclusion(probabilities: np.ndarray) -> np.ndarray:
  """1 / each inclusion probability; 0 for a point the batches never hold (its weight is never gathered)."""
  return np.where(probabilities > 0, 1.0 / np.maximum(probabilities, 1e-300), 0.0)


def _check_weighable(element_spec: Any) -> None:
  """Raises unless the elements are Keras' (x, y) or (x, y, sample_weight) tuples, the forms weights join."""
  if isinstance(element_spec, tuple) and len(element_spec) in (2, 3):
    if len(element_spec) == 2:
      return
    weight = element_spec[2]
    if isinstance(weight, tf.TensorSpec) and weight.dtype.is_floating and weight.shape.rank == 0:
      return
    raise TypeError(
        f"inclusion_weights=True multiplies the sample weight of (x, y, sample_weight) elements by the "
        f"inclusion weight; the third component must be a float scalar per element, got {weight}.")
  raise TypeError(
      "inclusion_weights=True hands each batch to Keras as (x, y, sample_weight): the elements must be "
      f"(x, y) or (x, y, sample_weight) tuples; got elements of spec {element_spec}. Map them to that "
      "form before the batcher.")


def _check_mappable(element_spec: Any) -> None:
  """Refuses, before reading, elements that `data_dir` files cannot hold."""
  for spec in tf.nest.flatten(element_spec):
    if isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string:
      raise ValueError(
          "with `data_dir` the stream reads its elements from memory-mapped files of numbers; this dataset has "
          "a tf.string component. Map strings to numbers before the batcher (a tf.lookup table, say), or "
          "build without data_dir.")


def _check_step(step: Any) -> int:
  return _checks.integer(step, "step", 0)


def _no_input_features(*components: Any) -> tf.Tensor:
  """The feature function of a model-space batcher's reading: the input's features are not used."""
  del components
  return tf.zeros([1])


def repulsive_batch(
    batch_size: int,
    sampler: _contract.Sampler,
    *,
    feature_fn: Callable[..., tf.Tensor] | None = None,
    label_fn: Callable[..., tf.Tensor] | None = None,
    seed: int | None = None,
    start_step: int | None = None,
    max_elements: int = _DEFAULT_MAX_ELEMENTS,
    distance_cache_bytes: int = _DEFAULT_DISTANCE_CACHE_BYTES,
    verbose: bool = True,
    name: str = "sampler",
    model_space: _model_space.ModelSpace | None = None,
    inclusion_weights: bool = False,
    data_dir: str | os.PathLike | None = None,
) -> RepulsiveBatcher:
  """Draws every mini-batch of a finite dataset from a repulsive point process.

  For use with `tf.data.Dataset.apply`. The input is read into memory once (with feature vectors,
  labels, mingling values and the radius estimate: one-time preprocessing); then the batch of
  global step n is one draw of `sampler` over the whole dataset, as TensorFlow graph ops with
  stateless randomness keyed by `(seed, n)`. The result is an unbounded stream of batches (steps
  s, s + 1, ...) with the structure `Dataset.batch` gives and a static leading dimension
  `batch_size`; one epoch is `batcher.steps_per_epoch` steps.

  Example:

  >>> import numpy as np, tensorflow as tf, tf_repulsive
  >>> points = tf.data.Dataset.from_tensor_slices(np.arange(100, dtype=np.float32)[:, None])
  >>> batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.VanillaPDS(radius=3.0), seed=0,
  ...                                        start_step=0)
  >>> batches = points.apply(batcher)
  >>> first = next(iter(batches)).numpy().ravel()
  >>> bool(np.all(np.diff(np.sort(first)) >= 3.0)), batcher.steps_per_epoch
  (True, 10)

  Args:
    batch_size: k, the number of distinct elements per batch (the global batch); 1 <= k <= N.
    sampler: `Uniform()`, `EpochShuffle()`, `VanillaPDS()`, `EasyPDS()`, `DensePDS(pi)`,
      `AnnealPDS()`, `KDPP()`, `FastKDPP()` or `ActiveBias()`: a configuration, reusable across
      batchers.
    feature_fn: called like a `Dataset.map` function on an element (`fn(x, y)` for `(x, y)`
      elements, `fn(element)` for dicts); returns the numeric tensor (or nested tensors)
      distances are measured in, flattened, concatenated, as float32. Default, following Keras'
      element conventions: for `(x,)`, `(x, y)` and `(x, y, sample_weight)` tuples every numeric
      tensor of `x` (one input, or all inputs of a multi-input `x`, a tuple or dict, in
      `tf.nest` order); for dict elements the one numeric component besides "label"; for a
      single tensor, itself. Longer tuples and ambiguous dicts need `feature_fn`.
    label_fn: likewise, returns the integer class id, for the samplers that need labels.
      Default: `y` of `(x, y)` and `(x, y, sample_weight)` (never the sample weight), or the
      "label" key of dicts.
    seed: seed of the batch draws, a 64-bit integer. None: drawn like TensorFlow ops draw theirs,
      so reproducible after `tf.random.set_seed` / `keras.utils.set_random_seed`, random otherwise.
    start_step: the step of the stream's first batch. None (default): set by
      `AnnealingCallback(batcher)` to the optimizer's step when `fit` starts; iterating without
      the callback raises. An int: fixed (custom loops, tf.data service).
    max_elements: bound on how many elements are read; more raises (guards unknown-size inputs).
    distance_cache_bytes: when the N x N float32 squared-distance matrix fits in this many bytes
      (default 512 MiB: N up to ~11,500), it is computed once and disk tests become lookups;
      otherwise each batch computes its distances from the features (Gram blocks). 0 disables.
    verbose: show a progress bar (on stderr) for any one-time step of the build that takes more
      than about 2 s: reading the dataset, mingling values, the distance cache, the k-DPP
      eigendecomposition. False: silent.
    name: what the callbacks' log keys start with (`<name>_mingling`, ...); batchers whose
      callbacks run in one `fit` need different names.
    model_space: a `ModelSpace`: distances are measured on features computed from the model
      being trained (its embedding, its per-example gradient), recomputed every
      `refresh_every` steps, instead of on `feature_fn`'s. The sampler must be Uniform or a
      Poisson disk sampler; the build computes the features of the model as it is then.
    inclusion_weights: give every element of a batch the sample weight 1 / pi_i, its inverse
      probability of being in a batch, scaled to average 1 over the global batch: the stream's
      elements become `(x, y, sample_weight)` (an existing sample weight is multiplied), and the
      mean weighted loss Keras minimises is the ratio estimate of the dataset's mean loss. Disks
      draw isolated elements more often than crowded ones; the weights undo that skew of the
      expected gradient and keep the repulsion's spread. The build estimates pi once (again on
      each refresh of `model_space`) from 256 draws of the sampler (`batcher.inclusion_probabilities`).
      Needs `(x, y)` or `(x, y, sample_weight)` elements and a sampler whose law is the same at
      every step: Uniform, VanillaPDS, EasyPDS or DensePDS.
    data_dir: a directory where the build writes the arrays the stream draws from (the elements,
      feature vectors, the sampler's tables; each of 64 KiB or more) as files named by the hash
      of their content; the stream's graph then names the files instead of holding the arrays,
      and stays a few KB at any N. That is the form to ship to tf.data service, whose graphs
      cannot exceed 2 GB and whose every process would otherwise hold a copy: each process that
      runs the stream (every service worker) memory-maps the files when its iterator starts,
      and must see them at the same absolute path (a shared file system, or a copy of the
      directory). Files already there from an earlier build of the same arrays are reused.
      Elements must be numeric; `model_space` refreshes features in this process and takes no
      data_dir. None (default): the graph holds the arrays.

  Returns:
    `RepulsiveBatcher`: `dataset.apply(batcher)` gives the batches; the batcher is the handle
    for `steps_per_epoch`, `batch_indices(step)`, `stats()` and the callbacks.

  Raises:
    TypeError: for arguments of the wrong type, ragged or sparse components, non-numeric
      features, non-integer labels.
    ValueError: for batch_size outside [1, N], an empty or infinite dataset, an input that differs
      from run to run or carries randomness (an unseeded shuffle, a random op or Keras random
      layer before the batcher: apply augmentation after it), elements whose features or labels
      the defaults cannot tell (tuples of four or more, ambiguous dicts, nested y), non-finite
      features or ones beyond float32, missing labels or a single class for the mingling
      samplers, neighbors >= N, a batcher applied twice, a `data_dir` that is a URL or cannot
      be written, string elements or `model_space` with a `data_dir`.
  """
  batch_size = _checks.integer(batch_size, "batch_size", 1)
  max_elements = _checks.integer(max_elements, "max_elements", 1)
  distance_cache_bytes = _checks.integer(distance_cache_bytes, "distance_cache_bytes", 0)
  if not isinstance(sampler, _contract.Sampler):
    raise TypeError(
        f"`sampler` must be a tf_repulsive sampler (an instance of a tf_repulsive.Sampler subclass, "
        f"such as tf_repulsive.VanillaPDS(), or one of your own); got {sampler!r}.")
  for fn, argument in ((feature_fn, "feature_fn"), (label_fn, "label_fn")):
    if fn is not None and not callable(fn):
      raise TypeError(f"`{argument}` must be callable or None; got {fn!r}.")
  if model_space is not None:
    if not isinstance(model_space, _model_space.ModelSpace):
      raise TypeError(f"`model_space` must be a tf_repulsive.ModelSpace or None; got {model_space!r}.")
    if feature_fn is not None:
      raise ValueError("pass `feature_fn` (features of the elements) or `model_space` (features computed by the "
                       "model), not both.")
  if seed is not None:
    seed = _checks.integer(seed, "seed")
  if seed is not None and not -2**63 <= seed < 2**63:
    raise ValueError(f"`seed` must be a 64-bit integer, in [-2**63, 2**63 - 1]; got {seed}.")
  if start_step is not None:
    start_step = _check_step(start_step)
  for flag, argument in ((verbose, "verbose"), (inclusion_weights, "inclusion_weights")):
    if not isinstance(flag, bool):
      raise TypeError(f"`{argument}` must be True or False; got {flag!r}.")
  if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
    raise ValueError(
        f"`name` must start with a letter and hold letters, digits and underscores only (it prefixes "
        f"the callbacks' log keys); got {name!r}.")
  if data_dir is not None:
    if model_space is not None:
      raise ValueError(
          "a model_space batcher refreshes its features in this process, and a stream shipped elsewhere "
          "(what data_dir is for) could not follow them: pass model_space or data_dir, not both.")
    data_dir = _data_files.check_directory(data_dir)
  if seed is None:
    # Like TensorFlow's own ops with seed=None: reproducible under tf.random.set_seed (or
    # keras.utils.set_random_seed), random otherwise.
    seed = int(tf.random.uniform([], maxval=2**62, dtype=tf.int64))
  return RepulsiveBatcher(batch_size, sampler, feature_fn=feature_fn, label_fn=label_fn, seed=seed,
                          start_step=start_step, max_elements=max_elements,
                          distance_cache_bytes=distance_cache_bytes, verbose=verbose, name=name,
                          model_space=model_space, inclusion_weights=inclusion_weights, data_dir=data_dir)
