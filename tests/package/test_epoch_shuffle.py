"""EpochShuffle: one pass over the data per epoch, in a fresh uniformly random order each epoch."""

import itertools

import numpy as np
import pytest
from scipy import stats
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _epoch_shuffle
from tf_repulsive import diagnostics


def _epochs(num_points, batch_size, epochs, seed=0):
  """Per epoch, the concatenated indices of its steps' batches."""
  points = tf.data.Dataset.from_tensor_slices(np.arange(num_points, dtype=np.float32)[:, None])
  batcher = tf_repulsive.repulsive_batch(batch_size, tf_repulsive.EpochShuffle(), seed=seed, start_step=0)
  batches = iter(points.apply(batcher))
  return batcher, [np.concatenate([next(batches).numpy().ravel().astype(int)
                                   for _ in range(batcher.steps_per_epoch)]) for _ in range(epochs)]


@pytest.mark.parametrize("num_points", [1, 2, 3, 5, 16, 17, 1000, 4099])
def test_keyed_permutation_is_a_bijection(num_points):
  positions = tf.range(num_points, dtype=tf.int64)
  for seed in range(3):
    keys = tf.random.stateless_uniform([6], [seed, 1], minval=0, maxval=2**32, dtype=tf.int64)
    image = _epoch_shuffle.keyed_permutation(positions, keys, num_points).numpy()
    np.testing.assert_array_equal(np.sort(image), np.arange(num_points))


def test_every_element_once_per_epoch_when_the_batch_divides_the_data():
  _, epochs = _epochs(100, 10, epochs=4)
  for order in epochs:
    np.testing.assert_array_equal(np.sort(order), np.arange(100))
  assert len({tuple(order) for order in epochs}) == 4


def test_the_last_batch_of_an_epoch_is_completed_from_the_start_of_its_order():
  batcher, epochs = _epochs(103, 10, epochs=3)
  assert batcher.steps_per_epoch == 11
  for order in epochs:
    np.testing.assert_array_equal(np.sort(order[:103]), np.arange(103))
    last_batch = order[100:]
    np.testing.assert_array_equal(last_batch[3:], order[:7])
    assert len(set(last_batch)) == 10


@pytest.mark.slow
def test_orders_are_uniform_over_positions_and_adjacent_pairs():
  # N = 7 walks the Feistel domain of 16 (cycle walking on most draws); k = N makes each step an epoch.
  num_points, epochs = 7, 2100
  batcher, _ = _epochs(num_points, num_points, epochs=0, seed=3)
  orders = diagnostics.draw_batches(batcher, epochs)
  positions = np.zeros([num_points, num_points])
  for order in orders:
    positions[order, np.arange(num_points)] += 1
  position_chi2 = ((positions - epochs / num_points) ** 2 / (epochs / num_points)).sum()
  assert stats.chi2.sf(position_chi2, (num_points - 1) ** 2) > 1e-3
  pairs = np.zeros([num_points, num_points])
  np.add.at(pairs, (orders[:, 0], orders[:, 1]), 1)
  expected = epochs / (num_points * (num_points - 1))
  off_diagonal = ~np.eye(num_points, dtype=bool)
  pair_chi2 = ((pairs[off_diagonal] - expected) ** 2 / expected).sum()
  assert stats.chi2.sf(pair_chi2, num_points * (num_points - 1) - 1) > 1e-3


@pytest.mark.slow
def test_seeds_give_different_orders_and_the_same_seed_the_same():
  _, first = _epochs(50, 5, epochs=2, seed=1)
  _, again = _epochs(50, 5, epochs=2, seed=1)
  _, other = _epochs(50, 5, epochs=2, seed=2)
  np.testing.assert_array_equal(np.stack(first), np.stack(again))
  assert not np.array_equal(np.stack(first), np.stack(other))


@pytest.mark.slow
def test_epochs_follow_the_step_not_the_iterator():
  points = tf.data.Dataset.from_tensor_slices(np.arange(30, dtype=np.float32)[:, None])
  whole = tf_repulsive.repulsive_batch(6, tf_repulsive.EpochShuffle(), seed=4, start_step=0)
  resumed = tf_repulsive.repulsive_batch(6, tf_repulsive.EpochShuffle(), seed=4, start_step=7)
  from_zero = list(itertools.islice(points.apply(whole).as_numpy_iterator(), 12))
  from_seven = list(itertools.islice(points.apply(resumed).as_numpy_iterator(), 5))
  np.testing.assert_array_equal(np.stack(from_zero[7:]), np.stack(from_seven))


@pytest.mark.parametrize("sampler", [tf_repulsive.EpochShuffle(), tf_repulsive.RS2(0.3)], ids=["epoch_shuffle", "rs2"])
@pytest.mark.parametrize("num_points,batch_size", [(37, 5), (40, 40), (3, 1), (1797, 50)])
def test_a_draw_of_16_steps_is_16_draws_of_one(sampler, num_points, batch_size):
  # Orders (epochs, cycles) shorter than a draw, and a draw that straddles two orders.
  def drawer(steps_per_draw):
    return sampler.build(tf_repulsive.SamplingContext(
        features=np.zeros((num_points, 1), np.float32), labels=None, batch_size=batch_size,
        distance_cache_bytes=0, max_steps_per_draw=steps_per_draw))
  many, one = drawer(16), drawer(1)
  assert (many.steps_per_draw, one.steps_per_draw) == (16, 1)
  key = tf.constant([7, 11], tf.int64)
  for first in (0, 16, 48, 1600):
    together = many.draw(key, tf.constant(first, tf.int64))[0].numpy()
    apart = np.concatenate([one.draw(key, tf.constant(first + s, tf.int64))[0].numpy() for s in range(16)])
    np.testing.assert_array_equal(together, apart)
