"""EpochShuffle: what `shuffle(N).batch(k)` does, as a sampler (every element once per epoch).

The order of epoch e is a keyed pseudo-random permutation of 0..N-1 evaluated pointwise (a
Feistel network over the next power of four, cycle-walked into [0, N)), so the batch of a step
costs O(k) and is a pure function of (seed, step) like every other sampler's; no N-element
permutation is ever materialised. (TensorFlow's `index_shuffle` would do the same, but in TF 2.21
it uses only the low 8 bits of each seed word, so its permutations repeat every 256 epochs.) One
draw covers up to 16 steps (`MOST_STEPS_PER_DRAW`) in one evaluation of the network, so that
TensorFlow's cost per op is paid once for all of them.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from tf_repulsive import _contract

_ROUNDS = 6
_WORD = 0xFFFFFFFF
# Odd multipliers below 2**31: a 32-bit value times one stays below 2**63, so int64 never overflows.
_MULTIPLIERS = (0x2C1B3C6D, 0x297A2D39)


def _round_function(half: tf.Tensor, round_key: tf.Tensor, half_mask: int) -> tf.Tensor:
  """A 32-bit integer hash of `half` under `round_key`, cut to `half_mask`'s bits."""
  x = tf.bitwise.bitwise_and(tf.bitwise.bitwise_xor(half, round_key), _WORD)
  x = tf.bitwise.bitwise_and(x * _MULTIPLIERS[0], _WORD)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
  x = tf.bitwise.bitwise_and(x * _MULTIPLIERS[1], _WORD)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
  return tf.bitwise.bitwise_and(x, half_mask)


def keyed_permutation(positions: tf.Tensor, round_keys: tf.Tensor, num_points: int) -> tf.Tensor:
  """The images of `positions` under the permutation of 0..num_points-1 that `round_keys` selects.

  Args:
    positions: int64 tensor of values in [0, num_points).
    round_keys: int64 values in [0, 2**32): `[6]`, one permutation for all of `positions`; or
      `[S, 6]` with `positions` of shape `[S, m]`, one permutation per row.
    num_points: N >= 1.

  Returns:
    int64 tensor like `positions`: distinct positions (of a row) map to distinct values in [0, N).
  """
  half_bits = max(1, math.ceil(math.ceil(math.log2(num_points)) / 2))
  half_mask = (1 << half_bits) - 1
  domain = 1 << (2 * half_bits)
  # Per row, a column of keys that broadcasts along the row.
  keys = [round_keys[..., round_index, None] if round_keys.shape.rank == 2 else round_keys[round_index]
          for round_index in range(_ROUNDS)]

  def feistel(x):
    left = tf.bitwise.right_shift(x, half_bits)
    right = tf.bitwise.bitwise_and(x, half_mask)
    for round_key in keys:
      left, right = right, tf.bitwise.bitwise_xor(left, _round_function(right, round_key, half_mask))
    return tf.bitwise.bitwise_or(tf.bitwise.left_shift(left, half_bits), right)

  # Cycle walking: re-apply the bijection of [0, domain) until the value lands in [0, N). Each
  # walk visits distinct values outside [0, N) before it returns, so domain - N + 1 rounds bound
  # it; the expected number is below 4 (domain < 4 N).
  def outside(x):
    return tf.reduce_any(x >= num_points)

  def walk(x):
    return [tf.where(x >= num_points, feistel(x), x)]

  return tf.while_loop(outside, walk, [feistel(positions)], maximum_iterations=domain - num_points + 1)[0]


def round_keys_of(key: tf.Tensor, steps: tf.Tensor, steps_per_order: int) -> tf.Tensor:
  """`[S, 6]`: per step, the round keys of its order (epoch or cycle n div `steps_per_order`).

  Args:
    key: `[2]` int64 stateless seed.
    steps: `[S]` int64 consecutive steps (S known when tracing).
    steps_per_order: the steps of one order.
  """
  orders = steps // steps_per_order
  first = orders[0]
  # One set of keys per order the S steps can reach, then each step's: the keys of order e are
  # the same whichever draw computes them.
  num_steps = steps.shape[0]
  reachable = min(num_steps, (num_steps - 1) // steps_per_order + 2)
  table = tf.stack([
      tf.random.stateless_uniform([_ROUNDS], tf.random.experimental.stateless_fold_in(key, first + offset),
                                  minval=0, maxval=2**32, dtype=tf.int64)
      for offset in range(reachable)])
  return tf.gather(table, orders - first)


class _EpochOrderDrawer(_contract.BatchDrawer):
  """Step n is batch n mod E of epoch n div E (E = ceil(N / k)) of that epoch's order."""

  def __init__(self, num_points: int, batch_size: int, steps_per_draw: int):
    self._num_points = num_points
    self._batch_size = batch_size
    self._steps_per_epoch = math.ceil(num_points / batch_size)
    self.steps_per_draw = steps_per_draw

  @tf.autograph.experimental.do_not_convert
  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    steps = first_step + tf.range(self.steps_per_draw, dtype=tf.int64)
    first = (steps % self._steps_per_epoch) * self._batch_size
    positions = first[:, None] + tf.range(self._batch_size, dtype=tf.int64)
    # The last batch of an epoch runs past N when k does not divide N: it continues with the
    # first elements of the same order, which are not among its own (the batch stays distinct).
    positions = tf.where(positions >= self._num_points, positions - self._num_points, positions)
    round_keys = round_keys_of(key, steps, self._steps_per_epoch)
    indices = keyed_permutation(positions, round_keys, self._num_points)
    return tf.cast(indices, tf.int32), tf.zeros([self.steps_per_draw], tf.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class EpochShuffle(_contract.Sampler):
  """The baseline users run today: every element once per epoch, in a new seeded order each epoch.

  Like `dataset.shuffle(N).batch(k)`: epoch e (steps e·S ... e·S + S − 1, S = ceil(N / k), the
  batcher's `steps_per_epoch`) walks through a random permutation of the N elements, k at a time.
  When k does not divide N the epoch's last batch is completed with the first elements of the same
  order, so batches keep k distinct elements and a static shape (those elements appear twice in
  that epoch). `Uniform()` is the paper's SGD baseline instead: independent batches, which cover
  about 63% of the elements per epoch.
  """

  def build(self, context: _contract.SamplingContext) -> _contract.BatchDrawer:
    return _EpochOrderDrawer(context.features.shape[0], context.batch_size, context.max_steps_per_draw)
