"""`repulsive_batch`: the tf.data transformation that draws each mini-batch from a point process.

The batches are a map over a stream of step numbers: the batch of step n is a pure function of
(seed, n), and n itself is data (a `Dataset.range` position), so iterator checkpoints, tf.data
service and `tf.distribute` carry it like any other element.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _arrays
from tf_repulsive import _checks
from tf_repulsive import _stream_ops
from tf_repulsive import _progress
from tf_repulsive import _samplers

_READ_CHUNK = 4096
# In the error of an element whose shape differs from the first element's.
_SHAPE_MISMATCH = "tf_repulsive: an element shape differs from that of the first element"
_DEFAULT_MAX_ELEMENTS = 10_000_000
_DEFAULT_DISTANCE_CACHE_BYTES = 512 * 2**20
_KEY_SALT = 0x5EED
# Steps are int64. The step range repeats past this bound, which no training reaches, so that the
# stream's cardinality is infinite (Keras then asks for steps_per_epoch instead of waiting for an end).
_LAST_STEP = 2**62
_UNSET = -1
# Steps whose batches' mingling mix is kept (per step, as it is drawn) for the callbacks' logs.
_MIX_HISTORY = 4096
_NO_START_MESSAGE = (
    "repulsive_batch: the batch stream does not know its first step. A stream of a batcher built "
    "with start_step=None starts where the last batcher.start_at(step) said, and each start serves "
    "one stream: none was left for this one (a new iterator, or a repeat() after the batcher). In "
    "model.fit add tf_repulsive.AnnealingCallback(batcher) to the callbacks (it starts every stream "
    "at the optimizer's step, also when training resumes); elsewhere call batcher.start_at(step) "
    "before each new iterator, or build the batcher with repulsive_batch(..., start_step=N).")


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
    radius: the disk radius in use (the estimate when the sampler's is None, the calibrated one
      for "auto"); None without disks.
    mingling_agreement: for samplers with mingling values, the share of points whose value
      equals an exhaustive nearest-neighbour search's: 1.0 when the search was exhaustive (N * N * d
      up to 2e11), else measured on a fixed subsample of 2000 points (at least 0.99 by
      construction); None without mingling values.
  """

  batches: int
  streams: int
  fallback_batches: int
  fallback_points: int
  last_step_delivered: int | None
  radius: float | None
  mingling_agreement: float | None


@dataclasses.dataclass(frozen=True)
class _Materialized:
  """The input dataset read once into memory."""

  elements: Any  # nested structure of numpy arrays with leading dimension N
  features: np.ndarray  # [N, d] float32
  labels: np.ndarray | None  # [N] int64


class _Built:
  """What applying a batcher to a dataset produced: the data, the drawer and its counters."""

  def __init__(self, drawer: _samplers.BatchDrawer, data: _Materialized):
    self.drawer = drawer
    self.elements = data.elements
    # Created once, outside the dataset functions, so that the functions capture them as inputs.
    self.element_tensors = tf.nest.map_structure(_arrays.to_tensor, data.elements)
    self.labels = data.labels
    self.num_points = data.features.shape[0]
    self.mingling = drawer.mingling
    # On the host, where the draw's single-device function runs (`_stream_ops`).
    with tf.device("CPU:0"):
      # Batches drawn, streams begun, batches that needed the fallback fill, points the fill supplied.
      self.counters = tf.Variable(tf.zeros([4], tf.int64), trainable=False)
      self.last_step_delivered = tf.Variable(_UNSET, dtype=tf.int64, trainable=False)
      if self.mingling is not None:
        self.num_mingling_values = self.mingling.neighbors + 1
        self.mingling_tensor = tf.constant(self.mingling.values.astype(np.int32))
        # Ring of the last _MIX_HISTORY steps drawn: per row the step, then its mingling-value counts.
        self.mix_record = tf.Variable(
            tf.concat([tf.fill([_MIX_HISTORY, 1], tf.constant(_UNSET, tf.int64)),
                       tf.zeros([_MIX_HISTORY, self.num_mingling_values], tf.int64)], axis=1), trainable=False)


class RepulsiveBatcher:
  """A `repulsive_batch` pipeline: what `Dataset.apply` takes, and the handle to its batches.

  `dataset.apply(batcher)` reads the dataset once and returns the stream of its batches: the batch
  of step n, n = s, s + 1, ..., is one draw of the sampler over the whole dataset, a pure function
  of (seed, n). The stream is unbounded; one epoch is `steps_per_epoch` = ceil(N / batch_size)
  steps (pass it to `model.fit`). Where the stream starts (s):

  * `start_step=N`: at N, fixed;
  * `start_step=None` (default): where `AnnealingCallback(batcher)` says, the optimizer's step when
    `fit` starts iterating; iterating such a stream without the callback raises.

  A batcher applies to one dataset. `batcher.per_replica(input_context)` is the form for
  `tf.distribute.Strategy.distribute_datasets_from_function`: each replica gets its slice of the
  one global draw of `batch_size` elements.
  """

  def __init__(self, batch_size: int, sampler: _samplers.Sampler, *, feature_fn, label_fn, seed: int,
               start_step: int | None, max_elements: int, distance_cache_bytes: int, verbose: bool):
    self.batch_size = batch_size
    self.sampler = sampler
    self.seed = seed
    self.start_step = start_step
    self._feature_fn = feature_fn
    self._label_fn = label_fn
    self._max_elements = max_elements
    self._distance_cache_bytes = distance_cache_bytes
    self._verbose = verbose
    self._key = tf.constant([seed, _KEY_SALT], tf.int64)
    self._built: _Built | None = None
    self._per_replica_slices = False
    # The draw covering a step, for `batch_indices` and `fallback_points` (traced once, at build).
    self._draw_once: Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None = None
    if start_step is None:
      # Where the next stream starts, and where the last one that began in this process did start
      # (with `stats().streams`, how the callbacks check that each stream began where they said).
      with tf.device("CPU:0"):
        self._next_start = tf.Variable(_UNSET, dtype=tf.int64, trainable=False, name="repulsive_next_start")
        self._last_start = tf.Variable(_UNSET, dtype=tf.int64, trainable=False, name="repulsive_last_start")

  def __call__(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The stream of global batches of `dataset` (what `Dataset.apply` calls)."""
    built = self._build(dataset)

    def draw(start, offset):
      indices, steps = self._draw_counted(built, start, offset)
      return self._gather(built, indices), steps

    return self._finish(built, _stream_ops.unbatch_dense(_stream_ops.parallel_map_on_host(self._draws(built), draw)))

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

      def draw_slices(start, offset):
        indices, steps = self._draw_counted(built, start, offset)
        slices = self._gather(built, tf.reshape(indices, [-1, replicas, per_replica])[:, first:first + local])
        return slices, tf.tile(steps[:, None], [1, local])

      return self._finish(built, _stream_ops.unbatch_dense(_stream_ops.unbatch_dense(
          _stream_ops.parallel_map_on_host(self._draws(built), draw_slices))))

    return apply

  # The handle: what callbacks, diagnostics and users ask of a built pipeline.

  @property
  def steps_per_epoch(self) -> int:
    """ceil(N / batch_size): the steps of one epoch (for `model.fit(steps_per_epoch=...)`)."""
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
    """The materialised elements: nested numpy arrays with leading dimension N."""
    return self._require_built().elements

  @property
  def labels(self) -> np.ndarray | None:
    """`[N]` int64 labels, for samplers that need them; else None."""
    return self._require_built().labels

  @property
  def drawer(self) -> _samplers.BatchDrawer:
    """The sampler's per-dataset draw (see `Sampler.build`)."""
    return self._require_built().drawer

  def batch_indices(self, step: int) -> np.ndarray:
    """The dataset indices of the global batch of step `step` (pure: the pipeline is not touched).

    Args:
      step: the global step n (>= 0).

    Returns:
      `[batch_size]` int32 array of distinct indices into the input dataset, in acceptance order.

    Raises:
      TypeError, ValueError: for a step that is not an int >= 0, or a batcher not applied yet.
    """
    _check_step(step)
    self._require_built()
    return self._draw_of(step)[0]

  def fallback_points(self, step: int) -> int:
    """How many points of the batch of `step` the fallback fill supplied (pure)."""
    _check_step(step)
    self._require_built()
    return int(self._draw_of(step)[1])

  def pi(self, step: int) -> np.ndarray | None:
    """pi over mingling values at `step` for Dense / Anneal PDS, else None."""
    pi = self._require_built().drawer.pi(tf.constant(step, tf.int64))
    if pi is None:
      return None
    pi = np.asarray(pi, dtype=np.float64)
    return pi / pi.sum()

  def mingling_mix(self, step: int) -> np.ndarray | None:
    """Fraction of the batch of `step` per mingling value, for samplers that compute them."""
    mix = self.mingling_mixes([step])
    return None if mix is None else mix[0]

  def mingling_mixes(self, steps) -> np.ndarray | None:
    """`[len(steps), K + 1]` fractions per mingling value, or None without mingling values.

    Read from what the pipeline recorded as it drew those steps in this process; steps it did not
    draw here (or drew more than 4096 steps ago) are recomputed.
    """
    built = self._require_built()
    if built.mingling is None:
      return None
    steps = np.asarray(list(steps), dtype=np.int64)
    record = built.mix_record.numpy()[steps % _MIX_HISTORY]
    counts = record[:, 1:].astype(np.float64)
    for position in np.flatnonzero(record[:, 0] != steps):
      counts[position] = np.bincount(built.mingling.values[self.batch_indices(int(steps[position]))],
                                     minlength=built.num_mingling_values)
    return counts / counts.sum(axis=1, keepdims=True)

  def stats(self) -> SamplingStats:
    """Counters of the draws this pipeline made in this process."""
    built = self._require_built()
    batches, streams, fallback_batches, fallback_points = built.counters.numpy().tolist()
    last_step_delivered = int(built.last_step_delivered.numpy())
    return SamplingStats(batches=batches, streams=streams, fallback_batches=fallback_batches,
                         fallback_points=fallback_points,
                         last_step_delivered=None if last_step_delivered == _UNSET else last_step_delivered,
                         radius=built.drawer.radius,
                         mingling_agreement=None if built.mingling is None else built.mingling.agreement)

  def start_at(self, step: int) -> None:
    """Makes the next stream of this batcher (a new iterator) start at `step`.

    For batchers built with `start_step=None`; `AnnealingCallback` calls it with the optimizer's
    step at every epoch. One call starts one stream: a later stream without a call of its own
    fails rather than repeat the batches of this one. A stream already running is not affected:
    its position is its own (and its checkpoint's).

    Raises:
      ValueError: for a batcher with a fixed `start_step`, or a step < 0.
    """
    _check_step(step)
    if self.start_step is not None:
      raise ValueError(
          f"this batcher's stream starts at the fixed start_step={self.start_step}; build it "
          "with start_step=None to start it elsewhere.")
    self._next_start.assign(step)

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
    data = _materialize(dataset, self._feature_fn, self._label_fn, sampler.needs_labels, self._max_elements,
                        self._verbose)
    num_points = data.features.shape[0]
    if self.batch_size > num_points:
      raise ValueError(
          f"`batch_size` = {self.batch_size} exceeds the dataset size N = {num_points}; a batch "
          "holds distinct elements.")
    drawer = sampler.build(_samplers.SamplingContext(
        features=data.features, labels=data.labels, batch_size=self.batch_size,
        distance_cache_bytes=self._distance_cache_bytes, verbose=self._verbose))
    if not isinstance(drawer, _samplers.BatchDrawer):
      raise TypeError(
          f"{type(sampler).__name__}.build must return a tf_repulsive.BatchDrawer (subclass it); got "
          f"{type(drawer).__name__}.")
    _checks.integer(drawer.steps_per_draw, f"{type(drawer).__name__}.steps_per_draw", 1,
                    hint="It is the number of steps one draw covers.")
    self._built = _Built(drawer, data)
    traced_draw = drawer.traced_draw()
    if traced_draw is not None:
      self._draw_once = functools.partial(traced_draw, self._key)
    else:
      # A partial, not a lambda: TensorFlow counts traces per code object, and would call one
      # trace per batcher "retracing" after a few batchers.
      self._draw_once = tf.function(functools.partial(_checked_draw, drawer, self._key, batch_size=self.batch_size))
    if drawer.radius is not None:
      self._warn_if_first_batch_needs_the_fill()
    return self._built

  def _draw_of(self, step: int) -> tuple[np.ndarray, int]:
    """The indices and fallback count of the batch of `step` (from the draw that covers it)."""
    steps_per_draw = self._require_built().drawer.steps_per_draw
    assert self._draw_once is not None  # set with the drawer
    indices, fallback = self._draw_once(tf.constant(step - step % steps_per_draw, tf.int64))
    return indices.numpy()[step % steps_per_draw], int(fallback[step % steps_per_draw])

  def _draw_counted(self, built: _Built, start: tf.Tensor, offset: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The indices of the stream's draw number `offset` and their steps, counted and recorded.

    `[S - skip, k]` and `[S - skip]`: the steps of the draw from the stream's `start` on (a
    stream that starts mid-draw skips that draw's earlier steps).
    """
    steps_per_draw = built.drawer.steps_per_draw
    first_step = (start // steps_per_draw + offset) * steps_per_draw
    skip = tf.maximum(start - first_step, 0)
    indices, fallback = _checked_draw(built.drawer, self._key, first_step, self.batch_size)
    indices, fallback = indices[skip:], tf.cast(fallback[skip:], tf.int64)
    steps = first_step + tf.range(skip, steps_per_draw, dtype=tf.int64)
    recorded = [built.counters.assign_add(tf.stack([
        tf.cast(tf.size(fallback), tf.int64), tf.cast(tf.equal(offset, 0), tf.int64), tf.math.count_nonzero(fallback),
        tf.reduce_sum(fallback)]))]
    if built.mingling is not None:
      mix = tf.math.bincount(tf.gather(built.mingling_tensor, indices), minlength=built.num_mingling_values,
                             maxlength=built.num_mingling_values, dtype=tf.int64, axis=-1)
      rows = tf.concat([steps[:, None], mix], axis=1)
      recorded.append(built.mix_record.scatter_nd_update((steps % _MIX_HISTORY)[:, None], rows))
    with tf.control_dependencies(recorded):
      return tf.identity(indices), steps

  @staticmethod
  def _gather(built: _Built, indices: tf.Tensor) -> Any:
    return tf.nest.map_structure(lambda component: tf.gather(component, indices), built.element_tensors)

  def _draws(self, built: _Built) -> tf.data.Dataset:
    """The stream of draws: (the stream's first step, draw number in the stream) per draw.

    A `Dataset.range` of draw numbers (splittable, checkpointed) plus the start; draw j covers
    steps j·S ... j·S + S − 1, so a step's batch does not depend on where the stream started.
    """
    last_draw = _LAST_STEP // built.drawer.steps_per_draw
    draws = tf.data.Dataset.range(last_draw).repeat()
    if self.start_step is not None:
      # Zipped, not mapped: a dataset function costs every new iterator its instantiation.
      return tf.data.Dataset.zip(tf.data.Dataset.from_tensors(tf.constant(self.start_step, tf.int64)).repeat(), draws)
    next_start, last_start = self._next_start, self._last_start

    # The start is read once, at the stream's first element, and then kept in the scan state,
    # which iterator checkpoints save: a restored stream continues from its own start. Reading it
    # uses it up, so that a second stream (a new iterator nobody started, a repeat() after the
    # batcher) fails instead of repeating the first one's batches.
    def locate(start, offset):
      def read_start():
        value = next_start.read_value()
        known = tf.debugging.assert_non_negative(value, message=_NO_START_MESSAGE)
        with tf.control_dependencies([known]):
          recorded = [last_start.assign(value), next_start.assign(_UNSET)]
        with tf.control_dependencies(recorded):
          return tf.identity(value)

      start = tf.cond(start < 0, read_start, lambda: start)
      return start, (start, offset)

    return _stream_ops.scan_on_host(draws, tf.constant(_UNSET, tf.int64), locate)

  @staticmethod
  def _finish(built: _Built, batches: tf.data.Dataset) -> tf.data.Dataset:
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

    return _stream_ops.map_on_host(batches.prefetch(tf.data.AUTOTUNE), deliver).with_options(options)

  def _warn_if_first_batch_needs_the_fill(self) -> None:
    # A filled batch is still k distinct points, but partly uniform: say so once, at build time,
    # rather than let the repulsion weaken unnoticed.
    built = self._require_built()
    fallback = self.fallback_points(0)
    if fallback:
      cause = ("The radius is too large for this batch size on this data" if self.pi(0) is None
               else "The radius is too large for this batch size on the points that pi favours at step 0")
      warnings.warn(
          f"the darts filled only {self.batch_size - fallback} of {self.batch_size} points of the "
          f"first batch with disks of radius {built.drawer.radius:.4g}; a uniform fill supplied the other "
          f"{fallback}. {cause}: pass radius=\"auto\" or a smaller `radius` to the sampler (or raise "
          "`max_darts` if the disks do fit).", RuntimeWarning, stacklevel=5)


def _checked_draw(drawer: _samplers.BatchDrawer, key: tf.Tensor, first_step: tf.Tensor,
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


def _check_step(step: Any) -> None:
  _checks.integer(step, "step", 0)


def _call_like_map(fn: Callable[..., Any], element: Any) -> Any:
  return fn(*element) if isinstance(element, tuple) else fn(element)


def _default_features(*components: Any) -> tf.Tensor:
  return tf.nest.flatten(components)[0]


def _default_label(*components: Any) -> tf.Tensor:
  return tf.nest.flatten(components)[-1]


def _as_feature_vector(features: Any) -> tf.Tensor:
  if not isinstance(features, (tf.Tensor, np.ndarray)) and not tf.is_tensor(features):
    raise TypeError(f"`feature_fn` must return a tensor; got {type(features).__name__}.")
  if not (features.dtype.is_floating or features.dtype.is_integer or features.dtype.is_bool):
    raise TypeError(
        f"features must be numeric; got dtype {features.dtype.name}. Pass a `feature_fn` that "
        "returns the numeric vector distances are measured in.")
  return tf.reshape(tf.cast(features, tf.float32), [-1])


def _as_label(label: Any) -> tf.Tensor:
  if not tf.is_tensor(label) or not label.dtype.is_integer:
    dtype = getattr(label, "dtype", type(label).__name__)
    raise TypeError(
        f"labels must be integer class ids; got {dtype}. The default `label_fn` takes the last "
        "component of each element; pass `label_fn`, e.g. lambda x, y: tf.argmax(y) for one-hot.")
  if label.shape.rank is not None and label.shape.num_elements() not in (None, 1):
    raise ValueError(
        f"`label_fn` must return one integer class id per element; got shape {label.shape}. "
        "For one-hot labels use lambda x, y: tf.argmax(y).")
  return tf.reshape(tf.cast(label, tf.int64), [])


def _upstream_batch_size(dataset: tf.data.Dataset) -> int | None:
  """The batch size when `dataset`'s elements are batches made upstream, else None.

  Walks the chain of unary transformations back to the nearest batching (`batch`,
  `padded_batch`; an `unbatch` ends the search) and calls the elements batches when every
  component's leading dimension is that batch size or unknown. Elements that are arrays of their
  own pass: no batching upstream, or other leading dimensions. Relies on tf.data's internal
  `_input_dataset` / `_batch_size` attributes; without them nothing is detected.
  """
  node = dataset
  while node is not None and "Unbatch" not in type(node).__name__:
    batch_size = getattr(node, "_batch_size", None)
    if batch_size is not None:
      try:
        size = int(batch_size)
      except (TypeError, ValueError):
        return None
      shapes = [spec.shape for spec in tf.nest.flatten(dataset.element_spec)]
      batched = all(shape.rank is not None and shape.rank >= 1 and shape[0] in (None, size)
                    for shape in shapes)
      return size if batched else None
    node = getattr(node, "_input_dataset", None)
  return None


def _dict_defaults(spec: dict, feature_fn, label_fn, needs_labels: bool):
  """Default `feature_fn` / `label_fn` for dict elements: by name, never by sorted key order.

  The label is the "label" key (the TFDS convention); the features are the one other numeric
  component. Anything else is ambiguous and must be said with the argument.
  """
  keys = sorted(spec)
  if needs_labels and label_fn is None:
    if "label" not in spec:
      raise ValueError(
          f"the elements are dicts with keys {keys} and no 'label' key: pass `label_fn`, e.g. "
          "label_fn=lambda e: e['class_id'].")

    def label_fn(element):
      return element["label"]

  if feature_fn is None:
    numeric = [key for key in keys if key != "label" and isinstance(spec[key], tf.TensorSpec)
               and (spec[key].dtype.is_floating or spec[key].dtype.is_integer or spec[key].dtype.is_bool)]
    if len(numeric) != 1:
      found = "none" if not numeric else " and ".join(repr(key) for key in numeric)
      raise ValueError(
          f"the elements are dicts with keys {keys}: the features default to the one numeric "
          f"component besides 'label', and found {found}. Pass `feature_fn`, e.g. "
          f"feature_fn=lambda e: e[{(numeric or keys)[0]!r}].")
    feature_key = numeric[0]

    def feature_fn(element):
      return element[feature_key]
  return feature_fn, label_fn


# Transformations that cannot end an endless input (they pass, drop or expand its elements).
_KEEPS_ENDLESS = frozenset((
    "_MapDataset", "_ParallelMapDataset", "_FilterDataset", "_FlatMapDataset", "_InterleaveDataset",
    "_ParallelInterleaveDataset", "_IgnoreErrorsDataset", "_PrefetchDataset", "_OptionsDataset",
    "_ShuffleDataset", "_UnbatchDataset", "CacheDataset", "_BatchDataset", "_ParallelBatchDataset"))


def _endless_upstream(dataset: tf.data.Dataset) -> str | None:
  """The name of an infinite dataset upstream that only endless-preserving steps follow, else None.

  tf.data reports `repeat().filter(...)` as of unknown size; reading it would run to
  `max_elements` (or forever, if the filter keeps nothing). Relies on tf.data's internal
  `_input_dataset` chain; without it nothing is detected.
  """
  def endless(node):
    return node is not None and int(node.cardinality()) == tf.data.INFINITE_CARDINALITY

  node = dataset
  while node is not None and not endless(node):
    if type(node).__name__ not in _KEEPS_ENDLESS:
      return None
    node = getattr(node, "_input_dataset", None)
  if node is None:
    return None
  # Name the source of the endlessness (the repeat, say), not the map after it.
  while endless(getattr(node, "_input_dataset", None)):
    node = node._input_dataset
  return type(node).__name__.lstrip("_").replace("Dataset", "").lower() or "dataset"


# Stateful random ops: their values differ from run to run unless they, or the program, are seeded.
_STATEFUL_RANDOM_OPS = frozenset((
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "RandomShuffle",
    "Multinomial", "RandomGamma", "RandomPoissonV2", "ParameterizedTruncatedNormal"))


def _random_upstream(dataset: tf.data.Dataset) -> str | None:
  """What makes the elements, or their order, differ from run to run upstream; None if nothing does.

  Finds a shuffle or random source without a seed (neither its own nor `tf.random.set_seed`'s), a
  parallel transformation allowed to reorder its elements, and unseeded stateful random ops in
  the dataset functions. Relies on tf.data's internal `_inputs()`, `_functions()`, `_seed` and
  `_deterministic`; what they do not show (a parallel interleave's own `deterministic=False`,
  randomness inside a generator) is not found.
  """
  reorders_by_default = dataset.options().deterministic is False
  pending, seen = [dataset], set()
  while pending:
    node = pending.pop()
    if id(node) in seen:
      continue
    seen.add(id(node))
    kind = type(node).__name__
    if kind in ("_ShuffleDataset", "_RandomDataset") and int(node._seed) == 0 and int(node._seed2) == 0:
      if kind == "_ShuffleDataset":
        return ("a shuffle without a seed (Dataset.shuffle, or Dataset.list_files, which shuffles by "
                "default): drop it (the sampler randomises the batches), or seed it, e.g. "
                "shuffle(buffer_size, seed=0) or list_files(pattern, shuffle=False)")
      return "random numbers without a seed (Dataset.random, sample_from_datasets): pass seed="
    deterministic = getattr(node, "_deterministic", None)
    if deterministic == "false" or (deterministic == "default" and reorders_by_default):
      return ("a parallel transformation allowed to reorder its elements (deterministic=False, or "
              "options.deterministic = False): make it deterministic for this input")
    for function in node._functions():
      for op in function.function.graph.get_operations():
        if op.type in _STATEFUL_RANDOM_OPS and op.get_attr("seed") == 0 and op.get_attr("seed2") == 0:
          return (f"a random op without a seed ({op.type}) in a dataset function: seed it, or use a "
                  "stateless one (tf.random.stateless_uniform, ...)")
    pending.extend(node._inputs())
  return None


def _stack_chunks(chunks, total: int | None, max_elements: int, progress) -> list[np.ndarray]:
  """The chunks' leaves stacked into arrays TensorFlow can share (see `_arrays`).

  With a known `total` each leaf is written into its final array as it is read; otherwise the
  chunks are kept and each is freed as it is copied into place. Either way the peak is the data
  plus about one chunk.
  """
  arrays, pending, rows = None, [], 0
  for chunk in chunks:
    leaves = tf.nest.flatten(chunk)
    count = len(leaves[0])
    if rows + count > max_elements:
      raise ValueError(
          f"the input dataset has more than `max_elements` = {max_elements} elements (or is "
          "endless); pass a larger max_elements or a smaller dataset.")
    if total is None:
      pending.append(leaves)
    else:
      if arrays is None:
        arrays = [_arrays.empty((total,) + leaf.shape[1:], leaf.dtype) for leaf in leaves]
      for array, leaf in zip(arrays, leaves):
        array[rows:rows + count] = leaf
    rows += count
    progress.update(count)
  if arrays is not None:
    return arrays
  if not pending:
    return []
  arrays = [_arrays.empty((rows,) + leaf.shape[1:], leaf.dtype) for leaf in pending[0]]
  pending.reverse()
  rows = 0
  while pending:
    leaves = pending.pop()
    count = len(leaves[0])
    for array, leaf in zip(arrays, leaves):
      array[rows:rows + count] = leaf
    rows += count
  return arrays


def _materialize(dataset: tf.data.Dataset, feature_fn, label_fn, needs_labels: bool,
                 max_elements: int, verbose: bool) -> _Materialized:
  """Reads the finite dataset once: elements, their feature vectors and (if needed) labels."""
  cardinality = int(dataset.cardinality())
  if cardinality == tf.data.INFINITE_CARDINALITY:
    raise ValueError(
        "the input dataset is infinite; repulsive_batch draws from a finite dataset. Apply it "
        "before .repeat() (its batch stream is unbounded by itself).")
  endless = _endless_upstream(dataset) if cardinality == tf.data.UNKNOWN_CARDINALITY else None
  if endless is not None:
    raise ValueError(
        f"the input dataset is endless: an infinite {endless} upstream, and no take() after it "
        "(filter, map and the like keep it endless). repulsive_batch draws from a finite "
        "dataset: apply it before .repeat(), or end the input with .take(n).")
  if cardinality > max_elements:
    raise ValueError(
        f"the input dataset has {cardinality} elements, more than `max_elements` = {max_elements}; "
        "pass a larger max_elements or a smaller dataset.")
  for spec in tf.nest.flatten(dataset.element_spec):
    if not isinstance(spec, tf.TensorSpec):
      raise TypeError(
          f"elements must be dense tensors; got {type(spec).__name__}. Pad ragged or densify "
          "sparse components first (e.g. with Dataset.map).")
  upstream_batch = _upstream_batch_size(dataset)
  if upstream_batch is not None:
    raise ValueError(
        f"the input dataset is already batched (a Dataset.batch({upstream_batch}) upstream, and "
        "every component has that leading dimension): repulsive_batch draws its batches from "
        "single elements. Apply it before .batch(), or call .unbatch() first.")
  is_tuple = isinstance(dataset.element_spec, tuple)
  if isinstance(dataset.element_spec, dict):
    feature_fn, label_fn = _dict_defaults(dataset.element_spec, feature_fn, label_fn, needs_labels)
  if needs_labels and label_fn is None and len(tf.nest.flatten(dataset.element_spec)) < 2:
    raise ValueError(
        "this sampler needs class labels but the elements have a single component; use "
        "(features, label) elements or pass `label_fn`.")

  def extract(*components):
    element = components if is_tuple else components[0]
    features = _as_feature_vector(_call_like_map(feature_fn or _default_features, element))
    if not needs_labels:
      return element, features
    return element, features, _as_label(_call_like_map(label_fn or _default_label, element))

  extracted = dataset.map(extract)
  random = _random_upstream(extracted)  # also sees `feature_fn` and `label_fn`
  if random is not None:
    raise ValueError(
        "the input differs from run to run: repulsive_batch reads it once and draws each batch by "
        "index, so the batch of a step would hold other elements in every run, and after resuming "
        f"in a new process. Found {random}.")
  chunks = _of_one_shape(extracted).batch(_READ_CHUNK)
  total = cardinality if cardinality >= 0 else None
  description = ("reading the dataset" if total is not None
                 else f"reading the dataset (size unknown; at most max_elements = {max_elements})")
  try:
    with _progress.bar(description, total, verbose) as progress:
      arrays = _stack_chunks(chunks.as_numpy_iterator(), total, max_elements, progress)
  except tf.errors.InvalidArgumentError as error:
    if _SHAPE_MISMATCH not in error.message:
      raise
    raise ValueError(
        "elements (or the feature vectors of `feature_fn`) differ in shape across the dataset; "
        "they must have one shape to be batched. Pad or resize them first.") from error
  if not arrays:
    raise ValueError("the input dataset is empty; repulsive_batch needs at least batch_size elements.")
  structure = chunks.element_spec
  read = tf.nest.pack_sequence_as(structure, arrays)
  features = read[1]
  bad_rows = ~np.all(np.isfinite(features), axis=1)
  if np.any(bad_rows):
    raise ValueError(
        f"{int(bad_rows.sum())} elements have NaN or infinite features (first at index "
        f"{int(np.argmax(bad_rows))}); clean them or pass a `feature_fn` that maps them to finite values.")
  return _Materialized(elements=read[0], features=features, labels=read[2] if needs_labels else None)


def _of_one_shape(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`dataset` with every component checked against the first element's shape, where the spec leaves it open.

  The check fails with `_SHAPE_MISMATCH` in its message, so that reading can tell ragged data from
  any other failure without relying on the wording of TensorFlow's own errors.
  """
  specs = tf.nest.flatten(dataset.element_spec)
  if all(spec.shape.is_fully_defined() for spec in specs):
    return dataset
  first = next(iter(dataset.take(1)), None)
  if first is None:
    return dataset  # empty: reported as such after reading
  shapes = [tensor.shape for tensor in tf.nest.flatten(first)]

  def checked(*parts):
    flat = tf.nest.flatten(parts)
    checks = []
    for tensor, shape in zip(flat, shapes):
      if not tensor.shape.is_fully_defined():
        same = tf.logical_and(tf.equal(tf.rank(tensor), shape.rank),
                              tf.reduce_all(tf.equal(tf.shape(tensor)[:shape.rank], shape.as_list())))
        checks.append(tf.debugging.Assert(same, [_SHAPE_MISMATCH, tf.shape(tensor)]))
    with tf.control_dependencies(checks):
      flat = [tf.ensure_shape(tensor, shape) for tensor, shape in zip(flat, shapes)]
    return tf.nest.pack_sequence_as(parts, flat)

  return dataset.map(checked)


def repulsive_batch(
    batch_size: int,
    sampler: _samplers.Sampler,
    *,
    feature_fn: Callable[..., tf.Tensor] | None = None,
    label_fn: Callable[..., tf.Tensor] | None = None,
    seed: int | None = None,
    start_step: int | None = None,
    max_elements: int = _DEFAULT_MAX_ELEMENTS,
    distance_cache_bytes: int = _DEFAULT_DISTANCE_CACHE_BYTES,
    verbose: bool = True,
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
    feature_fn: called like a `Dataset.map` function on an element; returns the vector distances
      are measured in. Default: the first component (tuples), or for dict elements the one
      numeric component besides "label"; flattened, as float32.
    label_fn: likewise, returns the integer class id, for the samplers that need labels.
      Default: the last component (tuples), or the "label" key (dicts).
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

  Returns:
    The `RepulsiveBatcher`: `dataset.apply(batcher)` gives the batches; the batcher is the handle
    for `steps_per_epoch`, `batch_indices(step)`, `stats()` and the callbacks.

  Raises:
    TypeError: for arguments of the wrong type, non-numeric features, non-integer labels.
    ValueError: for batch_size outside [1, N], an empty or infinite dataset, an input that differs
      from run to run (an unseeded shuffle or random op upstream, a parallel step allowed to
      reorder), ragged or non-finite features, missing labels, neighbors >= N, a batcher applied
      twice.
  """
  for value, name, least in ((batch_size, "batch_size", 1), (max_elements, "max_elements", 1),
                             (distance_cache_bytes, "distance_cache_bytes", 0)):
    _checks.integer(value, name, least)
  if not isinstance(sampler, _samplers.Sampler):
    raise TypeError(
        f"`sampler` must be a tf_repulsive sampler (an instance of a tf_repulsive.Sampler subclass, "
        f"such as tf_repulsive.VanillaPDS(), or one of your own); got {sampler!r}.")
  for fn, name in ((feature_fn, "feature_fn"), (label_fn, "label_fn")):
    if fn is not None and not callable(fn):
      raise TypeError(f"`{name}` must be callable or None; got {fn!r}.")
  if seed is not None:
    _checks.integer(seed, "seed")
  if seed is not None and not -2**63 <= seed < 2**63:
    raise ValueError(f"`seed` must be a 64-bit integer, in [-2**63, 2**63 - 1]; got {seed}.")
  if start_step is not None:
    _check_step(start_step)
  if not isinstance(verbose, bool):
    raise TypeError(f"`verbose` must be True or False; got {verbose!r}.")
  if seed is None:
    # Like TensorFlow's own ops with seed=None: reproducible under tf.random.set_seed (or
    # keras.utils.set_random_seed), random otherwise.
    seed = int(tf.random.uniform([], maxval=2**62, dtype=tf.int64))
  return RepulsiveBatcher(batch_size, sampler, feature_fn=feature_fn, label_fn=label_fn, seed=seed,
                          start_step=start_step, max_elements=max_elements,
                          distance_cache_bytes=distance_cache_bytes, verbose=verbose)
