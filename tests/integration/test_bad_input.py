"""Bad input fails fast with an error that names the argument."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive


def _dataset(size=40, dim=3, labels=True):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(size, dim)).astype(np.float32)
  y = rng.integers(0, 2, size).astype(np.int64)
  return tf.data.Dataset.from_tensor_slices((x, y) if labels else x)


@pytest.mark.parametrize("batch_size,error,match", [
    (0, ValueError, "batch_size"), (-3, ValueError, "batch_size"), (2.5, TypeError, "batch_size"),
    (True, TypeError, "batch_size")])
def test_batch_size_checked_when_built(batch_size, error, match):
  with pytest.raises(error, match=match):
    tf_repulsive.repulsive_batch(batch_size, tf_repulsive.Uniform())


def test_batch_size_larger_than_dataset():
  with pytest.raises(ValueError, match="batch_size.*exceeds"):
    _dataset(10).apply(tf_repulsive.repulsive_batch(11, tf_repulsive.Uniform()))


def test_batch_of_whole_dataset_is_allowed():
  batch = next(iter(_dataset(10).apply(tf_repulsive.repulsive_batch(10, tf_repulsive.VanillaPDS(), start_step=0))))
  assert batch[0].shape == (10, 3)


def test_sampler_type_checked():
  with pytest.raises(TypeError, match="sampler"):
    tf_repulsive.repulsive_batch(5, "vanilla")


def test_seed_type_checked():
  with pytest.raises(TypeError, match="seed"):
    tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform(), seed="0")


def test_empty_dataset():
  with pytest.raises(ValueError, match="empty"):
    _dataset().take(0).apply(tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform()))


def test_infinite_dataset():
  with pytest.raises(ValueError, match="infinite"):
    _dataset().repeat().apply(tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform()))


def test_unknown_size_dataset_beyond_max_elements():
  endless = tf.data.Dataset.from_generator(
      lambda: itertools.repeat(np.zeros(3, np.float32)), output_signature=tf.TensorSpec([3], tf.float32))
  with pytest.raises(ValueError, match="max_elements"):
    endless.apply(tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform(),
                                               options=tf_repulsive.BatcherOptions(max_elements=10_000)))


def test_non_finite_features():
  x = np.ones((20, 2), np.float32)
  x[7, 1] = np.nan
  with pytest.raises(ValueError, match="NaN or infinite.*index 7"):
    tf.data.Dataset.from_tensor_slices(x).apply(tf_repulsive.repulsive_batch(5, tf_repulsive.VanillaPDS()))


def test_ragged_tensor_elements():
  ragged = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1.0], [1.0, 2.0]] * 5))
  with pytest.raises(TypeError, match="dense"):
    ragged.apply(tf_repulsive.repulsive_batch(2, tf_repulsive.Uniform()))


def test_features_of_varying_shape():
  varying = tf.data.Dataset.from_generator(
      lambda: (np.zeros(1 + i % 3, np.float32) for i in range(12)),
      output_signature=tf.TensorSpec([None], tf.float32))
  with pytest.raises(ValueError, match="differ in shape"):
    varying.apply(tf_repulsive.repulsive_batch(2, tf_repulsive.Uniform()))


def test_string_features_need_a_features_function():
  names = tf.data.Dataset.from_tensor_slices((["a", "b", "c"], [0, 1, 0]))
  with pytest.raises(TypeError, match="`features` function"):
    names.apply(tf_repulsive.repulsive_batch(2, tf_repulsive.Uniform()))


@pytest.mark.parametrize("make", [
    lambda: tf_repulsive.VanillaPDS(radius=-1.0), lambda: tf_repulsive.EasyPDS(radius=-0.5),
    lambda: tf_repulsive.VanillaPDS(radius=float("inf")), lambda: tf_repulsive.AnnealPDS(radius=-2)])
def test_negative_or_infinite_radius(make):
  with pytest.raises(ValueError, match="radius"):
    make()


def test_radius_type():
  with pytest.raises(TypeError, match="radius"):
    tf_repulsive.VanillaPDS(radius="big")


@pytest.mark.parametrize("pi,match", [
    ([1, 1, 1], "neighbors \\+ 1 = 6"), ([1, 1, 1, 1, 1, -1], "non-negative"),
    ([0, 0, 0, 0, 0, 0], "positive sum"), ([[1, 1, 1, 1, 1, 1]], "1-D")])
def test_bad_pi(pi, match):
  with pytest.raises(ValueError, match=match):
    tf_repulsive.DensePDS(pi)


@pytest.mark.parametrize("make", [tf_repulsive.EasyPDS, tf_repulsive.AnnealPDS,
                                  lambda: tf_repulsive.DensePDS([1] * 6)])
def test_missing_labels(make):
  with pytest.raises(ValueError, match="labels"):
    _dataset(labels=False).apply(tf_repulsive.repulsive_batch(5, make()))


def test_float_labels():
  floats = tf.data.Dataset.from_tensor_slices((np.zeros((20, 2), np.float32), np.zeros(20, np.float32)))
  with pytest.raises(TypeError, match="integer class ids.*`labels` function"):
    floats.apply(tf_repulsive.repulsive_batch(5, tf_repulsive.EasyPDS()))


def test_one_hot_labels_get_the_argmax_hint():
  one_hot = tf.data.Dataset.from_tensor_slices((np.zeros((20, 2), np.float32), np.eye(2, dtype=np.int64)[[0, 1] * 10]))
  with pytest.raises(ValueError, match="argmax"):
    one_hot.apply(tf_repulsive.repulsive_batch(5, tf_repulsive.EasyPDS()))


def test_labels_are_not_needed_without_mingling():
  batcher = tf_repulsive.repulsive_batch(5, tf_repulsive.VanillaPDS(), start_step=0)
  batch = next(iter(_dataset(labels=False).apply(batcher)))
  assert batch.shape == (5, 3)


@pytest.mark.parametrize("neighbors,error", [(0, ValueError), (1.5, TypeError)])
def test_neighbors_checked_when_built(neighbors, error):
  with pytest.raises(error, match="neighbors"):
    tf_repulsive.EasyPDS(neighbors=neighbors)


def test_neighbors_not_below_dataset_size():
  with pytest.raises(ValueError, match="neighbors"):
    _dataset(8).apply(tf_repulsive.repulsive_batch(2, tf_repulsive.EasyPDS(neighbors=8)))


def test_max_darts_checked():
  with pytest.raises(ValueError, match="max_darts"):
    tf_repulsive.VanillaPDS(max_darts=0)


def test_bad_schedule():
  with pytest.raises(TypeError, match="schedule"):
    tf_repulsive.AnnealPDS(schedule=3)
  wrong_length = tf_repulsive.AnnealPDS(schedule=lambda h, n: h[:3])
  with pytest.raises(ValueError, match="schedule"):
    _dataset().apply(tf_repulsive.repulsive_batch(5, wrong_length))


def test_a_batcher_applies_to_one_dataset():
  batcher = tf_repulsive.repulsive_batch(5, tf_repulsive.VanillaPDS())
  _dataset().apply(batcher)
  with pytest.raises(ValueError, match="already drives a pipeline"):
    _dataset().apply(batcher)


def test_stats_of_an_unapplied_batcher():
  with pytest.raises(ValueError, match="apply"):
    tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform()).stats()


@pytest.mark.parametrize("start_step,error", [(-1, ValueError), (2.0, TypeError), (True, TypeError)])
def test_start_step_checked(start_step, error):
  with pytest.raises(error, match="step"):
    tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform(), start_step=start_step)


def test_a_fixed_start_cannot_be_moved():
  batcher = tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform(), start_step=3)
  with pytest.raises(ValueError, match="start_step=3"):
    batcher.start_at(4)


def test_not_a_dataset():
  with pytest.raises(TypeError, match="tf.data.Dataset"):
    tf_repulsive.repulsive_batch(5, tf_repulsive.Uniform())(np.zeros((10, 2)))


@pytest.mark.parametrize("argument, value, names", [
    ("feature_fn", lambda x, y: x, "`features="), ("label_fn", lambda x, y: y, "`labels="),
    ("model_space", None, "ModelSpace as `features="), ("max_elements", 10, r"BatcherOptions\(max_elements="),
    ("distance_cache_bytes", 0, r"BatcherOptions\(distance_cache_bytes="),
    ("data_dir", "/tmp", r"BatcherOptions\(data_dir="),
    ("verbose", False, r"BatcherOptions\(verbose="), ("name", "train", r"AnnealingCallback\(batcher, name=")])
def test_a_removed_argument_names_its_replacement(argument, value, names):
  with pytest.raises(TypeError, match=rf"repulsive_batch\(\) takes no `{argument}` argument: .*{names}"):
    tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), **{argument: value})


@pytest.mark.parametrize("module, removed, replacement", [
    (tf_repulsive, "ModelFeatures", "tf_repulsive.FeatureSource"),
    (tf_repulsive, "model_features", "tf_repulsive.compute_features"),
    (tf_repulsive, "ActiveBiasState", r"ActiveBiasCallback\(\.\.\.\)\.state"),
    (tf_repulsive.diagnostics, "SamplingFeatures", "a FeatureSource or an")])
def test_a_removed_name_names_its_replacement(module, removed, replacement):
  with pytest.raises(AttributeError, match=f"no attribute '{removed}'.*{replacement}"):
    getattr(module, removed)
  with pytest.raises(AttributeError, match="no attribute 'Nothing'$"):
    module.Nothing  # noqa: B018


@pytest.mark.parametrize("options, error, match", [
    (dict(max_elements=0), ValueError, "max_elements"), (dict(distance_cache_bytes=-1), ValueError, "distance_cache"),
    (dict(verbose=1), TypeError, "verbose"), (dict(data_dir=3), TypeError, "data_dir"),
    (dict(data_dir="gs://bucket/dir"), ValueError, "URL")])
def test_batcher_options_are_checked_when_made(options, error, match):
  with pytest.raises(error, match=match):
    tf_repulsive.BatcherOptions(**options)


def test_options_and_features_are_checked():
  with pytest.raises(TypeError, match="`options` must be a tf_repulsive.BatcherOptions"):
    tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), options={"verbose": False})
  with pytest.raises(TypeError, match="`features` must be None, a function of an element or a tf_repulsive.ModelSpace"):
    tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), features=np.zeros([10, 2]))
  with pytest.raises(TypeError, match="`labels` must be a function"):
    tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), labels=np.zeros([10]))


@pytest.mark.parametrize("callback", [tf_repulsive.BatchStreamCallback, tf_repulsive.AnnealingCallback])
@pytest.mark.parametrize("name", ["", "2nd", "train-set", 3])
def test_a_callback_name_must_prefix_log_keys(callback, name):
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform())
  with pytest.raises(ValueError, match="`name` must start with a letter"):
    callback(batcher, name=name)
