"""k-DPP baselines against the exact subset distribution on a tiny kernel (chi-square)."""

import itertools

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import tf_repulsive
from tf_repulsive import _kdpp

POINTS = np.array([[0, 0], [0.4, 0], [3, 0], [3, 0.6], [0, 3], [2, 2]], np.float32)
BANDWIDTH = 2.0
K = 2


def _exact_subset_probabilities():
  kernel = _kdpp.kernel_matrix(POINTS, POINTS, "rbf", BANDWIDTH)
  subsets = list(itertools.combinations(range(len(POINTS)), K))
  weights = np.array([np.linalg.det(kernel[np.ix_(s, s)]) for s in subsets])
  return subsets, weights / weights.sum()


def _subset_counts(sampler, draws):
  indices = tf.data.Dataset.from_tensor_slices(np.arange(len(POINTS)))
  batcher = tf_repulsive.repulsive_batch(K, sampler, features=lambda i: tf.gather(POINTS, i), seed=11, start_step=0)
  # Many independent draws, fast: the stream's steps are drawn in parallel.
  batches = indices.apply(batcher).take(draws)
  subsets, _ = _exact_subset_probabilities()
  position = {s: i for i, s in enumerate(subsets)}
  counts = np.zeros(len(subsets))
  for batch in batches.as_numpy_iterator():
    counts[position[tuple(sorted(batch.tolist()))]] += 1
  return counts


@pytest.mark.slow
@pytest.mark.parametrize("make,draws", [
    (lambda: tf_repulsive.KDPP(bandwidth=BANDWIDTH), 4000),
    (lambda: tf_repulsive.FastKDPP(bandwidth=BANDWIDTH, swaps=40), 1500)])
def test_subset_frequencies_match_determinants(make, draws):
  subsets, exact = _exact_subset_probabilities()
  counts = _subset_counts(make(), draws)
  assert stats.chisquare(counts, exact * counts.sum()).pvalue > 1e-3
  # Power: the same counts reject uniform subsets.
  assert stats.chisquare(counts).pvalue < 1e-6
  # Single-item and pair inclusion probabilities, the DPP's first and second order.
  for item in range(len(POINTS)):
    included = [i for i, s in enumerate(subsets) if item in s]
    assert counts[included].sum() / counts.sum() == pytest.approx(exact[included].sum(), abs=0.04)


def test_elementary_symmetric_polynomials_against_brute_force():
  eigenvalues = np.array([0.5, 2.0, 1.5, 3.0, 0.1])
  table = _kdpp.log_elementary_symmetric(eigenvalues, 3)
  for n in range(6):
    for order in range(4):
      expected = sum(np.prod(c) for c in itertools.combinations(eigenvalues[:n], order))
      assert np.exp(table[order, n]) == pytest.approx(expected) if expected else table[order, n] == -np.inf


def test_large_n_does_not_overflow():
  table = _kdpp.log_elementary_symmetric(np.full(5000, 40.0), 200)
  assert np.all(np.isfinite(table[:, -1]))


def test_kdpp_batches_are_distinct_and_reproducible(digits):
  features, labels = digits
  batcher = tf_repulsive.repulsive_batch(30, tf_repulsive.KDPP(), seed=2, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices((features[:400], labels[:400])).apply(batcher)
  for step, (x, _) in enumerate(batches.take(3).as_numpy_iterator()):
    indices = batcher.batch_indices(step)
    assert len(set(indices.tolist())) == 30
    np.testing.assert_array_equal(x, features[indices])


def test_linear_kernel_rank_caps_the_batch():
  data = tf.data.Dataset.from_tensor_slices(np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32))
  with pytest.raises(ValueError, match="rank"):
    data.apply(tf_repulsive.repulsive_batch(4, tf_repulsive.KDPP(kernel="linear")))
  with pytest.raises(ValueError, match="rank"):
    data.apply(tf_repulsive.repulsive_batch(4, tf_repulsive.FastKDPP(kernel="linear")))


def test_kdpp_refuses_kernels_that_do_not_fit():
  data = tf.data.Dataset.from_tensor_slices(np.zeros((100, 2), np.float32))
  with pytest.raises(ValueError, match="max_kernel_bytes"):
    data.apply(tf_repulsive.repulsive_batch(4, tf_repulsive.KDPP(max_kernel_bytes=1000)))


@pytest.mark.parametrize("make,error", [
    (lambda: tf_repulsive.KDPP(kernel="cosine"), ValueError),
    (lambda: tf_repulsive.KDPP(bandwidth=-1.0), ValueError),
    (lambda: tf_repulsive.FastKDPP(bandwidth="wide"), TypeError),
    (lambda: tf_repulsive.FastKDPP(swaps=0), ValueError)])
def test_bad_configuration(make, error):
  with pytest.raises(error):
    make()
