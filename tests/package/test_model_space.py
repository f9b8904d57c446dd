"""ModelSpace: disks drawn on features computed from the model being trained, refreshed every R steps.

The batch of step n must be the sampler's draw of step n on the features of refresh n // R (those
of the model after (n // R) * R steps), also when the stream prefetches far ahead and when a run
resumes between two refreshes; nothing may draw on the features of another refresh.
"""

import time
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _dataset_graph
from tf_repulsive import _pipeline

NUM_POINTS, BATCH, SEED = 200, 20, 3


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(NUM_POINTS, 4)).astype(np.float32)
  return x, (x[:, 0] + 0.3 * x[:, 1] > 0).astype(np.int64)


def _model():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
  model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


class _SlowEmbedding(tf_repulsive.EmbeddingFeatures):
  """The embedding, computed slowly: a stream that did not wait for it would run ahead of it."""

  def features_fn(self, model):
    time.sleep(0.3)
    return super().features_fn(model)


def _reference_batches(sampler, features, labels, steps):
  """The draws of `steps` with a drawer built on `features` (what a refresh builds), by the public contract."""
  drawer = sampler.build(tf_repulsive.SamplingContext(
      features=features, labels=labels if sampler.needs_labels else None, batch_size=BATCH,
      distance_cache_bytes=0, max_steps_per_draw=1))
  per_draw = drawer.steps_per_draw
  draw = tf.function(drawer.draw)
  key = tf.constant([SEED, _pipeline._KEY_SALT], tf.int64)  # pylint: disable=protected-access
  return {step: draw(key, tf.constant(step - step % per_draw, tf.int64))[0].numpy()[step % per_draw]
          for step in steps}, drawer


# (Vanilla PDS at a fixed radius is the resume test's and the Keras resume test's.)
@pytest.mark.slow
@pytest.mark.parametrize("sampler, refresh_every", [
    (tf_repulsive.VanillaPDS(radius="auto"), 3),
    (tf_repulsive.EasyPDS(), 5),
    (tf_repulsive.AnnealPDS(), 4),
    (tf_repulsive.Importance(), 3),
    (tf_repulsive.ImportancePDS(), 4),
], ids=["vanilla_auto-3", "easy-5", "anneal-4", "importance-3", "importance_pds-4"])
def test_each_step_is_drawn_on_the_features_of_its_refresh_also_behind_a_prefetch(sampler, refresh_every):
  x, y = _data()
  model = _model()
  space = tf_repulsive.ModelSpace(model, _SlowEmbedding(), refresh_every=refresh_every, verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, sampler, seed=SEED, start_step=0, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher).prefetch(32))
  steps = 2 * refresh_every + 2
  delivered, refreshes = [], {}
  for step in range(steps):
    if step % refresh_every == 0:
      refreshes[step // refresh_every] = tf_repulsive.compute_features(tf_repulsive.EmbeddingFeatures(), model, x)
    batcher.refresh_features(step)
    batch_x, batch_y = next(iterator)
    delivered.append(batch_x.numpy())
    if step % refresh_every == refresh_every - 1:
      np.testing.assert_array_equal(batcher.batch_indices(step), _row_indices(x, delivered[-1]))
    model.train_on_batch(batch_x, batch_y)  # the next refresh sees another model
  assert batcher.stats().refreshes == len(refreshes)
  for refresh, features in refreshes.items():
    own_steps = [step for step in range(steps) if step // refresh_every == refresh]
    expected, drawer = _reference_batches(sampler, features, y, own_steps)
    for step in own_steps:
      np.testing.assert_array_equal(delivered[step], x[expected[step]], err_msg=f"step {step}")
  # The radius and mingling values the last refresh computed are the batcher's.
  assert batcher.stats().report == pytest.approx(drawer.report)
  if getattr(sampler, "radius", None) == "auto":
    # Every refresh calibrated its radius through the build's one trace.
    assert batcher.drawer._draws_on_state.experimental_get_tracing_count() == 1  # pylint: disable=protected-access
  if drawer.groups is not None:
    np.testing.assert_array_equal(batcher.drawer.groups.of_points, drawer.groups.of_points)
  with pytest.raises(ValueError, match="refresh_features"):
    batcher.batch_indices(0)


def _row_indices(x, rows):
  return np.array([int(np.flatnonzero((x == row).all(axis=1))[0]) for row in rows])


# (The disks of the untrained model's gradients overfill the first batch; the law is what is tested.)
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:the darts filled only")
def test_fit_trains_every_step_on_the_draw_of_its_refresh(tmp_path):
  x, y = _data()
  refresh_every, epochs = 4, 2
  model = _model()
  space = tf_repulsive.ModelSpace(model, tf_repulsive.GradientFeatures(), refresh_every=refresh_every,
                                  directory=tmp_path, verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.AnnealPDS(), seed=SEED, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  history = model.fit(batches, epochs=epochs, steps_per_epoch=batcher.steps_per_epoch, verbose=0,
                      callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  assert all(seconds > 0 for seconds in history.history["sampler_refresh_seconds"])
  # Steps 0-19: refreshes at 0, 4, ..., 16, none after the last step (20), which no step of this
  # fit draws on; the next fit computes it when it starts, from the same model.
  assert batcher.steps_per_epoch == 10 and len(list(tmp_path.glob("refresh-*.npz"))) == 5
  model.fit(batches, epochs=1, steps_per_epoch=batcher.steps_per_epoch, verbose=0,
            callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  steps = (epochs + 1) * batcher.steps_per_epoch
  assert len(list(tmp_path.glob("refresh-*.npz"))) == len(range(0, steps, refresh_every))

  # The same training, step by step, on the draws of features computed from the model at each refresh.
  reference = _model()
  for step in range(steps):
    if step % refresh_every == 0:
      features = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), reference, x, y)
      draws, _ = _reference_batches(tf_repulsive.AnnealPDS(), features, y, range(step, step + refresh_every))
    reference.train_on_batch(x[draws[step]], y[draws[step]])
  for trained, expected in zip(model.get_weights(), reference.get_weights()):
    np.testing.assert_allclose(trained, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_a_run_resumed_between_refreshes_draws_on_the_saved_features(tmp_path):
  x, y = _data()
  refresh_every = 4
  model = _model()
  dataset = tf.data.Dataset.from_tensor_slices((x, y))

  def batcher_for(directory):
    space = tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(), refresh_every=refresh_every,
                                    directory=directory, verbose=False)
    return tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), seed=SEED, start_step=0, features=space,
                                        options=tf_repulsive.BatcherOptions(verbose=False))

  first = batcher_for(tmp_path)
  iterator = iter(dataset.apply(first))
  checkpoint = tf.train.Checkpoint(iterator=iterator)
  for step in range(6):
    first.refresh_features(step)
    next(iterator)
    model.train_on_batch(x[:BATCH], y[:BATCH])
  path = checkpoint.write(str(tmp_path / "stream"))
  uninterrupted = []
  for step in range(6, 10):
    first.refresh_features(step)
    uninterrupted.append(next(iterator)[0].numpy())

  # A new batcher (the model has trained on: its features now are not refresh 1's).
  resumed = batcher_for(tmp_path)
  restored = iter(dataset.apply(resumed))
  tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
  again = []
  for step in range(6, 10):
    resumed.refresh_features(step)
    again.append(next(restored)[0].numpy())
  np.testing.assert_array_equal(np.stack(again), np.stack(uninterrupted))

  # Without the saved features the same resume refuses to guess them.
  unsaved = batcher_for(None)
  dataset.apply(unsaved)
  with pytest.raises(ValueError, match="cannot be recomputed"):
    unsaved.refresh_features(6)


def test_saved_features_of_other_weights_are_recomputed_and_old_ones_deleted(tmp_path):
  x, y = _data()
  model = _model()
  space = tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(), refresh_every=2, directory=tmp_path,
                                  keep_last=2, verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.Uniform(), seed=SEED, start_step=0, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  stale = np.zeros([NUM_POINTS, 8], np.float32)
  np.savez(tmp_path / "refresh-000000000.npz", features=stale, fingerprint=np.array("other weights"))
  batcher.refresh_features(0)
  with np.load(tmp_path / "refresh-000000000.npz") as saved:
    np.testing.assert_array_equal(saved["features"],
                                  tf_repulsive.compute_features(tf_repulsive.EmbeddingFeatures(), model, x))
  for step in (2, 4, 6):
    batcher.refresh_features(step)
  assert sorted(path.name for path in tmp_path.glob("refresh-*.npz")) == [
      "refresh-000000002.npz", "refresh-000000003.npz"]


@pytest.mark.slow
def test_a_stream_without_its_refresh_fails_at_once_or_after_the_timeout():
  x, y = _data()
  space = tf_repulsive.ModelSpace(_model(), tf_repulsive.EmbeddingFeatures(), refresh_every=4, timeout_seconds=0.5,
                                  verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), seed=SEED, start_step=0, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  began = time.perf_counter()
  with pytest.raises(tf.errors.InvalidArgumentError, match="refresh_features"):
    next(iter(stream))  # no refresh ever installed
  batcher.refresh_features(0)
  iterator = iter(stream)
  for _ in range(4):
    next(iterator)
  with pytest.raises(tf.errors.InvalidArgumentError, match="timeout_seconds"):
    next(iterator)  # step 4 waits for refresh 1, which never comes
  assert time.perf_counter() - began < 30


def test_bad_model_space_arguments_are_refused_before_reading():
  model = _model()
  x, y = _data()
  dataset = tf.data.Dataset.from_tensor_slices((x, y))
  embedding = tf_repulsive.EmbeddingFeatures()
  with pytest.raises(TypeError, match="keras.Model"):
    tf_repulsive.ModelSpace("model", embedding, refresh_every=4)
  with pytest.raises(TypeError, match="FeatureSource"):
    tf_repulsive.ModelSpace(model, "embedding", refresh_every=4)
  with pytest.raises(ValueError, match="refresh_every"):
    tf_repulsive.ModelSpace(model, embedding, refresh_every=0)
  with pytest.raises(TypeError, match="inputs_fn"):
    tf_repulsive.ModelSpace(model, embedding, refresh_every=4, inputs_fn="mfcc")
  space = tf_repulsive.ModelSpace(model, embedding, refresh_every=4, verbose=False)
  with pytest.raises(TypeError, match="pass the ModelSpace as `features=`"):
    tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), model_space=space)
  with pytest.raises(TypeError, match="`features` must be None, a function of an element or a tf_repulsive.ModelSpace"):
    tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), features=embedding)
  with pytest.raises(TypeError, match="cannot take refreshed features"):
    dataset.apply(tf_repulsive.repulsive_batch(BATCH, tf_repulsive.EpochShuffle(), features=space,
                                               options=tf_repulsive.BatcherOptions(verbose=False)))
  with pytest.raises(TypeError, match=r"\(x, y\)"):
    tf.data.Dataset.from_tensor_slices({"x": x, "label": y}).apply(
        tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), features=space,
                                     options=tf_repulsive.BatcherOptions(verbose=False)))
  fixed = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(),
                                       options=tf_repulsive.BatcherOptions(verbose=False))
  dataset.apply(fixed)
  with pytest.raises(ValueError, match="features=tf_repulsive.ModelSpace"):
    fixed.refresh_features(0)


@pytest.mark.slow
def test_fit_refuses_another_model_and_executions_that_span_a_refresh():
  x, y = _data()
  model = _model()
  space = tf_repulsive.ModelSpace(_model(), tf_repulsive.EmbeddingFeatures(), refresh_every=4, verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), seed=SEED, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  with pytest.raises(ValueError, match="another model"):
    model.fit(stream, steps_per_epoch=10, verbose=0, callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  space = tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(), refresh_every=4, verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), seed=SEED, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                steps_per_execution=3)
  with pytest.raises(ValueError, match="steps_per_execution=3"):
    model.fit(stream, steps_per_epoch=9, verbose=0, callbacks=[tf_repulsive.BatchStreamCallback(batcher)])


def test_fit_refuses_several_workers_and_tf_data_service(monkeypatch):
  x, y = _data()
  model = _model()
  space = tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(), refresh_every=4, verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), seed=SEED, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  # What the callback sees in fit under a two-worker MultiWorkerMirroredStrategy.
  cluster = tf.train.ClusterSpec({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
  callback = tf_repulsive.BatchStreamCallback(batcher)
  callback.set_model(types.SimpleNamespace(distribute_strategy=types.SimpleNamespace(
      cluster_resolver=tf.distribute.cluster_resolver.SimpleClusterResolver(cluster))))
  callback.set_params({"steps": 10})
  with pytest.raises(ValueError, match="2 workers.*one worker"):
    callback.on_train_begin()
  # A stream read from tf.data service workers (as `_dataset_graph` finds one in the dataset given),
  # with the fixed start that service needs.
  fixed_start = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), seed=SEED, start_step=0, features=space,
                                             options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(fixed_start)
  monkeypatch.setattr(_dataset_graph, "read_from_service", lambda dataset: True)
  with pytest.raises(ValueError, match="service workers.*a ModelSpace.s features"):
    tf_repulsive.BatchStreamCallback(fixed_start, dataset=stream)


class _CountingEmbedding(tf_repulsive.EmbeddingFeatures):
  """The embedding, counting the inference passes."""

  def features_fn(self, model):
    self.passes.append(1)
    return super().features_fn(model)


class _RecordingVanillaPDS(tf_repulsive.VanillaPDS):
  """Vanilla PDS that keeps the distance cache budget of every context it is built against."""

  def build(self, context):
    self.budgets.append(context.distance_cache_bytes)
    return super().build(context)


def test_a_model_space_batcher_never_builds_the_distance_cache():
  # A refresh would compute the N x N matrix again every R steps.
  x, y = _data()
  model = _model()
  sampler = _RecordingVanillaPDS()
  object.__setattr__(sampler, "budgets", [])
  space = tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(), refresh_every=2, verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, sampler, seed=SEED, start_step=0, features=space,
                                         options=tf_repulsive.BatcherOptions(distance_cache_bytes=2**30, verbose=False))
  tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  model.train_on_batch(x[:BATCH], y[:BATCH])
  batcher.refresh_features(2)
  assert sampler.budgets == [0, 0]
  tf.data.Dataset.from_tensor_slices((x, y)).apply(tf_repulsive.repulsive_batch(
      BATCH, sampler, seed=SEED, options=tf_repulsive.BatcherOptions(distance_cache_bytes=2**30, verbose=False)))
  assert sampler.budgets[-1] == 2**30


def test_the_first_refresh_of_an_unchanged_model_reuses_the_build_pass():
  x, y = _data()
  model = _model()
  source = _CountingEmbedding()
  object.__setattr__(source, "passes", [])
  space = tf_repulsive.ModelSpace(model, source, refresh_every=2, verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), seed=SEED, start_step=0, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  batcher.refresh_features(0)  # the model the build read: no second pass
  assert len(source.passes) == 1
  model.train_on_batch(x[:BATCH], y[:BATCH])
  batcher.refresh_features(2)
  assert len(source.passes) == 2


@pytest.mark.filterwarnings("ignore:the darts filled only")
def test_keras_sample_weight_elements_keep_their_weights_and_features_come_from_x():
  x, y = _data()
  weights = np.linspace(0.5, 1.5, NUM_POINTS).astype(np.float32)
  model = _model()
  space = tf_repulsive.ModelSpace(model, tf_repulsive.GradientFeatures(), refresh_every=4, verbose=False)
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(), seed=SEED, start_step=0, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  iterator = iter(tf.data.Dataset.from_tensor_slices((x, y, weights)).apply(batcher))
  batcher.refresh_features(0)
  batch_x, batch_y, batch_weights = (component.numpy() for component in next(iterator))
  expected, _ = _reference_batches(tf_repulsive.VanillaPDS(),
                                   tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y), y, [0])
  np.testing.assert_array_equal(batch_x, x[expected[0]])
  np.testing.assert_array_equal(batch_y, y[expected[0]])
  np.testing.assert_array_equal(batch_weights, weights[expected[0]])


@pytest.mark.slow
def test_inputs_fn_maps_elements_the_model_does_not_take_as_they_are():
  """Elements [N, 2, 4] (a clean and a noisy copy) of which the model takes the clean row."""
  x, y = _data()
  noisy = x + np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
  elements = np.stack([x, noisy], axis=1)
  model = _model()
  space = tf_repulsive.ModelSpace(model, tf_repulsive.GradientFeatures(), refresh_every=4, verbose=False,
                                  inputs_fn=lambda chunk: chunk[:, 0])
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(radius="auto"), seed=SEED, start_step=0,
                                         features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  iterator = iter(tf.data.Dataset.from_tensor_slices((elements, y)).apply(batcher))
  batcher.refresh_features(0)
  expected, _ = _reference_batches(tf_repulsive.VanillaPDS(radius="auto"),
                                   tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y), y, [0])
  batch_elements, _ = next(iterator)
  np.testing.assert_array_equal(batch_elements, elements[expected[0]])
