"""repulsive_batch: batch properties, reproducibility, epochs and iterator checkpoints."""

import warnings

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import tf_repulsive
from conftest import pairwise_distances


def _digits_batches(digits, sampler, batch_size=50, seed=0, count=None, size=None):
  """Batches of (image, label, index into the digits) elements."""
  features, labels = digits
  size = size or len(labels)
  dataset = tf.data.Dataset.from_tensor_slices((features[:size], labels[:size], np.arange(size)))
  batches = dataset.apply(tf_repulsive.repulsive_batch(
      batch_size, sampler, label_fn=lambda x, y, index: y, seed=seed))
  if count is not None:
    batches = batches.repeat().take(count)
  return batches


def test_batches_have_the_structure_of_dataset_batch(digits):
  features, labels = digits
  dataset = tf.data.Dataset.from_tensor_slices({"image": features, "label": labels})
  batches = dataset.apply(tf_repulsive.repulsive_batch(
      32, tf_repulsive.VanillaPDS(), feature_fn=lambda e: e["image"], seed=1))
  assert batches.element_spec == {
      "image": tf.TensorSpec([32, 64], tf.float32), "label": tf.TensorSpec([32], tf.int64)}
  assert int(batches.cardinality()) == int(np.ceil(len(labels) / 32))
  assert sum(1 for _ in batches) == int(np.ceil(len(labels) / 32))


@pytest.mark.parametrize("make_sampler", [
    tf_repulsive.Uniform, tf_repulsive.VanillaPDS, tf_repulsive.EasyPDS, tf_repulsive.AnnealPDS,
    lambda: tf_repulsive.DensePDS([1, 1, 1, 1, 1, 1])])
def test_batches_hold_distinct_dataset_elements(digits, make_sampler):
  features, labels = digits
  for x, y, index in _digits_batches(digits, make_sampler(), count=20).as_numpy_iterator():
    assert len(set(index.tolist())) == 50
    np.testing.assert_array_equal(x, features[index])
    np.testing.assert_array_equal(y, labels[index])


def test_vanilla_batches_keep_the_minimum_distance(digits):
  sampler = tf_repulsive.VanillaPDS()
  batches = _digits_batches(digits, sampler, count=40)
  radius = tf_repulsive.sampling_stats(sampler).radius
  assert radius > 0
  for x, _, _ in batches.as_numpy_iterator():
    assert pairwise_distances(x).min() >= radius
  assert tf_repulsive.sampling_stats(sampler).fallback_batches == 0


def test_uniform_batches_do_violate_that_distance(digits):
  # The property above is not vacuous: uniform batches of the same size break it.
  pds = tf_repulsive.VanillaPDS()
  _digits_batches(digits, pds)
  radius = tf_repulsive.sampling_stats(pds).radius
  violations = [pairwise_distances(x).min() < radius
                for x, _, _ in _digits_batches(digits, tf_repulsive.Uniform(), count=20).as_numpy_iterator()]
  assert np.mean(violations) > 0.5


def test_easy_batches_keep_the_distance_between_easy_points_only(digits):
  features, labels = digits
  easy = tf_repulsive.mingling_index(features, labels, 5) == 0
  sampler = tf_repulsive.EasyPDS()
  batches = _digits_batches(digits, sampler, count=40)
  radius = tf_repulsive.sampling_stats(sampler).radius
  close_pairs_with_a_hard_point = 0
  for x, _, index in batches.as_numpy_iterator():
    flags = easy[index]
    distances = pairwise_distances(x)
    assert distances[np.ix_(flags, flags)].min() >= radius
    close_pairs_with_a_hard_point += int((distances[~flags] < radius).sum())
  assert close_pairs_with_a_hard_point > 0  # hard points are not repulsed


def _overlapping_classes(size=20000, seed=0):
  """Two identically distributed classes in 2-D: mingling values spread over all of 0..5."""
  rng = np.random.default_rng(seed)
  return rng.normal(size=(size, 2)).astype(np.float32), rng.integers(0, 2, size).astype(np.int64)


def _mingling_composition(batches, categories, num_batches):
  counts = np.zeros(6)
  for _, _, index in batches.take(num_batches).as_numpy_iterator():
    counts += np.bincount(categories[index], minlength=6)
  return counts


def test_dense_pds_with_tiny_radius_reproduces_pi():
  features, labels = _overlapping_classes()
  categories = np.round(tf_repulsive.mingling_index(features, labels, 5) * 5).astype(int)
  assert np.bincount(categories, minlength=6).min() > 300
  pi = np.array([0.05, 0.1, 0.15, 0.2, 0.2, 0.3])
  sampler = tf_repulsive.DensePDS(pi, radius=1e-6)
  batches = tf.data.Dataset.from_tensor_slices((features, labels, np.arange(len(labels)))).apply(
      tf_repulsive.repulsive_batch(50, sampler, label_fn=lambda x, y, index: y, seed=4))
  counts = _mingling_composition(batches, categories, 100)
  assert stats.chisquare(counts, counts.sum() * pi).pvalue > 1e-3
  # The same test rejects the data's own histogram: it has power.
  histogram = np.bincount(categories, minlength=6) / len(categories)
  assert stats.chisquare(counts, counts.sum() * histogram).pvalue < 1e-6


def test_dense_pds_skips_mingling_values_no_point_has():
  # Two far-apart classes: every point has mingling index 0, values 1/5 .. 1 have no points.
  rng = np.random.default_rng(2)
  features = np.concatenate([rng.normal(size=(100, 2)), 100 + rng.normal(size=(100, 2))]).astype(np.float32)
  labels = np.repeat([0, 1], 100).astype(np.int64)
  dataset = tf.data.Dataset.from_tensor_slices((features, labels))
  batches = dataset.apply(tf_repulsive.repulsive_batch(
      20, tf_repulsive.DensePDS([0.01, 1, 1, 1, 1, 1], radius=0.0), seed=0))
  for x, _ in batches.as_numpy_iterator():
    assert len(np.unique(x, axis=0)) == 20
  with pytest.raises(ValueError, match="pi"):
    dataset.apply(tf_repulsive.repulsive_batch(20, tf_repulsive.DensePDS([0, 1, 1, 1, 1, 1])))


def test_anneal_pds_starts_with_easy_points_only(digits):
  features, labels = digits
  easy = tf_repulsive.mingling_index(features, labels, 5) == 0
  assert easy.mean() < 0.95
  batches = _digits_batches(digits, tf_repulsive.AnnealPDS(), count=3)
  for _, _, index in batches.as_numpy_iterator():
    assert easy[index].all()


def test_same_seed_same_batches_and_other_seeds_differ(digits):
  first = list(_digits_batches(digits, tf_repulsive.VanillaPDS(), seed=5, count=6).as_numpy_iterator())
  second = list(_digits_batches(digits, tf_repulsive.VanillaPDS(), seed=5, count=6).as_numpy_iterator())
  other = list(_digits_batches(digits, tf_repulsive.VanillaPDS(), seed=6, count=6).as_numpy_iterator())
  for a, b, c in zip(first, second, other):
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])


def test_seed_none_differs_between_pipelines(digits):
  a = next(iter(_digits_batches(digits, tf_repulsive.Uniform(), seed=None)))
  b = next(iter(_digits_batches(digits, tf_repulsive.Uniform(), seed=None)))
  assert not np.array_equal(a[0], b[0])


def test_each_epoch_draws_new_batches(digits):
  batches = _digits_batches(digits, tf_repulsive.VanillaPDS(), size=200)
  first_epoch = [index for _, _, index in batches.as_numpy_iterator()]
  second_epoch = [index for _, _, index in batches.as_numpy_iterator()]
  assert len(first_epoch) == len(second_epoch) == 4
  assert not any(np.array_equal(a, b) for a, b in zip(first_epoch, second_epoch))


def _checkpoint_roundtrip(digits, tmp_path, sampler_factory, seed, consumed, prefetch):
  def pipeline():
    return _digits_batches(digits, sampler_factory(), size=120, seed=seed).repeat().prefetch(prefetch)

  iterator = iter(pipeline())
  for _ in range(consumed):  # three batches per epoch
    next(iterator)
  path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "iterator"))
  expected = [next(iterator)[0].numpy() for _ in range(7)]  # across two more epoch boundaries
  restored = iter(pipeline())
  tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
  return expected, [next(restored)[0].numpy() for _ in range(7)]


@pytest.mark.parametrize("sampler_factory,consumed,prefetch", [
    (tf_repulsive.VanillaPDS, 4, 0), (tf_repulsive.VanillaPDS, 3, 5), (tf_repulsive.AnnealPDS, 5, 1)])
def test_restored_iterator_continues_with_identical_batches(
    digits, tmp_path, sampler_factory, consumed, prefetch):
  expected, restored = _checkpoint_roundtrip(
      digits, tmp_path, sampler_factory, seed=9, consumed=consumed, prefetch=prefetch)
  for a, b in zip(expected, restored):
    np.testing.assert_array_equal(a, b)
  # Epochs differ, so continuing from the start instead would have been caught.
  fresh = [x for x, _, _ in _digits_batches(digits, sampler_factory(), size=120, seed=9)
           .repeat().take(7).as_numpy_iterator()]
  assert not all(np.array_equal(a, b) for a, b in zip(expected, fresh))


def test_stats_count_fallback_batches(digits):
  sampler = tf_repulsive.VanillaPDS(radius=100.0, max_darts=64)
  with pytest.warns(RuntimeWarning, match="filled only"):
    batches = _digits_batches(digits, sampler, batch_size=10, count=5)
  for _, _, index in batches.as_numpy_iterator():
    assert len(set(index.tolist())) == 10
  stats_now = tf_repulsive.sampling_stats(sampler)
  assert stats_now.batches >= 5  # and any drawn ahead by the parallel map
  assert stats_now.fallback_batches == stats_now.batches
  assert stats_now.fallback_points == 9 * stats_now.batches


def test_a_radius_too_large_for_the_batch_warns_at_build_time(digits):
  with pytest.warns(RuntimeWarning, match=r"filled only 1 of 10 points .* radius 100"):
    _digits_batches(digits, tf_repulsive.VanillaPDS(radius=100.0, max_darts=64), batch_size=10)
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)
    _digits_batches(digits, tf_repulsive.VanillaPDS(), batch_size=50)
    _digits_batches(digits, tf_repulsive.Uniform(), batch_size=50)


def test_batch_indices_recomputes_what_the_pipeline_drew(digits):
  sampler = tf_repulsive.EasyPDS()
  for step, (_, _, index) in enumerate(_digits_batches(digits, sampler, count=40).as_numpy_iterator()):
    np.testing.assert_array_equal(tf_repulsive.batch_indices(sampler, step), index)
  with pytest.raises(ValueError, match="step"):
    tf_repulsive.batch_indices(sampler, -1)


@pytest.mark.parametrize("make_sampler", [tf_repulsive.Uniform, tf_repulsive.VanillaPDS])
def test_batches_do_not_repeat_over_many_steps(digits, make_sampler):
  # TF's index_shuffle uses only 8 bits of each seed word: a sampler built on it repeats every 256 steps.
  sampler = make_sampler()
  _digits_batches(digits, sampler, batch_size=20)
  draws = {tuple(sorted(tf_repulsive.batch_indices(sampler, step).tolist())) for step in range(600)}
  assert len(draws) == 600


def test_uniform_inclusion_is_uniform():
  for size, batch_size, max_batches in ((40, 8, 600), (12, 11, 600)):
    sampler = tf_repulsive.Uniform()
    tf.data.Dataset.range(size).apply(tf_repulsive.repulsive_batch(batch_size, sampler, seed=3))
    counts = np.bincount(np.concatenate([tf_repulsive.batch_indices(sampler, n) for n in range(max_batches)]),
                         minlength=size)
    assert stats.chisquare(counts).pvalue > 1e-3
