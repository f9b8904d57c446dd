"""Features from the training step: the table the steps update, the refreshes on it, its resume and refusals."""

import json
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _training_features

BATCH = 10
SEED = 3
REFRESH = 4
_SECONDS = 300


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=[300, 5]).astype(np.float32)
  y = ((x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)).astype(np.int64)
  return x, y


def _model(learning_rate=0.05):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
  model.compile(optimizer=keras.optimizers.SGD(learning_rate),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _batcher(model, sampler=None, start_step=0, **space_options):
  space = tf_repulsive.ModelSpace(model, tf_repulsive.GradientFeatures(), refresh_every=REFRESH,
                                  from_training_step=True, verbose=False, **space_options)
  return tf_repulsive.repulsive_batch(BATCH, sampler or tf_repulsive.Importance(), seed=SEED, start_step=start_step,
                                      features=space, options=tf_repulsive.BatcherOptions(verbose=False))


def _trainer(model, batcher):
  """The model that records the training steps' features: `model`, wrapped, compiled as `model` is."""
  trainer = tf_repulsive.RecordingModel(model, batcher)
  trainer.compile(optimizer=model.optimizer, loss=model.loss, jit_compile=model.jit_compile)
  return trainer


def _train(batcher, trainer, iterator, steps, first=0):
  """A custom loop; returns each step's batch indices and the model's weights before its update."""
  indices, weights = [], []
  for step in range(first, first + steps):
    batcher.refresh_features(step)
    batch_x, batch_y = next(iterator)
    indices.append(batcher.batch_indices(step))
    weights.append(trainer.get_weights())
    trainer.train_on_batch(batch_x, batch_y)
  return indices, weights


@pytest.mark.slow
def test_the_table_holds_each_trained_elements_features_from_its_last_step_and_the_rest_keep_theirs():
  x, y = _data()
  model = _model()
  batcher = _batcher(model)
  build_features = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y, verbose=False)
  iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  trainer = _trainer(model, batcher)
  indices, weights = _train(batcher, trainer, iterator, 10)
  batcher.refresh_features(10)
  table = batcher.training_features.snapshot()
  last_step = {}
  for step, batch in enumerate(indices):
    last_step.update({int(i): step for i in batch})
  probe = _model()
  for step in range(10):
    rows = [i for i, last in last_step.items() if last == step]
    if rows:
      probe.set_weights(weights[step])
      expected = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), probe, x[rows], y[rows], verbose=False)
      np.testing.assert_allclose(table[rows], expected, rtol=1e-5, atol=1e-6, err_msg=f"step {step}")
  untouched = np.setdiff1d(np.arange(len(x)), list(last_step))
  assert 0 < untouched.size < len(x)
  np.testing.assert_array_equal(table[untouched], build_features[untouched])
  # The model moved, so the trained rows are not the build's any more.
  assert not np.allclose(table[list(last_step)], build_features[list(last_step)])


def test_each_refresh_draws_on_the_table_of_its_step():
  x, y = _data()
  model = _model()
  batcher = _batcher(model)
  iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  trainer = _trainer(model, batcher)
  snapshots = {}
  for step in range(3 * REFRESH):
    batcher.refresh_features(step)
    if step % REFRESH == 0:
      snapshots[step] = batcher.training_features.snapshot()
    batch_x, batch_y = next(iterator)
    drawer = tf_repulsive.Importance().build(tf_repulsive.SamplingContext(
        features=snapshots[step - step % REFRESH], labels=None, batch_size=BATCH, distance_cache_bytes=0,
        max_steps_per_draw=1))
    key = tf.constant([SEED, tf_repulsive._pipeline._KEY_SALT], tf.int64)  # pylint: disable=protected-access
    expected = drawer.draw(key, tf.constant(step, tf.int64))[0].numpy()[0]
    np.testing.assert_array_equal(batch_x.numpy(), x[expected], err_msg=f"step {step}")
    trainer.train_on_batch(batch_x, batch_y)
  assert batcher.stats().refreshes == 3
  # Refreshes after the first read the table: they differ from the build's features.
  assert not np.array_equal(snapshots[2 * REFRESH], snapshots[0])


def test_a_full_refresh_computes_every_element_again():
  x, y = _data()
  model = _model()
  batcher = _batcher(model, full_refresh_every=2 * REFRESH)
  iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  trainer = _trainer(model, batcher)
  _train(batcher, trainer, iterator, 2 * REFRESH)
  batcher.refresh_features(2 * REFRESH)
  full = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y, verbose=False)
  np.testing.assert_allclose(batcher.training_features.snapshot(), full, rtol=1e-6)


@pytest.mark.slow
def test_a_restored_table_and_model_continue_with_the_uninterrupted_batches(tmp_path):
  x, y = _data()
  data = tf.data.Dataset.from_tensor_slices((x, y))
  model = _model()
  batcher = _batcher(model, directory=tmp_path / "refreshes")
  iterator = iter(data.apply(batcher))
  trainer = _trainer(model, batcher)
  checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, iterator=iterator,
                                   features=batcher.training_features)
  uninterrupted, _ = _train(batcher, trainer, iterator, 6)
  batcher.refresh_features(6)
  path = checkpoint.write(str(tmp_path / "ckpt"))
  uninterrupted += _train(batcher, trainer, iterator, 8, first=6)[0]
  # A new model, batcher and iterator, as a new process builds them, restored at step 6.
  model = _model()
  model.optimizer.build(model.trainable_variables)
  batcher = _batcher(model, directory=tmp_path / "refreshes")
  iterator = iter(data.apply(batcher))
  trainer = _trainer(model, batcher)
  tf.train.Checkpoint(model=model, optimizer=model.optimizer, iterator=iterator,
                      features=batcher.training_features).read(path).assert_consumed()
  resumed, _ = _train(batcher, trainer, iterator, 8, first=6)
  for step, (expected, got) in enumerate(zip(uninterrupted[6:], resumed), start=6):
    np.testing.assert_array_equal(got, expected, err_msg=f"step {step}")


@pytest.mark.slow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_fit_records_every_step_behind_a_prefetch_and_logs_them_beside_the_refreshes(tmp_path, jit_compile):
  x, y = _data()
  model = _model()
  model.compile(optimizer=keras.optimizers.SGD(0.05), jit_compile=jit_compile,
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  batcher = _batcher(model, start_step=None, directory=tmp_path)
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher).prefetch(8)
  calls = [layer.call for layer in model.layers]
  weights = []
  keep_weights = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: weights.append(
      model.get_weights()))
  _trainer(model, batcher).fit(stream, steps_per_epoch=6, epochs=2, verbose=0,
                               callbacks=[keep_weights, tf_repulsive.AnnealingCallback(batcher)])
  # Recorded by the wrapper: the model's layers are as they were.
  assert [layer.call for layer in model.layers] == calls
  assert int(batcher.training_features.recorded_through.numpy()) == 11
  assert batcher.stats().refreshes == 3  # steps 0, 4, 8
  assert sorted(path.name for path in tmp_path.glob("training-log-*")) == [
      f"training-log-00000000{refresh}.bin" for refresh in range(3)]
  # Each step's logged record: its batch's features under the weights it trained with.
  records = [record for path in sorted(tmp_path.glob("training-log-*"))
             for record in _training_features._parse_log(path.read_bytes(), BATCH, 3 * 17)]
  assert [step for step, _, _ in records] == list(range(12))
  probe = _model()
  for step, indices, features in records:
    probe.set_weights(weights[step])
    expected = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), probe, x[indices], y[indices],
                                             verbose=False)
    np.testing.assert_allclose(features, expected, rtol=1e-5, atol=1e-6, err_msg=f"step {step}")


@pytest.mark.slow
def test_a_new_batcher_rebuilds_the_table_from_the_directory_at_any_step(tmp_path):
  x, y = _data()
  data = tf.data.Dataset.from_tensor_slices((x, y))
  model = _model()
  batcher = _batcher(model, directory=tmp_path / "refreshes", keep_last=2)
  iterator = iter(data.apply(batcher))
  trainer = _trainer(model, batcher)
  checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, iterator=iterator)
  _train(batcher, trainer, iterator, 7)
  path = checkpoint.write(str(tmp_path / "ckpt"))
  uninterrupted_after, _ = _train(batcher, trainer, iterator, 1, first=7)
  table_at_7 = batcher.training_features.snapshot()  # after step 7's refresh_features: steps 0 ... 6
  # (Up to step 10: keep_last=2 then still holds refreshes 1 and 2, and the log of refresh 1.)
  uninterrupted_after += _train(batcher, trainer, iterator, 3, first=8)[0]
  assert sorted(path.name for path in (tmp_path / "refreshes").glob("*")) == [
      "refresh-000000001.npz", "refresh-000000002.npz", "training-log-000000001.bin", "training-log-000000002.bin"]
  # Only the model, the optimizer and the iterator are restored; the table comes from the directory.
  model = _model()
  model.optimizer.build(model.trainable_variables)
  batcher = _batcher(model, directory=tmp_path / "refreshes", keep_last=2)
  iterator = iter(data.apply(batcher))
  trainer = _trainer(model, batcher)
  tf.train.Checkpoint(model=model, optimizer=model.optimizer, iterator=iterator).read(path).assert_consumed()
  resumed, _ = _train(batcher, trainer, iterator, 1, first=7)
  np.testing.assert_array_equal(batcher.training_features.snapshot(), table_at_7)
  resumed += _train(batcher, trainer, iterator, 3, first=8)[0]
  for step, (expected, got) in enumerate(zip(uninterrupted_after, resumed), start=7):
    np.testing.assert_array_equal(got, expected, err_msg=f"step {step}")


def test_a_skipped_step_is_refused_naming_what_to_do():
  x, y = _data()
  model = _model()
  batcher = _batcher(model)
  iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  trainer = _trainer(model, batcher)
  _train(batcher, trainer, iterator, 2)
  with pytest.raises(ValueError, match="not at hand"):
    batcher.refresh_features(4)


@pytest.mark.parametrize("prefetch", [False, True])
def test_two_training_calls_per_step_are_refused_at_the_next_refresh(prefetch):
  """Behind a prefetch, a second call may find the next step's batch delivered and record it."""
  x, y = _data()
  model = _model()
  batcher = _batcher(model)
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  trainer = _trainer(model, batcher)
  iterator = iter(dataset.prefetch(8) if prefetch else dataset)
  for step in range(REFRESH):
    batcher.refresh_features(step)
    batch_x, batch_y = next(iterator)
    trainer.train_on_batch(batch_x, batch_y)
    trainer.train_on_batch(batch_x, batch_y)
  with pytest.raises(ValueError, match="exactly one training call"):
    batcher.refresh_features(REFRESH)


@pytest.mark.parametrize("options, error, match", [
    ({"full_refresh_every": 6}, ValueError, "multiple of refresh_every"),
    ({"from_training_step": False, "full_refresh_every": 8}, ValueError, "pass from_training_step=True"),
    ({"from_training_step": 1}, TypeError, "from_training_step"),
])
def test_bad_options_are_refused(options, error, match):
  with pytest.raises(error, match=match):
    tf_repulsive.ModelSpace(_model(), tf_repulsive.GradientFeatures(), refresh_every=REFRESH,
                            **{"from_training_step": True, **options})


def test_a_source_without_last_layer_features_and_a_fit_of_the_bare_model_are_refused():
  x, y = _data()
  model = _model()
  space = tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(layer=model.layers[0].name),
                                  refresh_every=REFRESH, from_training_step=True, verbose=False)
  with pytest.raises(TypeError, match="last_layer_fn"):
    tf.data.Dataset.from_tensor_slices((x, y)).apply(
        tf_repulsive.repulsive_batch(BATCH, tf_repulsive.Importance(), seed=0, start_step=0, features=space))
  batcher = _batcher(model, start_step=None)
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  with pytest.raises(ValueError, match=r"fit tf_repulsive.RecordingModel\(model, batcher\)"):
    model.fit(stream, steps_per_epoch=2, verbose=0, callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  with pytest.raises(ValueError, match="another model"):
    tf_repulsive.RecordingModel(_model(), batcher)


@pytest.mark.slow
def test_the_loss_and_the_embedding_come_from_the_training_step_too():
  x, y = _data()
  for source, expected_dim in ((tf_repulsive.LossFeatures(), 1), (tf_repulsive.EmbeddingFeatures(), 16)):
    model = _model(learning_rate=0.0)
    space = tf_repulsive.ModelSpace(model, source, refresh_every=REFRESH, from_training_step=True, verbose=False)
    batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.Importance(), seed=SEED, start_step=0,
                                           features=space, options=tf_repulsive.BatcherOptions(verbose=False))
    iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
    indices, _ = _train(batcher, _trainer(model, batcher), iterator, 3)
    batcher.refresh_features(3)
    rows = np.unique(np.concatenate(indices))
    full = tf_repulsive.compute_features(source, model, x, y, verbose=False)
    assert full.shape[1] == expected_dim
    np.testing.assert_allclose(batcher.training_features.snapshot()[rows], full[rows], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_run_resumed_in_a_new_process_draws_the_uninterrupted_batches(tmp_path):
  script = pathlib.Path(__file__).with_name("training_features_run.py")
  for phase in ("first", "resume"):
    subprocess.run([sys.executable, str(script), phase, str(tmp_path)], check=True, timeout=_SECONDS)
    # The resumed run must compute refreshes 2 and 3 (steps 8, 12) from the table it rebuilt, not
    # read them back.
    for refresh in (2, 3):
      (tmp_path / "refreshes" / f"refresh-00000000{refresh}.npz").unlink(missing_ok=True)
  first, resumed = (json.loads((tmp_path / f"{phase}.json").read_text())["indices"] for phase in ("first", "resume"))
  assert len(first) == 9
  assert resumed == first


@pytest.mark.parametrize("take_batch, rows, match", [
    (False, BATCH, "found no batch of the stream"),
    (True, BATCH // 2, "another number of elements"),
])
def test_a_training_call_on_other_batches_is_refused_at_the_next_refresh(take_batch, rows, match):
  x, y = _data()
  model = _model()
  batcher = _batcher(model)
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  trainer = _trainer(model, batcher)
  batcher.refresh_features(0)
  if take_batch:
    next(iter(dataset))
  trainer.train_on_batch(x[:rows], y[:rows])
  batcher.refresh_features(1)  # between refreshes, nothing is checked
  with pytest.raises(ValueError, match=match):
    batcher.refresh_features(REFRESH)


def test_a_failed_write_of_the_table_is_raised_at_the_next_refresh(tmp_path):
  """The table's features are written in the background; what the write raised is not lost."""
  x, y = _data()
  model = _model()
  batcher = _batcher(model, directory=tmp_path)
  iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  trainer = _trainer(model, batcher)
  # np.savez cannot write the partial file of refresh 1 where a directory has its name.
  (tmp_path / "refresh-000000001.partial.npz").mkdir()
  _train(batcher, trainer, iterator, 2 * REFRESH)
  with pytest.raises(IsADirectoryError, match="refresh-000000001"):
    batcher.refresh_features(2 * REFRESH)


def test_the_wrappers_saved_weights_carry_the_table(tmp_path):
  x, y = _data()
  data = tf.data.Dataset.from_tensor_slices((x, y))
  model = _model()
  batcher = _batcher(model)
  iterator = iter(data.apply(batcher))
  trainer = _trainer(model, batcher)
  _train(batcher, trainer, iterator, 5)
  trainer.save_weights(str(tmp_path / "trainer.weights.h5"))
  model = _model()
  batcher = _batcher(model)
  data.apply(batcher)
  restored = _trainer(model, batcher)
  assert not np.array_equal(batcher.training_features.snapshot(), trainer.training_features.snapshot())
  restored.load_weights(str(tmp_path / "trainer.weights.h5"))
  np.testing.assert_array_equal(batcher.training_features.snapshot(), trainer.training_features.snapshot())
  assert int(batcher.training_features.recorded_through.numpy()) == 4
  for got, expected in zip(model.get_weights(), trainer.get_weights()):
    np.testing.assert_array_equal(got, expected)
