"""The inputs users bring: dict elements by name, huge feature values, seeds (issue 9, first part)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from conftest import pairwise_distances
from tf_repulsive import _radius


def _points(size=300, dim=4, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(size, dim)).astype(np.float32), rng.integers(0, 3, size).astype(np.int64)


def test_dict_elements_take_the_label_key_not_the_last_sorted_key():
  x, y = _points()
  speakers = np.array([f"speaker{i % 7}" for i in range(len(y))])
  dataset = tf.data.Dataset.from_tensor_slices({"audio": x, "label": y, "speaker_id": speakers})
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.EasyPDS(), seed=0, start_step=0)
  batches = dataset.apply(batcher)
  np.testing.assert_array_equal(batcher.labels, y)
  assert batcher.stats().radius == pytest.approx(_radius.half_median_distance(x))
  batch = next(iter(batches))
  assert set(batch) == {"audio", "label", "speaker_id"}


def test_dict_features_are_the_one_numeric_component_besides_the_label():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices({"x": x, "label": y}).apply(batcher)
  # Sorted keys put "label" first: distances on the labels would give this radius instead.
  radius = batcher.stats().radius
  assert radius == pytest.approx(_radius.half_median_distance(x))
  assert radius != pytest.approx(_radius.half_median_distance(y[:, None].astype(np.float32)))
  for batch in batches.take(5).as_numpy_iterator():
    assert pairwise_distances(batch["x"]).min() >= radius


def test_ambiguous_dict_features_ask_for_feature_fn_and_list_the_keys():
  x, y = _points()
  dataset = tf.data.Dataset.from_tensor_slices({"image": x, "label": y, "id": np.arange(len(y))})
  with pytest.raises(ValueError, match=r"keys \['id', 'image', 'label'\].*'id' and 'image'.*feature_fn"):
    dataset.apply(tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS()))
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), feature_fn=lambda e: e["image"])
  dataset.apply(batcher)
  assert batcher.stats().radius == pytest.approx(_radius.half_median_distance(x))


def test_dict_without_a_label_key_asks_for_label_fn():
  x, y = _points()
  dataset = tf.data.Dataset.from_tensor_slices({"x": x, "class_id": y})
  with pytest.raises(ValueError, match=r"no 'label' key: pass `label_fn`"):
    dataset.apply(tf_repulsive.repulsive_batch(20, tf_repulsive.AnnealPDS()))


@pytest.mark.parametrize("magnitude", [1e19, 1e30, 1e-30])
def test_huge_or_tiny_features_still_give_distinct_points_at_the_radius(magnitude):
  x, _ = _points(size=200, dim=3)
  features = (x.astype(np.float64) * magnitude).astype(np.float32)
  radius = 0.5 * magnitude
  batcher = tf_repulsive.repulsive_batch(32, tf_repulsive.VanillaPDS(radius=radius), seed=1, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices((features, np.arange(200))).apply(batcher)
  for points, index in batches.take(10).as_numpy_iterator():
    assert len(set(index.tolist())) == 32
    if batcher.stats().fallback_batches == 0:
      assert pairwise_distances(points).min() >= radius


def test_seed_none_follows_the_global_seed():
  def seed_after(set_seed):
    set_seed(123)
    return tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform()).seed

  assert seed_after(tf.random.set_seed) == seed_after(tf.random.set_seed)
  assert seed_after(keras.utils.set_random_seed) == seed_after(keras.utils.set_random_seed)
  tf.random.set_seed(123)
  first = tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform()).seed
  assert tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform()).seed != first  # like TF ops: a new draw


def test_seed_out_of_range_names_the_argument_and_the_range():
  with pytest.raises(ValueError, match=r"`seed` must be a 64-bit integer, in \[-2\*\*63, 2\*\*63 - 1\]"):
    tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform(), seed=2**70)


@pytest.mark.parametrize("batch", [
    lambda ds: ds.batch(32), lambda ds: ds.batch(32, drop_remainder=True).prefetch(2),
    lambda ds: ds.padded_batch(32)])
def test_already_batched_input_is_refused_with_the_fix(batch):
  x, y = _points()
  dataset = batch(tf.data.Dataset.from_tensor_slices((x, y)))
  with pytest.raises(ValueError, match=r"already batched \(a Dataset.batch\(32\).*unbatch\(\)"):
    dataset.apply(tf_repulsive.repulsive_batch(4, tf_repulsive.VanillaPDS()))


def test_unbatched_or_array_elements_are_fine():
  x, y = _points()
  dataset = tf.data.Dataset.from_tensor_slices((x, y))
  unbatched = dataset.batch(32).unbatch()
  batcher = tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform(), start_step=0)
  assert next(iter(unbatched.apply(batcher)))[0].shape == (4, 4)
  # Batches reduced to one vector each are elements, not batches.
  means = dataset.batch(10).map(lambda xs, ys: tf.reduce_mean(xs, axis=0))
  batcher = tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform(), start_step=0)
  assert next(iter(means.apply(batcher))).shape == (4, 4)
  # Elements that are arrays (a 32 x 4 matrix per element) with no batching upstream.
  matrices = tf.data.Dataset.from_tensor_slices(np.zeros((10, 32, 4), np.float32))
  batcher = tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform(), start_step=0)
  assert next(iter(matrices.apply(batcher))).shape == (4, 32, 4)
