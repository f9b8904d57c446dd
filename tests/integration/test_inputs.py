"""The inputs users bring: dict elements by name, huge values, seeds, endless inputs, memory, progress."""

import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from cached_samplers import VanillaPDSWithCache
from conftest import pairwise_distances
from tf_repulsive import _reading
from tf_repulsive import _progress
from tf_repulsive import _radius

_REPO = pathlib.Path(__file__).resolve().parents[2]


def _points(size=300, dim=4, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(size, dim)).astype(np.float32), rng.integers(0, 3, size).astype(np.int64)


def test_dict_elements_take_the_label_key_not_the_last_sorted_key():
  x, y = _points()
  speakers = np.array([f"speaker{i % 7}" for i in range(len(y))])
  dataset = tf.data.Dataset.from_tensor_slices({"audio": x, "label": y, "speaker_id": speakers})
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.EasyPDS(), seed=0, start_step=0)
  batches = dataset.apply(batcher)
  np.testing.assert_array_equal(batcher.element_labels, y)
  assert batcher.stats().report["radius"] == pytest.approx(_radius.half_median_distance(x))
  batch = next(iter(batches))
  assert set(batch) == {"audio", "label", "speaker_id"}


def test_dict_features_are_the_one_numeric_component_besides_the_label():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices({"x": x, "label": y}).apply(batcher)
  # Sorted keys put "label" first: distances on the labels would give this radius instead.
  radius = batcher.stats().report["radius"]
  assert radius == pytest.approx(_radius.half_median_distance(x))
  assert radius != pytest.approx(_radius.half_median_distance(y[:, None].astype(np.float32)))
  for batch in batches.take(5).as_numpy_iterator():
    assert pairwise_distances(batch["x"]).min() >= radius


def test_ambiguous_dict_features_ask_for_a_features_function_and_list_the_keys():
  x, y = _points()
  dataset = tf.data.Dataset.from_tensor_slices({"image": x, "label": y, "id": np.arange(len(y))})
  with pytest.raises(ValueError, match=r"keys \['id', 'image', 'label'\].*'id' and 'image'.*features=lambda"):
    dataset.apply(tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS()))
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), features=lambda e: e["image"])
  dataset.apply(batcher)
  assert batcher.stats().report["radius"] == pytest.approx(_radius.half_median_distance(x))


def test_dict_without_a_label_key_asks_for_a_labels_function():
  x, y = _points()
  dataset = tf.data.Dataset.from_tensor_slices({"x": x, "class_id": y})
  with pytest.raises(ValueError, match=r"no 'label' key: pass `labels`"):
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


@pytest.mark.parametrize("endless", [
    lambda ds: ds.repeat().filter(lambda x, y: True),
    lambda ds: ds.repeat().map(lambda x, y: (x, y)).filter(lambda x, y: y >= 0).prefetch(2),
    lambda ds: ds.repeat().flat_map(lambda x, y: tf.data.Dataset.from_tensors((x, y)))])
def test_endless_inputs_of_unknown_size_fail_before_reading(endless):
  x, y = _points()
  dataset = endless(tf.data.Dataset.from_tensor_slices((x, y)))
  assert dataset.cardinality() == tf.data.UNKNOWN_CARDINALITY
  with pytest.raises(ValueError, match=r"endless: an infinite repeat upstream.*take\(n\)"):
    dataset.apply(tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform(),
                                               options=tf_repulsive.BatcherOptions(max_elements=100_000)))


@pytest.mark.parametrize("randomise, found", [
    (lambda ds: ds.shuffle(300), r"a shuffle without a seed.*shuffle\(buffer_size, seed=0\)"),
    # A shuffled list of files, interleaved (what list_files and tfds' shuffle_files do).
    (lambda ds: tf.data.Dataset.range(2).shuffle(2).interleave(lambda i: ds.shard(2, i)), "a shuffle without a seed"),
    (lambda ds: tf.data.Dataset.sample_from_datasets([ds.take(150), ds.skip(150)]), r"random numbers.*pass seed="),
    (lambda ds: ds.map(lambda x, y: (2 * x, y), num_parallel_calls=2, deterministic=False), "allowed to reorder"),
    (lambda ds: ds.map(lambda x, y: (x + tf.random.uniform([4]), y)),
     r"random op \(RandomUniform\).*after the batcher")])
def test_inputs_that_differ_from_run_to_run_are_refused_with_the_fix(randomise, found):
  tf.random.set_seed(None)  # as in a fresh process: no global seed seeds the ops
  x, y = _points()
  dataset = randomise(tf.data.Dataset.from_tensor_slices((x, y)))
  with pytest.raises(ValueError, match="the input dataset has .*" + found):
    dataset.apply(tf_repulsive.repulsive_batch(4, tf_repulsive.VanillaPDS(), start_step=0))


@pytest.mark.parametrize("seed", [None, 3])
def test_a_feature_fn_with_random_ops_is_refused_seeded_or_not(seed):
  tf.random.set_seed(None)
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(4, tf_repulsive.VanillaPDS(), start_step=0,
                                         features=lambda x, y: x + tf.random.normal([4], seed=seed))
  with pytest.raises(ValueError, match=r"random op \(RandomStandardNormal\) in a dataset function"):
    tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)


def test_list_files_is_refused_unless_it_keeps_its_order(tmp_path):
  tf.random.set_seed(None)
  for name in "abcdef":
    (tmp_path / f"{name}.txt").write_text(name * 3)

  def batcher():
    return tf_repulsive.repulsive_batch(2, tf_repulsive.Uniform(), start_step=0,
                                        features=lambda path: tf.strings.length(path),
                                        options=tf_repulsive.BatcherOptions(verbose=False))

  with pytest.raises(ValueError, match=r"list_files\(pattern, shuffle=False\)"):
    tf.data.Dataset.list_files(str(tmp_path / "*.txt")).apply(batcher())
  kept = batcher()
  tf.data.Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False).apply(kept)
  assert [path.decode()[-5:] for path in kept.elements] == [f"{name}.txt" for name in "abcdef"]


def test_seeded_order_and_constant_seeded_values_upstream_are_read_alike_in_every_build():
  tf.random.set_seed(None)
  x, y = _points()
  options = tf.data.Options()
  options.deterministic = False

  def build():
    dataset = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(300, seed=5)
               .map(lambda x, y: (x + tf.random.stateless_uniform([4], [1, 2]), y))
               .map(lambda x, y: (2 * x, y), num_parallel_calls=2, deterministic=True).with_options(options))
    batcher = tf_repulsive.repulsive_batch(4, tf_repulsive.VanillaPDS(), start_step=0,
                                           options=tf_repulsive.BatcherOptions(verbose=False))
    dataset.apply(batcher)
    return batcher.elements

  first, second = build(), build()
  np.testing.assert_array_equal(first[0], second[0])
  assert not np.array_equal(first[1], y)  # shuffled indeed


def test_inputs_that_may_end_are_read():
  ended = tf.data.Dataset.counter().take_while(lambda i: i < 50).filter(lambda i: i % 2 == 0).map(
      lambda i: tf.cast(i, tf.float32)[None])
  batcher = tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform(), start_step=0)
  ended.apply(batcher)
  np.testing.assert_array_equal(batcher.elements.ravel(), np.arange(0, 50, 2))


def test_known_size_beyond_max_elements_fails_before_reading():
  with pytest.raises(ValueError, match=r"has 1000 elements, more than `max_elements` = 10"):
    tf.data.Dataset.range(1000).map(lambda i: tf.cast(i, tf.float32)).apply(
        tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform(), options=tf_repulsive.BatcherOptions(max_elements=10)))


def _generated(size):
  x, y = _points(size)
  return tf.data.Dataset.from_generator(lambda: zip(x, y), output_signature=(
      tf.TensorSpec([4], tf.float32), tf.TensorSpec([], tf.int64)))


@pytest.mark.parametrize("sampler, shown", [
    (tf_repulsive.Uniform(), ["reading the dataset"]),
    (tf_repulsive.EasyPDS(), ["reading the dataset", "mingling values"]),
    (VanillaPDSWithCache(), ["reading the dataset", "distance cache"]),
    (tf_repulsive.KDPP(), ["reading the dataset", "k-DPP kernel and eigendecomposition (300 x 300)"])])
def test_long_one_time_work_shows_progress_unless_verbose_is_false(monkeypatch, capsys, sampler, shown):
  # Everything here is fast; without the delay every step counts as long.
  monkeypatch.setattr(_progress, "DELAY_SECONDS", 0.0)
  x, y = _points()
  tf.data.Dataset.from_tensor_slices((x, y)).apply(tf_repulsive.repulsive_batch(4, sampler))
  printed = capsys.readouterr().err
  for step in shown:
    assert f"tf_repulsive: {step}" in printed
  tf.data.Dataset.from_tensor_slices((x, y)).apply(tf_repulsive.repulsive_batch(4, sampler,
                                                                                options=tf_repulsive.BatcherOptions(verbose=False)))
  assert "tf_repulsive" not in capsys.readouterr().err


def test_reading_an_input_of_unknown_size_shows_the_bound(monkeypatch, capsys):
  monkeypatch.setattr(_progress, "DELAY_SECONDS", 0.0)
  _generated(300).apply(tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform(),
                                                     options=tf_repulsive.BatcherOptions(max_elements=5000)))
  assert "size unknown; at most max_elements = 5000" in capsys.readouterr().err


def test_short_one_time_work_prints_nothing(capsys):
  x, y = _points()
  tf.data.Dataset.from_tensor_slices((x, y)).apply(tf_repulsive.repulsive_batch(4, tf_repulsive.AnnealPDS()))
  assert "tf_repulsive" not in capsys.readouterr().err


def test_verbose_must_be_a_bool():
  with pytest.raises(TypeError, match="`verbose` must be True or False"):
    tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform(), options=tf_repulsive.BatcherOptions(verbose=1))


class _UniformReadingLabels(tf_repulsive.Uniform):
  """Uniform batches from a batcher that reads the labels too: the reading, without a mingling build."""

  needs_labels = True


@pytest.mark.slow
@pytest.mark.parametrize("size", [300, 4096, 4097, 9000])
def test_unknown_and_known_sizes_read_the_same_elements_in_order(size):
  x, y = _points(size)
  known = tf_repulsive.repulsive_batch(4, _UniformReadingLabels(), start_step=0)
  tf.data.Dataset.from_tensor_slices((x, y)).apply(known)
  unknown = tf_repulsive.repulsive_batch(4, _UniformReadingLabels(), start_step=0)
  _generated(size).apply(unknown)
  for batcher in (known, unknown):
    np.testing.assert_array_equal(batcher.elements[0], x)
    np.testing.assert_array_equal(batcher.elements[1], y)
    np.testing.assert_array_equal(batcher.element_labels, y)


def test_the_elements_are_read_only_since_the_batches_share_them():
  x, _ = _points()
  batcher = tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform(), start_step=0)
  batches = tf.data.Dataset.from_tensor_slices((x, np.arange(len(x)))).apply(batcher)
  with pytest.raises(ValueError, match="read-only"):
    batcher.elements[0][0, 0] = 1.0
  first, index = next(iter(batches))
  np.testing.assert_array_equal(first.numpy(), x[index.numpy()])


@pytest.mark.slow
def test_building_holds_the_data_about_once():
  # A fresh process, so that resident memory is this build's (see the benchmark's docstring).
  case = "500k x 128, VanillaPDS"
  output = subprocess.run(
      [sys.executable, "-m", "benchmarks.build_memory", "--case", case],
      capture_output=True, text=True, timeout=300, check=True, cwd=_REPO).stdout
  row = [line for line in output.splitlines() if line.startswith(f"| {case} |")][0]
  _, data_gib, peak, steady, _ = [cell.strip() for cell in row.strip("|").split("|")]
  assert float(peak) <= 2.0
  # 1.2x the 0.24 GiB of data (the elements: the features are x's own array), plus 0.125 GiB for
  # what does not grow with it, the reading's chunk buffers and the traced functions (1.36x here,
  # 80-130 MB above the elements from 0.24 to 0.59 GiB of data); a second copy of the features
  # would make it 2.4x.
  assert float(steady) <= 1.2 + 0.125 / float(data_gib)


@pytest.mark.parametrize("label_kind", ["class", "target"])
@pytest.mark.parametrize("structure", ["pair", "triple", "multi_input", "dict", "single"])
def test_chunked_reading_of_the_conventions_equals_reading_element_by_element(structure, label_kind):
  # The conventions read chunks of elements at once; the same selection given as functions is
  # read element by element. Both must give the same elements, features and labels.
  rng = np.random.default_rng(0)
  n = 700  # not a multiple of the chunk size in either
  x, x2, w = rng.normal(size=(n, 3, 2)).astype(np.float32), rng.integers(0, 5, (n,)).astype(np.uint8), rng.random(n)
  y = rng.integers(0, 4, n) if label_kind == "class" else rng.normal(size=n).astype(np.float32)
  elements, feature_fn, label_fn = {
      "pair": ((x, y), lambda x, y: x, lambda x, y: y),
      "triple": ((x, y, w), lambda x, y, w: x, lambda x, y, w: y),
      "multi_input": (((x, x2), y), lambda x, y: x, lambda x, y: y),
      "dict": ({"image": x, "label": y, "name": np.array(["a"] * n)}, lambda e: e["image"], lambda e: e["label"]),
      "single": (x, lambda x: x, None),
  }[structure]
  dataset = tf.data.Dataset.from_tensor_slices(elements)
  needs_labels = label_fn is not None
  chunked = _reading.materialize(dataset, None, None, needs_labels, 10**6, False, label_kind)
  if structure == "multi_input":
    feature_fn = lambda x, y: (x[0], x[1])  # noqa: E731 (every numeric input, as the convention)
  single = _reading.materialize(dataset, feature_fn, label_fn, needs_labels, 10**6, False, label_kind)
  assert chunked.features.shape == (n, 6 + (structure == "multi_input"))
  np.testing.assert_array_equal(chunked.features, single.features)
  for read, expected in zip(tf.nest.flatten(chunked.elements), tf.nest.flatten(single.elements)):
    np.testing.assert_array_equal(read, expected)
  if needs_labels:
    np.testing.assert_array_equal(chunked.labels, single.labels)
    assert chunked.labels.dtype == (np.int64 if label_kind == "class" else np.float64)
    np.testing.assert_array_equal(chunked.labels, y)
