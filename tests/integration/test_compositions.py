"""The compositions users write: Keras' element conventions, augmentation, per-step introspection,
callbacks left out of fit, streams begun again, log keys, and transformations after the batcher.

Each test composes the case the way users do; each is right or a clear error at build (or fit) time.
"""

import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from conftest import pairwise_distances
from tf_repulsive import _radius

_REPO = pathlib.Path(__file__).resolve().parents[2]


def _points(size=300, dim=4, classes=4, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(size, dim)).astype(np.float32), rng.integers(0, classes, size).astype(np.int64)


def _model(dim=4):
  model = keras.Sequential([keras.Input((dim,)), keras.layers.Dense(4)])
  model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


# Keras' element conventions.

@pytest.mark.slow
@pytest.mark.parametrize("weights", ["y % 3", "ones"])
def test_sample_weights_are_never_the_labels(weights):
  x, y = _points()
  sample_weight = (y % 3).astype(np.int64) if weights == "y % 3" else np.ones_like(y)
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.AnnealPDS(), seed=0, start_step=0)
  tf.data.Dataset.from_tensor_slices((x, y, sample_weight)).apply(batcher)
  np.testing.assert_array_equal(batcher.element_labels, y)
  np.testing.assert_array_equal(batcher.drawer.groups.of_points,
                                np.rint(tf_repulsive.mingling_index(x, y, 5) * 5).astype(int))


def test_multi_input_features_are_every_input_concatenated():
  x, y = _points()
  constant = np.zeros((len(y), 3), np.float32)  # alone, it would give radius 0 and uniform batches
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices(((constant, x), y)).apply(batcher)
  radius = batcher.stats().report["radius"]
  assert radius == pytest.approx(_radius.half_median_distance(np.hstack([constant, x])))
  for (first, second), _ in batches.take(5).as_numpy_iterator():
    assert pairwise_distances(np.hstack([first, second])).min() >= radius


def test_a_dict_of_inputs_counts_every_key_not_the_first():
  x, y = _points(dim=6)
  inputs = {"b": x[:, :1], "a": x[:, 1:], "path": np.array([f"img{i}.png" for i in range(len(y))])}
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.EasyPDS(), seed=0, start_step=0)
  tf.data.Dataset.from_tensor_slices((inputs, y)).apply(batcher)
  # The string input is not a feature; both numeric ones are (distances ignore their order).
  assert batcher.stats().report["radius"] == pytest.approx(_radius.half_median_distance(x))
  np.testing.assert_array_equal(batcher.element_labels, y)


@pytest.mark.parametrize("elements, argument", [
    (lambda x, y: (x, y, y, y), "features` and `labels"),
    (lambda x, y: (x, (y, y)), "nested.*labels=lambda"),
    (lambda x, y: (np.array([str(v) for v in y]), y), "`features` function"),
])
def test_elements_the_defaults_cannot_read_ask_for_the_function(elements, argument):
  x, y = _points()
  dataset = tf.data.Dataset.from_tensor_slices(elements(x, y))
  with pytest.raises((ValueError, TypeError), match=argument):
    dataset.apply(tf_repulsive.repulsive_batch(20, tf_repulsive.EasyPDS()))


def test_a_single_class_is_refused_for_the_mingling_samplers():
  x, y = _points()
  dataset = tf.data.Dataset.from_tensor_slices((x, np.zeros_like(y)))
  with pytest.raises(ValueError, match="one value.*at least two classes"):
    dataset.apply(tf_repulsive.repulsive_batch(20, tf_repulsive.DensePDS([1] * 6)))


def test_label_errors_are_short_and_name_the_arity_of_the_element():
  x, y = _points()
  one_hot = np.eye(4, dtype=np.float32)[y]
  dataset = tf.data.Dataset.from_tensor_slices((x, one_hot, np.ones(len(y), np.float32)))
  with pytest.raises(TypeError) as error:
    dataset.apply(tf_repulsive.repulsive_batch(20, tf_repulsive.EasyPDS()))
  message = str(error.value)
  assert "labels=lambda x, y, sample_weight: tf.argmax(y)" in message
  assert len(message) < 400 and "autograph" not in message.lower()


def test_numpy_integers_are_accepted_wherever_ints_are():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(np.int64(20), tf_repulsive.EasyPDS(neighbors=np.int32(3)),
                                         seed=np.int64(1), start_step=np.int64(0))
  batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  assert next(iter(batches))[0].shape == (20, 4)
  np.testing.assert_array_equal(batcher.batch_indices(np.int64(3)), batcher.batch_indices(3))


def test_features_beyond_float32_are_reported_as_such():
  x, y = _points()
  huge = x.astype(np.float64) * 1e300
  with pytest.raises(ValueError, match=r"beyond float32's range \(\|value\| up to .*e\+299 > 3.4e\+38"):
    tf.data.Dataset.from_tensor_slices((huge, y)).apply(tf_repulsive.repulsive_batch(20, tf_repulsive.Uniform()))


def test_ragged_components_are_a_type_error():
  ragged = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1.0], [2.0, 3.0], [4.0]]))
  with pytest.raises(TypeError, match="dense tensors.*RaggedTensorSpec"):
    ragged.apply(tf_repulsive.repulsive_batch(2, tf_repulsive.Uniform()))


# Augmentation belongs after the batcher.

@pytest.mark.parametrize("augment", [
    lambda: keras.layers.RandomFlip("horizontal"),
    lambda: keras.layers.GaussianNoise(0.1),
    lambda: (lambda x: x + tf.random.uniform(tf.shape(x), seed=1)),
    lambda: (lambda x, generator=tf.random.Generator.from_seed(1): x + generator.normal(tf.shape(x))),
], ids=["RandomFlip", "GaussianNoise", "seeded_uniform", "Generator"])
def test_randomness_before_the_batcher_is_refused_with_where_it_belongs(augment):
  x, y = _points()
  layer = augment()
  images = tf.data.Dataset.from_tensor_slices((x.reshape(-1, 2, 2, 1), y))
  if isinstance(layer, keras.layers.Layer):
    augmented = images.map(lambda image, label: (layer(image, training=True), label))
  else:
    augmented = images.map(lambda image, label: (layer(image), label))
  with pytest.raises(ValueError, match=r"after the batcher.*ds\.apply\(batcher\)\.map\(augment\)"):
    augmented.apply(tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS()))


def test_a_fixed_per_element_value_from_constant_seeds_is_accepted():
  x, y = _points()
  projected = tf.data.Dataset.from_tensor_slices((x, y)).map(
      lambda v, label: (tf.linalg.matvec(tf.random.stateless_normal([2, 4], seed=[1, 2]), v), label))
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(radius="auto"), start_step=0)
  projected.apply(batcher)
  assert batcher.elements[0].shape == (300, 2)


def test_augmentation_after_the_batcher_differs_per_step():
  x, y = _points(size=60)
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.Uniform(), seed=0, start_step=0)
  flip = keras.layers.RandomFlip("horizontal", seed=1)
  stream = tf.data.Dataset.from_tensor_slices((x.reshape(-1, 2, 2, 1), np.arange(60))).apply(batcher).map(
      lambda images, index: (flip(images, training=True), index))
  seen = {}
  for images, indices in stream.take(30).as_numpy_iterator():
    for image, index in zip(images, indices):
      seen.setdefault(int(index), set()).add(image.tobytes())
  assert sum(len(versions) > 1 for versions in seen.values()) > 10


# Per-step introspection equals the stream.

_ALL_SAMPLERS = {
    "uniform": tf_repulsive.Uniform, "epoch_shuffle": tf_repulsive.EpochShuffle,
    "vanilla_pds": tf_repulsive.VanillaPDS, "easy_pds": tf_repulsive.EasyPDS,
    "dense_pds": lambda: tf_repulsive.DensePDS([1] * 6), "anneal_pds": tf_repulsive.AnnealPDS,
    "kdpp": tf_repulsive.KDPP, "fast_kdpp": tf_repulsive.FastKDPP, "active_bias": tf_repulsive.ActiveBias,
    "rs2": lambda: tf_repulsive.RS2(fraction=0.3),
}


def _introspection(batcher, steps):
  """What the per-step API says of `steps`: indices, fallback points, pi, recomputed mingling mixes."""
  mixes = batcher.group_mixes(steps)
  return {"indices": np.stack([batcher.batch_indices(step) for step in steps]),
          "fallback": np.array([batcher.fallback_points(step) for step in steps]),
          "fallback_counts": batcher.fallback_counts(steps),
          "pi": np.zeros(0) if batcher.pi(0) is None else np.stack([batcher.pi(step) for step in steps]),
          "mixes": np.zeros(0) if mixes is None else mixes}


@pytest.mark.slow
@pytest.mark.parametrize("sampler_name", sorted(_ALL_SAMPLERS))
def test_every_per_step_api_equals_what_the_stream_delivered(sampler_name):
  # Dense and Anneal PDS at k = 128 on 2000 points: the size at which their categorical draw once
  # depended on the thread pool, and disagreed between the stream and batch_indices. The others
  # at a smaller size (the k-DPPs are O(N^3) to build).
  num_points, batch_size = (2000, 128) if sampler_name in ("dense_pds", "anneal_pds") else (400, 32)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(num_points, 8)).astype(np.float32)
  y = rng.integers(0, 4, num_points).astype(np.int64)

  def build():
    batcher = tf_repulsive.repulsive_batch(batch_size, _ALL_SAMPLERS[sampler_name](), seed=5, start_step=0,
                                           options=tf_repulsive.BatcherOptions(verbose=False))
    return batcher, tf.data.Dataset.from_tensor_slices((x, y, np.arange(num_points))).apply(batcher)

  batcher, stream = build()
  steps = list(range(32))
  delivered = np.stack([batch[2] for batch in stream.take(len(steps)).as_numpy_iterator()])
  recorded = _introspection(batcher, steps)
  np.testing.assert_array_equal(recorded["indices"], delivered)
  # A second batcher of the same seed has drawn nothing: everything is recomputed.
  recomputed = _introspection(build()[0], steps)
  for key in recorded:
    np.testing.assert_array_equal(recomputed[key], recorded[key], err_msg=key)
  np.testing.assert_array_equal(recorded["fallback"], recorded["fallback_counts"])


@pytest.mark.slow
def test_batch_indices_in_a_fresh_process_equal_this_stream():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2000, 8)).astype(np.float32)
  y = rng.integers(0, 4, 2000).astype(np.int64)
  stream = tf.data.Dataset.from_tensor_slices((x, np.arange(2000), y)).apply(
      tf_repulsive.repulsive_batch(128, tf_repulsive.DensePDS([1] * 6), seed=5, start_step=0,
                                   features=lambda v, i, label: v,
                                   labels=lambda v, i, label: label,
                                   options=tf_repulsive.BatcherOptions(verbose=False)))
  delivered = np.stack([batch[1] for batch in stream.take(16).as_numpy_iterator()])
  script = (
      "import sys, numpy as np, tensorflow as tf, tf_repulsive\n"
      "rng = np.random.default_rng(0)\n"
      "x = rng.normal(size=(2000, 8)).astype(np.float32); y = rng.integers(0, 4, 2000).astype(np.int64)\n"
      "sampler = tf_repulsive.DensePDS([1] * 6)\n"
      "batcher = tf_repulsive.repulsive_batch(128, sampler, seed=5, start_step=0,\n"
      "                                       options=tf_repulsive.BatcherOptions(verbose=False))\n"
      "tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)\n"
      "np.save(sys.argv[1], np.stack([batcher.batch_indices(s) for s in range(16)]))\n")
  path = _REPO / ".pytest_fresh_process_draws.npy"
  try:
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=300, cwd=_REPO,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    np.testing.assert_array_equal(np.load(path), delivered)
  finally:
    path.unlink(missing_ok=True)


# Who starts a stream.

def test_a_callback_left_out_of_fit_does_not_start_the_stream():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.AnnealPDS(), seed=0)
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  tf_repulsive.AnnealingCallback(batcher)  # built, but not given to fit
  trained = []
  counter = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: trained.append(batch))
  # Its first batch is the one a model build may take unstarted; the second names the fix.
  with pytest.raises(tf.errors.InvalidArgumentError, match="the stream that trains was never started: add "
                     r"tf_repulsive.AnnealingCallback\(batcher\)"):
    _model().fit(stream, steps_per_epoch=5, verbose=0, callbacks=[counter])
  # At most the one batch a model build under a distribution strategy would take.
  assert len(trained) <= 1


def test_the_build_probe_gives_one_batch_and_a_start_replaces_it():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0)
  stream = tf.data.Dataset.from_tensor_slices((x, np.arange(300))).apply(batcher)
  batcher._allow_build_probe()  # pylint: disable=protected-access
  iterator = iter(stream)
  np.testing.assert_array_equal(next(iterator)[1], batcher.batch_indices(0))
  with pytest.raises(tf.errors.InvalidArgumentError, match="delivers one batch only"):
    next(iterator)
  batcher._allow_build_probe()  # pylint: disable=protected-access
  batcher.start_at(7)
  np.testing.assert_array_equal([batch[1] for batch in stream.take(3).as_numpy_iterator()],
                                [batcher.batch_indices(step) for step in (7, 8, 9)])


# Custom loops: a fixed-start stream begun again is refused; the per-epoch form continues.

def test_a_fixed_start_stream_begun_again_in_a_custom_loop_is_refused():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0, start_step=0)
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  next(iter(stream))  # a peek delivers one batch: a later stream may still begin
  for _ in stream.take(3):
    pass
  with pytest.raises(tf.errors.InvalidArgumentError, match="began at its fixed start_step"):
    for _ in stream.take(3):
      pass


def test_the_documented_per_epoch_loop_continues_the_steps():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0)
  stream = tf.data.Dataset.from_tensor_slices((x, np.arange(300))).apply(batcher)
  optimizer_step, trained = 0, []
  for _ in range(3):
    batcher.start_at(optimizer_step)
    for _, indices in stream.take(4):
      trained.append(indices.numpy())
      optimizer_step += 1
  np.testing.assert_array_equal(trained, [batcher.batch_indices(step) for step in range(12)])


# Log keys.

def _event_tags(log_dir):
  tags = set()
  for path in pathlib.Path(log_dir, "train").glob("events.out.tfevents.*"):
    for record in tf.data.TFRecordDataset(str(path)):
      event = tf.compat.v1.Event.FromString(record.numpy())
      tags.update(value.tag for value in event.summary.value)
  return tags


def test_tensorboard_gets_every_sampler_value_with_log_dir(tmp_path):
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.AnnealPDS(), seed=0)
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  callbacks = [tf_repulsive.AnnealingCallback(batcher, log_dir=str(tmp_path)),
               keras.callbacks.TensorBoard(str(tmp_path))]
  history = _model().fit(stream, epochs=2, steps_per_epoch=5, verbose=0, callbacks=callbacks)
  keys = {key for key in history.history if key.startswith("sampler_")}
  assert {"sampler_mingling", "sampler_pi_mingling", "sampler_fallback_batches", "sampler_pi_0",
          "sampler_mingling_5"} <= keys
  assert all(len(history.history[key]) == 2 for key in keys)
  assert {f"epoch_{key}" for key in keys} <= _event_tags(tmp_path)


def test_a_custom_loop_gets_the_detail_in_logs_it_may_reuse():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.AnnealPDS(), seed=0)
  iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  model = _model()
  callback = tf_repulsive.AnnealingCallback(batcher)
  callback.set_model(model)
  callback.set_params({"steps": 3, "epochs": 2})
  callback.on_train_begin()
  logs = {}
  for epoch in range(2):
    callback.on_epoch_begin(epoch)
    for batch in range(3):
      model.train_on_batch(*next(iterator))
      callback.on_train_batch_end(batch)
    # The same dict both epochs: the keys this callback wrote in the first are its own.
    callback.on_epoch_end(epoch, logs)
  assert {"sampler_mingling", "sampler_pi_0", "sampler_mingling_5"} <= set(logs)
  np.testing.assert_allclose([logs[f"sampler_pi_{m}"] for m in range(6)], batcher.pi(5))


def test_the_progress_bar_gets_the_summaries_and_history_the_detail(capsys):
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.AnnealPDS(), seed=0)
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  history = _model().fit(stream, epochs=1, steps_per_epoch=5, verbose=2,
                         callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  line = [line for line in capsys.readouterr().out.splitlines() if "loss" in line][-1]
  assert line.count("sampler_") == 3
  assert len([key for key in history.history if key.startswith("sampler_")]) == 3 + 12
  pi = [history.history[f"sampler_pi_{m}"][0] for m in range(6)]
  np.testing.assert_allclose(pi, batcher.pi(4))
  assert history.history["sampler_pi_mingling"][0] == pytest.approx(np.dot(pi, np.arange(6) / 5))


@pytest.mark.slow
def test_two_batchers_log_under_their_names_and_one_name_twice_is_refused():
  x, y = _points()

  def zipped(first, second):
    streams = [tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher) for batcher in (first, second)]
    return tf.data.Dataset.zip(tuple(streams)).map(lambda a, b: a)

  train = tf_repulsive.repulsive_batch(20, tf_repulsive.AnnealPDS(), seed=0)
  other = tf_repulsive.repulsive_batch(20, tf_repulsive.DensePDS([1] * 6), seed=0)
  history = _model().fit(zipped(train, other), steps_per_epoch=5, verbose=0,
                         callbacks=[tf_repulsive.AnnealingCallback(train, name="train"),
                                    tf_repulsive.AnnealingCallback(other, name="other")])
  assert history.history["train_pi_0"] != history.history["other_pi_0"]
  first = tf_repulsive.repulsive_batch(20, tf_repulsive.AnnealPDS(), seed=0)
  second = tf_repulsive.repulsive_batch(20, tf_repulsive.DensePDS([1] * 6), seed=0)
  with pytest.raises(ValueError, match=r"two batchers named 'sampler'.*AnnealingCallback\(batcher, name="):
    _model().fit(zipped(first, second), steps_per_epoch=5, verbose=0,
                 callbacks=[tf_repulsive.AnnealingCallback(first), tf_repulsive.AnnealingCallback(second)])


# Transformations after the batcher.

@pytest.mark.parametrize("transform, named", [
    (lambda s: s.shuffle(8, seed=0), "shuffle"),
    (lambda s: s.unbatch().batch(40), "unbatch"),
    (lambda s: s.unbatch().batch(20), "unbatch"),
    (lambda s: s.filter(lambda x, y: tf.reduce_sum(y) > 0), "filter"),
    (lambda s: s.skip(2), "skip"),
    (lambda s: s.take(3).cache().repeat(), "cache"),
    (lambda s: s.batch(2).map(lambda x, y: (x[0], y[0])), "batch"),
    (lambda s: s.map(lambda x, y: (x, y), num_parallel_calls=2, deterministic=False), "parallel"),
])
def test_transformations_that_change_the_step_are_refused_before_training(transform, named):
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0)
  stream = transform(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  with pytest.raises(ValueError, match=f"applies (a )?{named}.*before the batcher"):
    tf_repulsive.AnnealingCallback(batcher, dataset=stream)


def test_a_dataset_not_made_from_the_stream_is_refused():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0)
  tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  with pytest.raises(ValueError, match="not made from this batcher's stream"):
    tf_repulsive.AnnealingCallback(batcher, dataset=tf.data.Dataset.from_tensor_slices((x, y)).batch(20))
  with pytest.raises(TypeError, match="`dataset` must be the tf.data.Dataset"):
    tf_repulsive.AnnealingCallback(batcher, dataset=(x, y))


def test_map_prefetch_take_repeat_after_the_batcher_train_on_the_draws():
  x, y = _points()
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0)
  stream = (tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
            .map(lambda v, label: (2.0 * v, label)).prefetch(2).take(100).repeat())
  assert batcher._transformations_after(stream) == ["Map", "Prefetch", "Take", "Repeat"]
  model = _model()
  model.fit(stream, epochs=2, steps_per_epoch=5, verbose=0,
            callbacks=[tf_repulsive.AnnealingCallback(batcher, dataset=stream)])
  assert int(model.optimizer.iterations) == 10
