"""RS2: each pass a fresh uniform random subset of the data, without replacement across passes.

Okanovic et al. (ICLR 2024), "Repeated Random Sampling for Minimizing the Time-to-Accuracy of
Learning": a cycle walks a keyed random permutation of the N elements in passes of m elements,
so every element is in one pass per cycle. A pass of m' elements takes ceil(m' / k) steps; its
last batch wraps to the pass's own first elements. The cycle's last pass holds the rest, and
joins the one before when the rest is fewer than k. The batch of step n is a pure function of
(seed, n), like `EpochShuffle`'s.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _contract
from tf_repulsive import _epoch_shuffle


class _SubsetDrawer(_contract.BatchDrawer):
  """Step n: cycle c, pass j of it, batch b of the pass, over cycle c's keyed permutation."""

  def __init__(self, num_points: int, batch_size: int, pass_size: int, steps_per_draw: int):
    self._num_points = num_points
    self._batch_size = batch_size
    passes = num_points // pass_size
    if num_points - passes * pass_size >= batch_size:
      passes += 1  # the rest is a pass of its own; else it joins the last full pass
    self._passes = passes
    self._pass_size = pass_size
    self._last_size = num_points - (passes - 1) * pass_size
    self._steps = math.ceil(pass_size / batch_size)
    self._last_steps = math.ceil(self._last_size / batch_size)
    self.steps_per_cycle = (passes - 1) * self._steps + self._last_steps
    self.report = {"pass_size": float(pass_size), "passes_per_cycle": float(passes)}
    self.steps_per_draw = steps_per_draw

  @tf.autograph.experimental.do_not_convert
  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    steps = first_step + tf.range(self.steps_per_draw, dtype=tf.int64)
    in_cycle = steps % self.steps_per_cycle
    passes_before = tf.minimum(in_cycle // self._steps, self._passes - 1)
    batch = in_cycle - passes_before * self._steps
    size = tf.where(passes_before == self._passes - 1, tf.constant(self._last_size, tf.int64),
                    tf.constant(self._pass_size, tf.int64))[:, None]
    slots = (batch * self._batch_size)[:, None] + tf.range(self._batch_size, dtype=tf.int64)
    slots = tf.where(slots >= size, slots - size, slots)
    positions = (passes_before * self._pass_size)[:, None] + slots
    round_keys = _epoch_shuffle.round_keys_of(key, steps, self.steps_per_cycle)
    indices = _epoch_shuffle.keyed_permutation(positions, round_keys, self._num_points)
    return tf.cast(indices, tf.int32), tf.zeros([self.steps_per_draw], tf.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class RS2(_contract.Sampler):
  """Repeated random subsets without replacement (RS2): the control any pruning must beat.

  Each pass trains on a fresh uniform random subset of `fraction` x N elements. Passes walk
  one random order of the whole dataset, so every element comes once in each 1 / `fraction`
  passes, as in a shuffled epoch. No element is weighted. It saves time only through a smaller
  step budget: train for fewer steps than full passes would take, with the learning rate
  decayed over them.

  Attributes:
    fraction: the share of the dataset in each pass, in (0, 1]; the pass holds at least k
      elements.
  """

  fraction: float = 0.5

  def __post_init__(self):
    fraction = _checks.real(self.fraction, "fraction", positive=True)
    if fraction > 1:
      raise ValueError(f"`fraction` must be in (0, 1], the share of the dataset in each pass; got {self.fraction}.")

  def build(self, context: _contract.SamplingContext) -> _contract.BatchDrawer:
    num_points = context.features.shape[0]
    return _SubsetDrawer(num_points, context.batch_size,
                         min(num_points, max(context.batch_size, round(self.fraction * num_points))),
                         context.max_steps_per_draw)
