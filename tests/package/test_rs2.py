"""RS2: passes of fresh uniform random subsets, every element once per cycle, a batch a pure function of the step."""

import numpy as np
import pytest
from scipy import stats
import tensorflow as tf

import tf_repulsive


def _batcher(num_points, batch_size, fraction, seed=0):
  batcher = tf_repulsive.repulsive_batch(batch_size, tf_repulsive.RS2(fraction=fraction), seed=seed, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices(np.arange(num_points, dtype=np.float32)[:, None]).apply(batcher)
  return batcher, stream


@pytest.mark.parametrize("num_points, batch_size, fraction, pass_sizes", [
    (100, 10, 0.3, [30, 30, 30, 10]),  # a rest of one batch: a pass of its own
    (97, 10, 0.31, [30, 30, 37]),  # a rest of 7 < k joins the last pass
    (104, 10, 0.5, [52, 52]),
    (50, 10, 1.0, [50]),
], ids=["rest_of_one_batch", "rest_joins", "halves", "whole"])
def test_a_cycle_holds_every_element_once_in_passes_of_the_fraction(num_points, batch_size, fraction, pass_sizes):
  batcher, stream = _batcher(num_points, batch_size, fraction)
  steps = [-(-size // batch_size) for size in pass_sizes]
  delivered = [batch.ravel().astype(int) for batch in stream.take(2 * sum(steps)).as_numpy_iterator()]
  for cycle in range(2):
    first = cycle * sum(steps)
    elements = []
    for size, count in zip(pass_sizes, steps):
      batches = delivered[first:first + count]
      first += count
      walked = np.concatenate(batches)
      assert all(len(set(batch)) == batch_size for batch in batches)
      assert len(set(walked)) == size  # the last batch wraps to the pass's own first elements
      np.testing.assert_array_equal(walked[size:], walked[:len(walked) - size])
      elements.append(walked[:size])
    np.testing.assert_array_equal(np.sort(np.concatenate(elements)), np.arange(num_points))
  for step in (0, 5, sum(steps) + 1):
    np.testing.assert_array_equal(batcher.batch_indices(step), delivered[step])


@pytest.mark.slow
def test_a_pass_is_a_uniform_subset():
  num_points, batch_size, cycles = 40, 5, 1500
  batcher, _ = _batcher(num_points, batch_size, 0.25, seed=2)  # passes of 10 elements, 2 steps each
  steps_per_cycle = 8
  counts = np.zeros(num_points)
  for cycle in range(cycles):
    first = cycle * steps_per_cycle
    counts[np.concatenate([batcher.batch_indices(first), batcher.batch_indices(first + 1)])] += 1
  expected = cycles * 0.25
  statistic = np.sum((counts - expected) ** 2 / (expected * 0.75))
  critical = stats.chi2.ppf(0.999, num_points - 1)
  assert statistic < critical
  # The control: the same counts against a law that favours the first quarter twice over fail.
  skewed = np.where(np.arange(num_points) < 10, 2.0, 1.0)
  skewed *= 0.25 * num_points / skewed.sum()
  assert np.sum((counts - cycles * skewed) ** 2 / (cycles * skewed * (1 - skewed))) > critical


def test_bad_fractions_are_refused():
  for fraction, error in ((0.0, ValueError), (1.5, ValueError), (-1, ValueError), ("half", TypeError)):
    with pytest.raises(error, match="fraction"):
      tf_repulsive.RS2(fraction=fraction)
