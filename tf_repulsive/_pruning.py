"""Epoch pruning (InfoBatch) and its random control: passes over the data that skip well-learned elements.

The stream walks passes. Pass 0 holds all N elements. Each later pass is set up when the stream
reaches its first step, from the losses the training steps recorded so far (`record_losses`):
an element whose last loss is below the mean of all N is pruned with probability about r. The
elements kept are walked in a new random order, k per step, and those that could have been
pruned are weighted N / (N - t), t = round(r N), the inverse of their probability of being kept,
so that the pass's mean loss stays an unbiased estimate of the dataset's. A pass that begins at
or after `prune_until` x `total_steps` holds every element at weight 1.

Every choice is a keyed permutation of 0 ... N - 1 (`_epoch_shuffle.keyed_permutation`), keyed
by the seed and the pass: the batch of step n is a pure function of the seed, n and the losses
recorded before its pass began. The pass in force lives in variables (`PassState`), which a
checkpoint of the model carries (`RecordingModel`) so that a resumed run draws what the
uninterrupted one drew.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _contract
from tf_repulsive import _epoch_shuffle
from tf_repulsive import _model_space

# Key salts of the pass's three permutations: its order, which elements it prunes, and (for the
# random control) which elements stand for the below-mean ones.
_ORDER_SALT = 0x0D3
_PRUNE_SALT = 0x4EE9
_CHOICE_SALT = 0xC401
# How often a draw waiting for the losses of the step before its pass looks again.
_POLL_MICROSECONDS = 2000


def _round_keys(key: tf.Tensor, pass_index: tf.Tensor, salt: int) -> tf.Tensor:
  seed = tf.random.experimental.stateless_fold_in(tf.random.experimental.stateless_fold_in(key, salt), pass_index)
  return tf.random.stateless_uniform([6], seed, minval=0, maxval=2**32, dtype=tf.int64)


class PassState(tf.Module):
  """The pass the stream walks and the losses recorded: the state of an `EpochPruning` stream.

  Attributes:
    losses: `[N]` float32, each element's loss from the last step that trained on it (0 before).
    recorded_through: the last step whose losses were recorded (-1: none).
    pass_index: the pass in force (0: the first, all elements; -1: none set up yet).
    pass_start: its first step.
    pass_steps: its number of steps, ceil(pass_size / k).
    pass_size: how many elements it holds.
    order: `[N]` int32, its elements in the order the steps take them (the first `pass_size`).
    weights: `[N]` float32, each element's sample weight in this pass.
  """

  def __init__(self, num_points: int):
    super().__init__(name="pass_state")
    with tf.device("CPU:0"):
      self.losses = tf.Variable(tf.zeros([num_points]), trainable=False)
      self.recorded_through = tf.Variable(-1, dtype=tf.int64, trainable=False)
      # No pass yet: the stream's first draw (or `batch_indices`) sets up pass 0.
      self.pass_index = tf.Variable(-1, dtype=tf.int64, trainable=False)
      self.pass_start = tf.Variable(0, dtype=tf.int64, trainable=False)
      self.pass_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
      self.pass_size = tf.Variable(num_points, dtype=tf.int64, trainable=False)
      self.order = tf.Variable(tf.zeros([num_points], tf.int32), trainable=False)
      self.weights = tf.Variable(tf.ones([num_points]), trainable=False)


class _PruningDrawer(_contract.BatchDrawer):
  """Draws each step from the pass in force, and sets up the next pass at its first step."""

  learns_from_losses = True
  state: PassState

  def __init__(self, sampler: EpochPruning, num_points: int, batch_size: int, irreducible: np.ndarray | None):
    self._sampler = sampler
    self._num_points = num_points
    self._batch_size = batch_size
    self._irreducible = None if irreducible is None else tf.constant(irreducible, tf.float32)
    # A below-mean element is pruned with probability t / N: a kept one weighs N / (N - t).
    self._threshold = min(round(sampler.prune_ratio * num_points), num_points - 1)
    self._kept_weight = num_points / (num_points - self._threshold)
    self._prune_before = sampler.prune_until * sampler.total_steps
    self.state = PassState(num_points)
    with tf.device("CPU:0"):
      # Training steps whose losses could not be recorded: a step outside the pass in force (this
      # process's count, not state).
      self.faults = tf.Variable(0, dtype=tf.int64, trainable=False)
    self.report = {"prune_ratio": float(sampler.prune_ratio), "prune_until_step": float(self._prune_before)}

  # The pass in force, read in the draw and in the training step.

  def _slots(self, step: tf.Tensor) -> tf.Tensor:
    """The positions in `order` of the batch of `step`, within the pass in force (the last wraps to its start)."""
    state = self.state
    slots = (step - state.pass_start) * self._batch_size + tf.range(self._batch_size, dtype=tf.int64)
    size = state.pass_size.read_value()
    return tf.where(slots >= size, slots - size, slots)

  def _indices_of(self, step: tf.Tensor) -> tf.Tensor:
    return tf.gather(self.state.order, self._slots(step))

  def _in_pass(self, step: tf.Tensor) -> tf.Tensor:
    state = self.state
    return tf.logical_and(step >= state.pass_start, step < state.pass_start + state.pass_steps)

  # The stream's draw.

  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    step = tf.cast(first_step, tf.int64)
    state, name = self.state, type(self._sampler).__name__
    ends = step >= state.pass_start + state.pass_steps
    advanced = tf.cond(ends, lambda: self._advance(key, step), lambda: tf.constant(True))
    with tf.control_dependencies([advanced]):
      checked = tf.debugging.Assert(self._in_pass(step), [
          f"{name}: the stream draws step", step, "and the pass in force begins at", state.pass_start,
          "(pass", state.pass_index, "): a stream resumed at an earlier step needs the sampler state of that "
          "step too (checkpoint the RecordingModel, or batcher.sampler_state, with the iterator)."])
      with tf.control_dependencies([checked]):
        indices = self._indices_of(step)
    return tf.cast(indices, tf.int32)[None], tf.zeros([1], tf.int32)

  def _advance(self, key: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
    """Sets up the pass that begins at `step` once the losses of the step before are recorded."""
    state, name = self.state, type(self._sampler).__name__
    timeout = self._sampler.timeout_seconds
    polls = max(1, int(timeout * 1e6 / _POLL_MICROSECONDS))
    # A stream that would skip a pass fails at once, not after the wait.
    follows = tf.equal(step, state.pass_start + state.pass_steps)

    def waiting(poll, recorded):
      return tf.logical_and(tf.logical_and(follows, recorded < step - 1), poll < polls)

    # As the ModelSpace's wait does: the variable is read in the loop's body, after each sleep,
    # and carried as a loop variable (with the read in the condition alone, the loop did not wait).
    def look_again(poll, recorded):
      with tf.control_dependencies([_model_space.sleep(_POLL_MICROSECONDS)]):
        return poll + 1, state.recorded_through.read_value()

    _, recorded = tf.while_loop(waiting, look_again, (tf.constant(0), state.recorded_through.read_value()))
    checks = [
        tf.debugging.Assert(follows, [
            f"{name}: the stream draws step", step, "but the pass in force ends at",
            state.pass_start + state.pass_steps, ": a stream cannot skip a pass (start it at the step its "
            "sampler state holds)."]),
        tf.debugging.Assert(recorded >= step - 1, [
            f"{name}: the pass that begins at step", step, "needs the losses of the steps before it, "
            "and the training steps recorded them through step", recorded,
            f"only (waited {timeout} s, timeout_seconds). Train the model wrapped in "
            "tf_repulsive.RecordingModel(model, batcher), or call batcher.record_losses(step, losses) in "
            "each step of a custom loop."], summarize=3),
    ]
    with tf.control_dependencies(checks):
      return self._set_up(key, state.pass_index + 1, step)

  def _set_up(self, key: tf.Tensor, pass_index: tf.Tensor, start: tf.Tensor) -> tf.Tensor:
    """Writes the pass `pass_index`, beginning at `start`, into the state; returns True."""
    state = self.state
    order, weights, size = self.pass_of(key, pass_index, start, state.losses.read_value())
    with tf.control_dependencies([state.order.assign(order), state.weights.assign(weights),
                                  state.pass_size.assign(size), state.pass_start.assign(start),
                                  state.pass_steps.assign((size + self._batch_size - 1) // self._batch_size)]):
      # Last: a reader that sees the new index sees the rest.
      with tf.control_dependencies([state.pass_index.assign(pass_index)]):
        return tf.constant(True)

  def pass_of(self, key: tf.Tensor, pass_index: tf.Tensor, start: tf.Tensor,
              losses: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The pass `pass_index` that begins at `start` on these `losses`: `[N]` order, `[N]` weights, size."""
    num_points = self._num_points
    positions = tf.range(num_points, dtype=tf.int64)
    scores = losses if self._irreducible is None else losses - self._irreducible
    below = scores < tf.reduce_mean(scores)
    prunes = tf.logical_and(pass_index >= 1, tf.cast(start, tf.float64) < self._prune_before)
    if self._sampler._chooses_at_random:  # pylint: disable=protected-access
      # As many elements as are below the mean, chosen uniformly: the same counts, no choice by loss.
      count = tf.reduce_sum(tf.cast(below, tf.int64))
      below = _epoch_shuffle.keyed_permutation(positions, _round_keys(key, pass_index, _CHOICE_SALT),
                                               num_points) < count
    pruned = tf.logical_and(below, _epoch_shuffle.keyed_permutation(
        positions, _round_keys(key, pass_index, _PRUNE_SALT), num_points) < self._threshold)
    pruned = tf.logical_and(pruned, prunes)
    # Too few left for a batch: this pass holds every element.
    enough = num_points - tf.reduce_sum(tf.cast(pruned, tf.int64)) >= self._batch_size
    pruned = tf.logical_and(pruned, enough)
    kept_below = tf.logical_and(tf.logical_and(below, tf.logical_not(pruned)), tf.logical_and(prunes, enough))
    weights = tf.where(kept_below, tf.constant(self._kept_weight, tf.float32), 1.0)
    # The kept elements in the order of a keyed permutation: position j holds element sigma(j).
    sigma = _epoch_shuffle.keyed_permutation(positions, _round_keys(key, pass_index, _ORDER_SALT), num_points)
    kept_at = tf.logical_not(tf.gather(pruned, sigma))
    slots = tf.where(kept_at, tf.cumsum(tf.cast(kept_at, tf.int64)) - 1, num_points)
    order = tf.tensor_scatter_nd_update(tf.zeros([num_points + 1], tf.int32), slots[:, None],
                                        tf.cast(sigma, tf.int32))[:num_points]
    return order, weights, tf.reduce_sum(tf.cast(kept_at, tf.int64))

  def sample_weights(self, indices: tf.Tensor) -> tf.Tensor:
    with tf.control_dependencies([indices]):
      return tf.gather(self.state.weights, indices)

  def traced_draw(self):
    """The draw of a step of the pass in force, for `batch_indices`: a ValueError for any other step."""
    state = self.state
    set_up_first = tf.function(lambda key: self._set_up(key, tf.constant(0, tf.int64), tf.constant(0, tf.int64)))
    traced = tf.function(lambda step: (tf.cast(self._indices_of(step), tf.int32)[None], tf.zeros([1], tf.int32)))

    def draw(key, first_step):
      if int(state.pass_index.numpy()) < 0:
        set_up_first(key)  # pass 0 depends on no loss: what the stream's first draw sets up
      step, start, steps = int(first_step), int(state.pass_start.numpy()), int(state.pass_steps.numpy())
      if not start <= step < start + steps:
        raise ValueError(
            f"step {step} is not in the pass in force (steps {start} ... {start + steps - 1}, pass "
            f"{int(state.pass_index.numpy())}): an {type(self._sampler).__name__} batcher knows the batches of "
            "that pass only, since later passes depend on losses not recorded yet.")
      return traced(tf.constant(step, tf.int64))

    return draw

  def record_losses(self, step: tf.Tensor, losses: tf.Tensor) -> tf.Operation:
    state = self.state
    step = tf.cast(step, tf.int64)
    losses = tf.reshape(tf.cast(losses, tf.float32), [self._batch_size])

    def write():
      indices = self._indices_of(step)
      return tf.group(state.losses.scatter_update(tf.IndexedSlices(losses, indices)),
                      state.recorded_through.assign(tf.maximum(state.recorded_through, step)))

    # After the batch: in `fit` the iterator's get_next and these reads are ops of one function,
    # ordered by nothing else, and the draw of a pass's first step writes the pass.
    with tf.control_dependencies([losses]):
      in_pass = self._in_pass(step)
    return tf.group(tf.cond(in_pass, write, tf.no_op),
                    self.faults.assign_add(tf.cast(tf.logical_not(in_pass), tf.int64)))

  def check_recorded(self) -> None:
    faults = int(self.faults.numpy())
    if faults:
      raise ValueError(
          f"{faults} training step(s) recorded losses for a step outside the pass in force: the optimizer's step "
          "and the stream's must agree (start the stream with the package's callback, and restore the sampler "
          "state with the model).")


@dataclasses.dataclass(frozen=True, eq=False)
class EpochPruning(_contract.Sampler):
  """InfoBatch's epoch pruning: passes over the data that skip some of the well-learned elements.

  Pass 0 walks all N elements, k per step, in a random order. Each later pass begins when the
  last one ends. It looks at the loss each element had at the last step that trained on it.
  Each element below the mean of those losses is left out of the pass with probability
  `prune_ratio`; those below the mean that stay weigh 1 / (1 - `prune_ratio`) as Keras sample
  weights, so that a pass still estimates the mean loss over all N without bias. A pass that
  begins at or after `prune_until` x `total_steps` holds every element at weight 1.

  Passes get shorter as the model learns, so the same step budget holds more of them. The
  budget does not change: give `fit` `total_steps` steps in all (epochs x steps_per_epoch) and
  decay the learning rate over `total_steps`, as for full passes. To spend less than full
  passes would, give a smaller `total_steps`.

  The losses come from the training step itself, at no extra cost: train
  `tf_repulsive.RecordingModel(model, batcher)` instead of `model`, or call
  `batcher.record_losses(step, losses)` in each step of a custom loop. The elements must be
  `(x, y)` or `(x, y, sample_weight)`: the weights join them as the sample weight.

  Attributes:
    total_steps: the training's step budget, what the learning rate decays over.
    prune_ratio: r in [0, 1), the share of the below-mean elements each pass leaves out.
    prune_until: delta in (0, 1], the share of `total_steps` during which passes prune.
    irreducible_loss: None, or each element's loss under a model trained on held-out data,
      `[N]` in dataset order: then the score is the recorded loss minus it (RHO-LOSS's reducible
      loss), and elements that no model fits (mislabelled, ambiguous) count as learned.
    timeout_seconds: how long the draw of a pass's first step waits for the losses of the step
      before it, then fails.

  Example:

  >>> import keras, numpy as np, tensorflow as tf, tf_repulsive
  >>> x = np.random.default_rng(0).normal(size=(200, 2)).astype("float32")
  >>> y = (x[:, 0] > 0).astype("int64")
  >>> batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.EpochPruning(total_steps=60), seed=0)
  >>> stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
  >>> trainer = tf_repulsive.RecordingModel(model, batcher)
  >>> trainer.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  >>> _ = trainer.fit(stream, epochs=3, steps_per_epoch=20, verbose=0,
  ...                 callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  >>> int(batcher.sampler_state.pass_index.numpy()) > 2  # passes shorter than 10 steps
  True
  """

  total_steps: int
  prune_ratio: float = 0.5
  prune_until: float = 0.875
  irreducible_loss: Any = None
  timeout_seconds: float = 600.0

  # Whether the elements a pass may prune are a random set as large as the below-mean one.
  _chooses_at_random = False

  def __post_init__(self):
    _checks.integer(self.total_steps, "total_steps", 1)
    ratio = _checks.real(self.prune_ratio, "prune_ratio", positive=False)
    if not ratio < 1:
      raise ValueError(f"`prune_ratio` must be in [0, 1) (a pass keeps some of the below-mean elements); "
                       f"got {self.prune_ratio}.")
    until = _checks.real(self.prune_until, "prune_until", positive=True)
    if until > 1:
      raise ValueError(f"`prune_until` must be in (0, 1], the share of total_steps during which passes prune; "
                       f"got {self.prune_until}.")
    _checks.real(self.timeout_seconds, "timeout_seconds", positive=True)
    _checks.irreducible_loss(self.irreducible_loss)

  def build(self, context: _contract.SamplingContext) -> _contract.BatchDrawer:
    num_points = context.features.shape[0]
    return _PruningDrawer(self, num_points, context.batch_size,
                          _checks.irreducible_for(self.irreducible_loss, num_points))


@dataclasses.dataclass(frozen=True, eq=False)
class RandomPruning(EpochPruning):
  """The control of `EpochPruning`: passes of the same lengths and weights, pruned regardless of the loss.

  Each pass counts the elements below the mean loss as `EpochPruning` does, but the elements
  it may leave out are that many chosen uniformly at random. The counts and weights are those
  of `EpochPruning`; only the choice by loss is gone. What `EpochPruning` gains beyond it is
  what the loss adds.

  Attributes:
    total_steps: the training's step budget (as `EpochPruning`).
    prune_ratio: r in [0, 1), the share of as many elements as are below the mean that each pass
      leaves out.
    prune_until: delta in (0, 1], the share of `total_steps` during which passes prune.
    irreducible_loss: None, or `[N]` losses subtracted before the mean (as `EpochPruning`): here
      they change only the count.
    timeout_seconds: how long the draw of a pass's first step waits for the losses before it.
  """

  _chooses_at_random = True
