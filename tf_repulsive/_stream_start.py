"""Where a batch stream starts: a fixed step, or the step a callback (or `start_at`) gives each stream.

A stream is a `Dataset.range` of draw numbers zipped with its start. A fixed start is a
constant. A callback-started stream reads its start once, at its first element, from a variable
that `start_at` sets, and keeps it in a scan state that iterator checkpoints save. Reading the
start uses it up: a second stream that nobody started fails instead of repeating the first one's
batches. The one exception is the build probe (`allow_build_probe`, for the callbacks).
"""

from __future__ import annotations

import tensorflow as tf

from tf_repulsive import _stream_ops

# A start variable that holds no step.
UNSET = -1
# A start that lets one stream deliver the batch of step 0 only (`allow_build_probe`).
_PROBE = -2

_NO_START_MESSAGE = (
    "repulsive_batch: the batch stream does not know its first step. A batcher built with "
    "start_step=None starts each stream (a new iterator, or a repeat() after the batcher) where the "
    "last batcher.start_at(step) said, and each start serves one stream: none was left for this "
    "one. In model.fit add tf_repulsive.AnnealingCallback(batcher) to the callbacks (it starts every "
    "stream at the optimizer's step, also when training resumes). In a custom training loop call "
    "batcher.start_at(int(optimizer.iterations)) before each new iterator, e.g. before each epoch's "
    "`for batch in stream.take(batcher.steps_per_epoch)`. On tf.data service workers no callback can "
    "start the stream: build the batcher with start_step=<the optimizer's step> before distributing it.")
# A probe stream asked for its second batch. Under a distribution strategy this is logged at every
# fit, by the prefetch of the stream Keras drops, so the message says when it is harmless.
_PROBE_ENDED_MESSAGE = (
    "repulsive_batch: this stream began unstarted, and such a stream delivers one batch only: the "
    "batch of step 0 that Keras' fit takes under a distribution strategy to build the model before "
    "any callback runs. Logged while training goes on, this is the prefetch of that dropped stream, "
    "and harmless. If it stops training, the stream that trains was never started: add "
    "tf_repulsive.AnnealingCallback(batcher) (or BatchStreamCallback) to fit's callbacks, or in a "
    "custom training loop call batcher.start_at(int(optimizer.iterations)) before each new iterator. On tf.data "
    "service workers no callback can start the stream: build the batcher with start_step=<the optimizer's step>.")
_BEGUN_AGAIN_MESSAGE = (
    "repulsive_batch: a new stream of this batcher began at its fixed start_step, after an earlier "
    "stream in this process delivered the batches of later steps: it would hand out those steps' "
    "batches again (every new iterator of a fixed-start stream starts at start_step; this is what a "
    "loop `for epoch ...: for batch in stream.take(n)` does). Keep one iterator for all epochs "
    "(iterator = iter(stream), then next(iterator) per step), or build the batcher with "
    "start_step=None and call batcher.start_at(int(optimizer.iterations)) before each new iterator. "
    "In model.fit use tf_repulsive.AnnealingCallback(batcher). Last step delivered, and start_step:")


class StreamStart:
  """The start of a batcher's streams: `start_step`, or one start per stream from `start_at`."""

  def __init__(self, start_step: int | None):
    self.start_step = start_step
    if start_step is None:
      # Where the next stream starts, and where the last one that began in this process did start
      # (with `stats().streams`, how the callbacks check that each stream began where they said).
      with tf.device("CPU:0"):
        self._next_start = tf.Variable(UNSET, dtype=tf.int64, trainable=False, name="repulsive_next_start")
        self._last_start = tf.Variable(UNSET, dtype=tf.int64, trainable=False, name="repulsive_last_start")

  def start_at(self, step: int) -> None:
    """Makes the next stream start at `step` (a checked step >= 0)."""
    if self.start_step is not None:
      raise ValueError(
          f"this batcher's stream starts at the fixed start_step={self.start_step}; build it "
          "with start_step=None to start it elsewhere.")
    self._next_start.assign(step)

  def allow_build_probe(self) -> None:
    """Lets the next stream deliver the batch of step 0 unstarted, unless a start is waiting."""
    if self.start_step is None and int(self._next_start.numpy()) == UNSET:
      self._next_start.assign(_PROBE)

  def last_start(self) -> int | None:
    """The step at which the last stream started in this process (a fixed start: `start_step`)."""
    if self.start_step is not None:
      return self.start_step
    value = int(self._last_start.numpy())
    return None if value == UNSET else value

  def streams(self, draws: tf.data.Dataset) -> tf.data.Dataset:
    """`draws` (draw numbers) with the stream's `[start, probe]` before each.

    `probe` is 1 for a stream that `allow_build_probe` let begin without a start.
    """
    if self.start_step is not None:
      # Zipped, not mapped: a dataset function costs every new iterator its instantiation.
      fixed = tf.constant([self.start_step, 0], tf.int64)
      return tf.data.Dataset.zip(tf.data.Dataset.from_tensors(fixed).repeat(), draws)
    next_start, last_start = self._next_start, self._last_start

    def locate(stream, offset):
      def read_start():
        value = next_start.read_value()
        probe = tf.equal(value, _PROBE)
        known = tf.debugging.Assert(tf.logical_or(value >= 0, probe), [_NO_START_MESSAGE])
        with tf.control_dependencies([known]):
          recorded = [tf.cond(probe, tf.no_op, lambda: last_start.assign(value).op), next_start.assign(UNSET)]
        with tf.control_dependencies(recorded):
          return tf.stack([tf.maximum(value, 0), tf.cast(probe, tf.int64)])

      stream = tf.cond(stream[0] < 0, read_start, lambda: stream)
      # A probe stream has one batch.
      within = tf.debugging.Assert(tf.logical_or(tf.equal(stream[1], 0), tf.equal(offset, 0)),
                                   [_PROBE_ENDED_MESSAGE])
      with tf.control_dependencies([within]):
        return stream, (tf.identity(stream), offset)

    return _stream_ops.scan_on_host(draws, tf.constant([UNSET, 0], tf.int64), locate)

  def checks(self, offset: tf.Tensor, start: tf.Tensor, last_step_delivered: tf.Variable) -> list[tf.Operation]:
    """The ops that must pass before draw number `offset` of a stream that starts at `start`."""
    if self.start_step is None:
      return []
    # A fixed-start stream that begins after an earlier one delivered later steps would repeat
    # them. (One delivered batch does not count: Keras' model build under a distribution
    # strategy takes one and drops its iterator; a user's peek does the same.)
    return [tf.cond(
        tf.equal(offset, 0),
        lambda: tf.debugging.assert_less_equal(last_step_delivered.read_value(), start, message=_BEGUN_AGAIN_MESSAGE),
        tf.no_op)]
