"""A batcher's stream: its draws, each within its hooks, the gather, and the end of the pipeline.

`BatchStream` makes the dataset `Dataset.apply` returns (the global batches) or a `per_replica`
pipeline's (its replicas' slices of every global draw). A draw runs inside the
hooks of the parts that own the stream's state: the start's checks (`_stream_start`), the wait
for a refresh (`_refresh`), the record of what was drawn (`_draw_record`). Arrays come through
`built.read` (their file's, with a `data_dir`).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import tensorflow as tf

from tf_repulsive import _build
from tf_repulsive import _drawers
from tf_repulsive import _inclusion_weights
from tf_repulsive import _stream_ops
from tf_repulsive import _stream_start

# Steps are int64. The step range repeats past this bound, which no training reaches, so that the
# stream's cardinality is infinite (Keras then asks for steps_per_epoch instead of waiting for an end).
_LAST_STEP = 2**62


class BatchStream:
  """The stream of a built batcher: its global batches, or a `per_replica` pipeline's slices of them.

  Args:
    built: what applying the batcher to its dataset produced.
    start: where each of its streams starts.
  """

  def __init__(self, built: _build.Built, start: _stream_start.StreamStart):
    self._built = built
    self._start = start
    # The dataset made last, weakly: the dataset holds the pipeline, not the other way round.
    self._dataset: Callable[[], tf.data.Dataset | None] = lambda: None

  def dataset(self) -> tf.data.Dataset | None:
    """The dataset made last (`global_batches` or `replica_slices`) while it is alive, else None."""
    return self._dataset()

  def global_batches(self) -> tf.data.Dataset:
    """The stream of global batches, one draw per step, as `dataset.apply(batcher)` returns it."""
    built = self._built

    def draw_batch(stream, offset):
      indices, steps = self._draw(stream, offset)
      return self._gathered(indices, self._weights_of(indices)), steps

    if built.refresher is not None or built.drawer.learns_from_losses:
      # Drawn as they are delivered, one step at a time in the consumer's thread: after the refresh
      # of the step's features (or the training step whose losses it needs), never ahead of it,
      # and with no draw in flight (waiting) when an iterator checkpoint is written.
      return self._finished(_stream_ops.unbatch_dense(_stream_ops.map_on_host(self._draws(), draw_batch)),
                            prefetch=False)
    stream, draw_batch = self._with_arrays(self._draws(), draw_batch)
    return self._finished(_stream_ops.unbatch_dense(_stream_ops.parallel_map_on_host(stream, draw_batch)))

  def replica_slices(self, replicas: int, first: int, local: int) -> tf.data.Dataset:
    """The stream of the slices of replicas `first` ... `first + local - 1` of `replicas`, of every global draw."""
    per_replica = self._built.config.batch_size // replicas

    def local_slices(per_step: tf.Tensor) -> tf.Tensor:
      return tf.reshape(per_step, [-1, replicas, per_replica])[:, first:first + local]

    def draw_slices(stream, offset):
      indices, steps = self._draw(stream, offset)
      weights = self._weights_of(indices)
      slices = self._gathered(local_slices(indices), None if weights is None else local_slices(weights))
      return slices, tf.tile(steps[:, None], [1, local])

    stream, draw_slices = self._with_arrays(self._draws(), draw_slices)
    return self._finished(_stream_ops.unbatch_dense(_stream_ops.unbatch_dense(
        _stream_ops.parallel_map_on_host(stream, draw_slices))))

  def _draws(self) -> tf.data.Dataset:
    """The stream of draws: per draw `[start, probe]` of the stream, and the draw's number in it.

    A `Dataset.range` of draw numbers (splittable, checkpointed) plus the start; draw j covers
    steps j·S ... j·S + S − 1, so a step's batch does not depend on where the stream started.
    """
    last_draw = _LAST_STEP // self._built.drawer.steps_per_draw
    return self._start.streams(tf.data.Dataset.range(last_draw).repeat())

  def _draw(self, stream: tf.Tensor, offset: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The indices of the stream's draw number `offset` and their steps: one draw, within its hooks.

    `stream` is `[start, probe]` (see `_stream_start`). Returns `[rows, k]` and `[rows]`: the
    steps of the draw from the stream's start on (a stream that starts mid-draw skips that draw's
    earlier steps; a probe stream has its first step only).
    """
    built = self._built
    first, probe = stream[0], stream[1] > 0
    steps_per_draw = built.drawer.steps_per_draw
    first_step = (first // steps_per_draw + offset) * steps_per_draw
    skip = tf.maximum(first - first_step, 0)
    end = tf.where(probe, skip + 1, steps_per_draw)
    checks = self._start.checks(offset, first, built.record.last_step_delivered)
    if built.refresher is not None:
      checks.append(built.refresher.wait(first_step, skip, probe))
    with tf.control_dependencies(checks):
      if built.copied_draw is None:
        indices, fallback = _drawers.checked_draw(built.drawer, built.config.key, first_step, built.config.batch_size)
      else:
        # The ops of the build's trace, not a second trace of the drawer's draw (nor a call op,
        # which would make tf.data instantiate the map as a multi-device function per iterator).
        indices, fallback = _stream_ops.inlined(built.copied_draw, first_step, read=built.read)
      indices, fallback = indices[skip:end], tf.cast(fallback[skip:end], tf.int64)
      steps = first_step + tf.range(skip, end, dtype=tf.int64)
      recorded = built.record.record(steps, offset, indices, fallback, built.read)
      if built.refresher is not None and built.refresher.training is not None:
        recorded.append(built.refresher.training.remember(steps, indices))
    with tf.control_dependencies(recorded):
      return tf.identity(indices), steps

  def _weights_of(self, indices: tf.Tensor) -> tf.Tensor | None:
    """`[rows, k]` the sample weights of the elements `indices` (inclusion weights, or the drawer's), or None."""
    built = self._built
    if built.weights is not None:
      return built.weights.of_batch(indices, built.config.batch_size, built.read)
    return built.drawer.sample_weights(indices)

  def _gathered(self, indices: tf.Tensor, weights: tf.Tensor | None) -> Any:
    """The batch of the elements `indices`, with their inclusion `weights` if given."""
    built = self._built
    batch = tf.nest.map_structure(lambda component: tf.gather(built.read(component), indices), built.element_tensors)
    return batch if weights is None else _inclusion_weights.weighted(batch, weights)

  def _with_arrays(self, draw_stream: tf.data.Dataset,
                   draw_fn: Callable[[tf.Tensor, tf.Tensor], Any]) -> tuple[tf.data.Dataset, Callable[..., Any]]:
    """`draw_stream` and `draw_fn` for the parallel map; with `data_dir`, the arrays `draw_fn` reads come along."""
    built = self._built
    if built.files is None:
      return draw_stream, draw_fn
    assert built.copied_draw is not None  # with data_dir the stream always copies the draw's trace
    values_read = tf.nest.flatten(built.element_tensors) + [built.record.group_of_points]
    if built.weights is not None:
      values_read.append(built.weights.weights)
    values_read += built.copied_draw.get_concrete_function(tf.TensorSpec([], tf.int64)).captured_inputs
    return built.files.with_arrays(draw_stream, draw_fn, values_read)

  def _finished(self, batches: tf.data.Dataset, prefetch: bool = True) -> tf.data.Dataset:
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
    record = self._built.record

    # After the prefetch, so that it records what leaves the pipeline, not what is drawn ahead:
    # the callbacks refuse a step trained beyond the last one delivered (a replay, such as a
    # cache() after a take()).
    def deliver(batch, step):
      with tf.control_dependencies([record.delivered(step)]):
        return tf.nest.map_structure(tf.identity, batch)

    if prefetch:
      batches = batches.prefetch(tf.data.AUTOTUNE)
    dataset = _stream_ops.map_on_host(batches, deliver).with_options(options)
    self._dataset = weakref.ref(dataset)
    return dataset
