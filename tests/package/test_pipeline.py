"""repulsive_batch: batch properties, reproducibility and the step stream."""

import gc
import warnings
import weakref

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import tf_repulsive
from tf_repulsive import diagnostics
from cached_samplers import EasyPDSWithCache
from cached_samplers import VanillaPDSWithCache
from conftest import pairwise_distances


def _digits_pipeline(digits, sampler, batch_size=50, seed=0, size=None, start_step=0, **options):
  """The batcher and batch stream of (image, label, index into the digits) elements."""
  features, labels = digits
  size = size or len(labels)
  dataset = tf.data.Dataset.from_tensor_slices((features[:size], labels[:size], np.arange(size)))
  batcher = tf_repulsive.repulsive_batch(
      batch_size, sampler, labels=lambda x, y, index: y, seed=seed, start_step=start_step,
      options=tf_repulsive.BatcherOptions(**options))
  return batcher, dataset.apply(batcher)


def _digits_batches(digits, sampler, count, **kwargs):
  """The first `count` batches of a digits pipeline."""
  return _digits_pipeline(digits, sampler, **kwargs)[1].take(count)


def test_batches_have_the_structure_of_dataset_batch(digits):
  features, labels = digits
  dataset = tf.data.Dataset.from_tensor_slices({"image": features, "label": labels})
  batcher = tf_repulsive.repulsive_batch(32, tf_repulsive.VanillaPDS(), features=lambda e: e["image"], seed=1,
                                         start_step=0)
  batches = dataset.apply(batcher)
  assert batches.element_spec == {
      "image": tf.TensorSpec([32, 64], tf.float32), "label": tf.TensorSpec([32], tf.int64)}
  # One unbounded stream; an epoch is a number of its steps.
  assert int(batches.cardinality()) == tf.data.INFINITE_CARDINALITY
  assert batcher.steps_per_epoch == int(np.ceil(len(labels) / 32))


@pytest.mark.slow
@pytest.mark.parametrize("make_sampler", [
    tf_repulsive.Uniform, tf_repulsive.VanillaPDS, tf_repulsive.EasyPDS, tf_repulsive.AnnealPDS,
    lambda: tf_repulsive.DensePDS([1, 1, 1, 1, 1, 1])])
def test_batches_hold_distinct_dataset_elements(digits, make_sampler):
  features, labels = digits
  for x, y, index in _digits_batches(digits, make_sampler(), 20).as_numpy_iterator():
    assert len(set(index.tolist())) == 50
    np.testing.assert_array_equal(x, features[index])
    np.testing.assert_array_equal(y, labels[index])


def _assert_cache(batcher, built):
  assert (batcher.drawer._state.sq_distances is not None) == built  # pylint: disable=protected-access


# With the distance cache the disk tests look distances up; without it they compute Gram blocks.
@pytest.mark.parametrize("distance_cache_bytes", [2**29, 0])
def test_vanilla_batches_keep_the_minimum_distance(digits, distance_cache_bytes):
  batcher, batches = _digits_pipeline(digits, VanillaPDSWithCache(), distance_cache_bytes=distance_cache_bytes)
  _assert_cache(batcher, distance_cache_bytes > 0)
  radius = batcher.stats().report["radius"]
  assert radius > 0
  for x, _, _ in batches.take(40).as_numpy_iterator():
    assert pairwise_distances(x).min() >= radius
  assert batcher.stats().fallback_batches == 0


def test_uniform_batches_do_violate_that_distance(digits):
  # The property above is not vacuous: uniform batches of the same size break it.
  radius = _digits_pipeline(digits, tf_repulsive.VanillaPDS())[0].stats().report["radius"]
  violations = [pairwise_distances(x).min() < radius
                for x, _, _ in _digits_batches(digits, tf_repulsive.Uniform(), 20).as_numpy_iterator()]
  assert np.mean(violations) > 0.5


def test_easy_batches_keep_the_distance_between_easy_points_only(digits):
  features, labels = digits
  easy = tf_repulsive.mingling_index(features, labels, 5) == 0
  batcher, batches = _digits_pipeline(digits, tf_repulsive.EasyPDS())
  radius = batcher.stats().report["radius"]
  close_pairs_with_a_hard_point = 0
  for x, _, index in batches.take(40).as_numpy_iterator():
    flags = easy[index]
    distances = pairwise_distances(x)
    assert distances[np.ix_(flags, flags)].min() >= radius
    close_pairs_with_a_hard_point += int((distances[~flags] < radius).sum())
  assert close_pairs_with_a_hard_point > 0  # hard points are not repulsed


def _overlapping_classes(size=20000, seed=0):
  """Two identically distributed classes in 2-D: mingling values spread over all of 0..5."""
  rng = np.random.default_rng(seed)
  return rng.normal(size=(size, 2)).astype(np.float32), rng.integers(0, 2, size).astype(np.int64)


def _mingling_mix(batches, mingling_values, num_batches):
  counts = np.zeros(6)
  for _, _, index in batches.take(num_batches).as_numpy_iterator():
    counts += np.bincount(mingling_values[index], minlength=6)
  return counts


@pytest.mark.slow
def test_dense_pds_with_tiny_radius_reproduces_pi():
  features, labels = _overlapping_classes()
  mingling_values = np.round(tf_repulsive.mingling_index(features, labels, 5) * 5).astype(int)
  assert np.bincount(mingling_values, minlength=6).min() > 300
  pi = np.array([0.05, 0.1, 0.15, 0.2, 0.2, 0.3])
  sampler = tf_repulsive.DensePDS(pi, radius=1e-6)
  batches = tf.data.Dataset.from_tensor_slices((features, labels, np.arange(len(labels)))).apply(
      tf_repulsive.repulsive_batch(50, sampler, labels=lambda x, y, index: y, seed=4, start_step=0))
  counts = _mingling_mix(batches, mingling_values, 100)
  assert stats.chisquare(counts, counts.sum() * pi).pvalue > 1e-3
  # The same test rejects the data's own histogram: it has power.
  histogram = np.bincount(mingling_values, minlength=6) / len(mingling_values)
  assert stats.chisquare(counts, counts.sum() * histogram).pvalue < 1e-6


def test_dense_pds_skips_mingling_values_no_point_has():
  # Two far-apart classes: every point has mingling index 0, values 1/5 .. 1 have no points.
  rng = np.random.default_rng(2)
  features = np.concatenate([rng.normal(size=(100, 2)), 100 + rng.normal(size=(100, 2))]).astype(np.float32)
  labels = np.repeat([0, 1], 100).astype(np.int64)
  dataset = tf.data.Dataset.from_tensor_slices((features, labels))
  batches = dataset.apply(tf_repulsive.repulsive_batch(
      20, tf_repulsive.DensePDS([0.01, 1, 1, 1, 1, 1], radius=0.0), seed=0, start_step=0))
  for x, _ in batches.take(10).as_numpy_iterator():
    assert len(np.unique(x, axis=0)) == 20
  with pytest.raises(ValueError, match="pi"):
    dataset.apply(tf_repulsive.repulsive_batch(20, tf_repulsive.DensePDS([0, 1, 1, 1, 1, 1])))


def test_anneal_pds_starts_with_easy_points_only(digits):
  features, labels = digits
  easy = tf_repulsive.mingling_index(features, labels, 5) == 0
  assert easy.mean() < 0.95
  batches = _digits_batches(digits, tf_repulsive.AnnealPDS(), 3)
  for _, _, index in batches.as_numpy_iterator():
    assert easy[index].all()


def test_same_seed_same_batches_and_other_seeds_differ(digits):
  first = list(_digits_batches(digits, tf_repulsive.VanillaPDS(), 6, seed=5).as_numpy_iterator())
  second = list(_digits_batches(digits, tf_repulsive.VanillaPDS(), 6, seed=5).as_numpy_iterator())
  other = list(_digits_batches(digits, tf_repulsive.VanillaPDS(), 6, seed=6).as_numpy_iterator())
  for a, b, c in zip(first, second, other):
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])


def test_one_sampler_configures_many_pipelines(digits):
  sampler = tf_repulsive.VanillaPDS()
  first, first_batches = _digits_pipeline(digits, sampler, seed=5)
  second, second_batches = _digits_pipeline(digits, sampler, seed=6, size=600)
  np.testing.assert_array_equal(next(iter(first_batches))[2], first.batch_indices(0))
  np.testing.assert_array_equal(next(iter(second_batches))[2], second.batch_indices(0))
  assert second.num_points == 600 and first.num_points == len(digits[1])


@pytest.mark.slow
@pytest.mark.parametrize("sampler", [tf_repulsive.VanillaPDS(), tf_repulsive.VanillaPDS(radius="auto"),
                                     tf_repulsive.AnnealPDS(), tf_repulsive.KDPP()],
                         ids=["default radius", "auto radius", "anneal", "k-DPP"])
def test_a_dropped_pipeline_frees_its_drawer_at_once(digits, sampler):
  # The drawer holds the centred features and the distance cache (up to 512 MiB): in a reference
  # cycle they would stay until Python's next full garbage collection. The traces the process
  # keeps for later throwers of the same configuration hold none of it, nor the plan's [N] arrays.
  batcher, batches = _digits_pipeline(digits, sampler)
  next(iter(batches))
  batcher.batch_indices(20)
  drawer = weakref.ref(batcher._built.drawer)
  plan = getattr(batcher._built.drawer, "_plan", None)
  arrays = () if plan is None else (plan.point_radius, plan.mingling_values)
  per_point = [weakref.ref(array) for array in arrays if array is not None]
  del plan, arrays
  gc.disable()
  try:
    del batcher, batches
    assert drawer() is None and all(array() is None for array in per_point)
  finally:
    gc.enable()


def test_a_batcher_drives_one_pipeline(digits):
  batcher, _ = _digits_pipeline(digits, tf_repulsive.Uniform())
  with pytest.raises(ValueError, match="already drives a pipeline"):
    tf.data.Dataset.from_tensor_slices(digits[0]).apply(batcher)


def test_seed_none_differs_between_pipelines(digits):
  a = next(iter(_digits_batches(digits, tf_repulsive.Uniform(), 1, seed=None)))
  b = next(iter(_digits_batches(digits, tf_repulsive.Uniform(), 1, seed=None)))
  assert not np.array_equal(a[0], b[0])


def test_the_stream_starts_at_start_step_and_epochs_differ(digits):
  batcher, batches = _digits_pipeline(digits, tf_repulsive.VanillaPDS(), size=200, start_step=7)
  steps = batcher.steps_per_epoch
  stream = [index for _, _, index in batches.take(3 * steps).as_numpy_iterator()]
  for offset, index in enumerate(stream):
    np.testing.assert_array_equal(index, batcher.batch_indices(7 + offset))
  epochs = [stream[e * steps:(e + 1) * steps] for e in range(3)]
  assert not any(np.array_equal(a, b) for a, b in zip(epochs[0], epochs[1]))


def test_a_stream_without_a_start_says_what_to_add(digits):
  batcher, batches = _digits_pipeline(digits, tf_repulsive.Uniform(), start_step=None)
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"AnnealingCallback.*batcher\.start_at\(int\(optimizer"):
    next(iter(batches))
  batcher.start_at(11)
  np.testing.assert_array_equal(next(iter(batches))[2], batcher.batch_indices(11))
  assert batcher.stats().last_start == 11


def test_each_start_serves_one_stream(digits):
  # A second stream on the same start would repeat the first one's batches: a custom loop that
  # opens an iterator per epoch, or a repeat() after the batcher.
  batcher, batches = _digits_pipeline(digits, tf_repulsive.VanillaPDS(), start_step=None)
  batcher.start_at(3)
  first = [index for _, _, index in batches.take(2).as_numpy_iterator()]
  np.testing.assert_array_equal(first, [batcher.batch_indices(3), batcher.batch_indices(4)])
  with pytest.raises(tf.errors.InvalidArgumentError, match="each start serves one stream"):
    next(iter(batches))
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"a repeat\(\) after the batcher"):
    batcher.start_at(5)
    list(batches.take(2).repeat(2).as_numpy_iterator())
  batcher.start_at(5)
  np.testing.assert_array_equal(next(iter(batches))[2], batcher.batch_indices(5))
  assert batcher.stats().streams == 3  # the streams refused never drew


def test_stats_count_fallback_batches(digits):
  with pytest.warns(RuntimeWarning, match="filled only"):
    batcher, batches = _digits_pipeline(
        digits, tf_repulsive.VanillaPDS(radius=100.0, max_darts=64), batch_size=10)
  for _, _, index in batches.take(5).as_numpy_iterator():
    assert len(set(index.tolist())) == 10
  stats_now = batcher.stats()
  assert stats_now.batches >= 5  # and any drawn ahead by the parallel map
  assert stats_now.fallback_batches == stats_now.batches
  assert stats_now.fallback_points == 9 * stats_now.batches


def test_a_radius_too_large_for_the_batch_warns_at_build_time(digits):
  with pytest.warns(RuntimeWarning, match=r"filled only 1 of 10 points .* radius 100"):
    _digits_pipeline(digits, tf_repulsive.VanillaPDS(radius=100.0, max_darts=64), batch_size=10)
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)
    _digits_pipeline(digits, tf_repulsive.VanillaPDS(), batch_size=50)
    _digits_pipeline(digits, tf_repulsive.Uniform(), batch_size=50)


@pytest.mark.slow
@pytest.mark.parametrize("distance_cache_bytes", [2**29, 0])
def test_batch_indices_recomputes_what_the_pipeline_drew(digits, distance_cache_bytes):
  batcher, batches = _digits_pipeline(digits, EasyPDSWithCache(), distance_cache_bytes=distance_cache_bytes)
  _assert_cache(batcher, distance_cache_bytes > 0)
  for step, (_, _, index) in enumerate(batches.take(40).as_numpy_iterator()):
    np.testing.assert_array_equal(batcher.batch_indices(step), index)
  with pytest.raises(ValueError, match="step"):
    batcher.batch_indices(-1)


@pytest.mark.slow
@pytest.mark.parametrize("make_sampler", [tf_repulsive.Uniform, tf_repulsive.VanillaPDS])
def test_batches_do_not_repeat_over_many_steps(digits, make_sampler):
  # TF's index_shuffle uses only 8 bits of each seed word: a sampler built on it repeats every 256 steps.
  batcher, _ = _digits_pipeline(digits, make_sampler(), batch_size=20)
  draws = {tuple(sorted(batch.tolist())) for batch in diagnostics.draw_batches(batcher, 600)}
  assert len(draws) == 600


@pytest.mark.slow
def test_uniform_inclusion_is_uniform():
  for size, batch_size, max_batches in ((40, 8, 600), (12, 11, 600)):
    batcher = tf_repulsive.repulsive_batch(batch_size, tf_repulsive.Uniform(), seed=3)
    tf.data.Dataset.range(size).apply(batcher)
    counts = np.bincount(diagnostics.draw_batches(batcher, max_batches).ravel(), minlength=size)
    assert stats.chisquare(counts).pvalue > 1e-3


@pytest.mark.slow
def test_group_mixes_are_recorded_as_drawn_and_recomputed_otherwise(digits):
  features, labels = digits
  values = np.round(tf_repulsive.mingling_index(features, labels, 5) * 5).astype(int)
  batcher, batches = _digits_pipeline(digits, tf_repulsive.AnnealPDS())
  drawn = [index for _, _, index in batches.take(10).as_numpy_iterator()]
  expected = np.stack([np.bincount(values[index], minlength=6) / 50 for index in drawn])
  recompute = batcher.batch_indices
  batcher.batch_indices = None  # the drawn steps must be read from the record, not recomputed
  np.testing.assert_allclose(batcher.group_mixes(range(10)), expected)
  batcher.batch_indices = recompute
  np.testing.assert_allclose(batcher.group_mixes([5000]),
                             [np.bincount(values[batcher.batch_indices(5000)], minlength=6) / 50])
  assert _digits_pipeline(digits, tf_repulsive.VanillaPDS())[0].group_mixes([0]) is None


def test_removed_names_say_where_they_went():
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), seed=0)
  with pytest.raises(AttributeError, match=r"AnnealingCallback\(batcher, dataset=\.\.\.\)"):
    batcher.transformations_after  # pylint: disable=pointless-statement
  with pytest.raises(AttributeError, match="callbacks"):
    batcher.allow_build_probe  # pylint: disable=pointless-statement
  with pytest.raises(AttributeError, match=r"batcher\.stats\(\)\.last_start"):
    batcher.last_start  # pylint: disable=pointless-statement
  with pytest.raises(AttributeError, match=r"batcher\.element_labels"):
    batcher.labels  # pylint: disable=pointless-statement
  with pytest.raises(AttributeError, match="passed as `features=`"):
    batcher.model_space  # pylint: disable=pointless-statement
  with pytest.raises(AttributeError, match="no attribute 'misspelled'"):
    batcher.misspelled  # pylint: disable=pointless-statement
