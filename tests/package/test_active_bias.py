"""ActiveBias: weights against a hand computation, draws against the weights, fit integration."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import tf_repulsive
from tf_repulsive import _active_bias
from tf_repulsive import diagnostics


def test_weights_match_a_hand_computation():
  history = np.array([[0.2, 0.5, 0.8], [0.9, 0.9, 0.9], [0.1, 0.3, 0.2]])
  weights = _active_bias.prediction_variance_weights(
      np.full(3, 3.0), history.sum(1), (history**2).sum(1), smoothness=0.2)
  for row, weight in zip(history, weights):
    variance = np.var(row, ddof=1)
    assert weight == pytest.approx(np.sqrt(variance + variance**2 / 2) + 0.2)
  assert weights[1] == pytest.approx(0.2)  # a constant prediction has no variance


def _pipeline(size=60, batch_size=1, seed=0):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(size, 4)).astype(np.float32)
  y = rng.integers(0, 3, size).astype(np.int64)
  batcher = tf_repulsive.repulsive_batch(batch_size, tf_repulsive.ActiveBias(), seed=seed, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  return batcher, batches, x, y


@pytest.mark.slow
def test_single_draws_follow_the_weights():
  batcher, _, _, _ = _pipeline(size=8)
  state = batcher.drawer.state
  weights = np.array([1, 2, 3, 4, 1, 2, 3, 4], np.float64)
  state.weights.assign(weights)
  counts = np.bincount(diagnostics.draw_batches(batcher, 3000)[:, 0], minlength=8)
  assert stats.chisquare(counts, 3000 * weights / weights.sum()).pvalue > 1e-3
  assert stats.chisquare(counts).pvalue < 1e-6  # not uniform


def test_batches_are_distinct_and_favour_heavy_examples():
  batcher, _, _, _ = _pipeline(size=60, batch_size=10)
  state = batcher.drawer.state
  state.weights.assign(np.where(np.arange(60) < 10, 50.0, 1.0))
  for step in range(20):
    indices = batcher.batch_indices(step)
    assert len(set(indices.tolist())) == 10
    assert np.sum(indices < 10) >= 5


def test_fit_learns_weights_after_warmup_and_state_checkpoints(digits, tmp_path):
  features, labels = digits
  batcher = tf_repulsive.repulsive_batch(100, tf_repulsive.ActiveBias(warmup_epochs=2), seed=1)
  batches = tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
  model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
  model.compile(optimizer=keras.optimizers.SGD(0.1),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  callback = tf_repulsive.ActiveBiasCallback(batcher)
  weights_by_epoch = []
  record = keras.callbacks.LambdaCallback(
      on_epoch_end=lambda epoch, logs: weights_by_epoch.append(callback.state.weights.numpy().copy()))
  model.fit(batches, epochs=3, steps_per_epoch=batcher.steps_per_epoch, verbose=0,
            callbacks=[callback, record])
  np.testing.assert_array_equal(callback.state.count.numpy(), 3.0)
  np.testing.assert_array_equal(weights_by_epoch[0], 1.0)  # warm-up: uniform
  assert weights_by_epoch[2].std() > 0.01
  path = tf.train.Checkpoint(active_bias=callback.state).write(str(tmp_path / "state"))
  restored = _active_bias.ActiveBiasState(len(labels))
  tf.train.Checkpoint(active_bias=restored).read(path).assert_consumed()
  np.testing.assert_array_equal(restored.weights.numpy(), callback.state.weights.numpy())


def _mapped_pipeline(inputs_for_callback):
  """Elements are raw 8-d rows; the model sees their first half doubled, computed after sampling."""
  rng = np.random.default_rng(1)
  raw = rng.normal(size=(40, 8)).astype(np.float32)
  labels = rng.integers(0, 3, 40).astype(np.int64)
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.ActiveBias(), seed=0)
  batches = tf.data.Dataset.from_tensor_slices((raw, labels)).apply(batcher).map(
      lambda x, y: (2 * x[:, :4], y))
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
  model.compile(optimizer=keras.optimizers.SGD(0.1),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  callback = tf_repulsive.ActiveBiasCallback(batcher, inputs=inputs_for_callback(raw))
  return model, batches, callback, raw, labels


def test_callback_predicts_on_the_given_inputs():
  model, batches, callback, raw, labels = _mapped_pipeline(lambda raw: 2 * raw[:, :4])
  model.fit(batches, epochs=1, steps_per_epoch=4, verbose=0, callbacks=[callback])
  probabilities = tf.nn.softmax(model.predict(2 * raw[:, :4], verbose=0)).numpy()
  np.testing.assert_allclose(callback.state.total.numpy(), probabilities[np.arange(40), labels], rtol=1e-5)


def test_callback_rejects_inputs_of_another_length_before_training():
  model, batches, callback, raw, _ = _mapped_pipeline(lambda raw: 2 * raw[:30, :4])
  weights = [w.copy() for w in model.get_weights()]
  with pytest.raises(ValueError, match="`inputs` holds 30 examples but the sampled dataset has 40"):
    model.fit(batches, epochs=1, steps_per_epoch=4, verbose=0, callbacks=[callback])
  for before, after in zip(weights, model.get_weights()):
    np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("kwargs,error", [
    ({"smoothness": 0.0}, ValueError), ({"smoothness": "a"}, TypeError),
    ({"warmup_epochs": 1}, ValueError), ({"warmup_epochs": 2.5}, TypeError)])
def test_bad_configuration(kwargs, error):
  with pytest.raises(error):
    tf_repulsive.ActiveBias(**kwargs)


def test_callback_needs_an_active_bias_batcher():
  with pytest.raises(TypeError, match="repulsive_batch"):
    tf_repulsive.ActiveBiasCallback(tf_repulsive.ActiveBias())
  with pytest.raises(TypeError, match="ActiveBias"):
    tf_repulsive.ActiveBiasCallback(tf_repulsive.repulsive_batch(4, tf_repulsive.Uniform()))
  with pytest.raises(ValueError, match="start_step=None"):
    tf_repulsive.ActiveBiasCallback(tf_repulsive.repulsive_batch(4, tf_repulsive.ActiveBias(), start_step=0))


def test_labels_are_required():
  data = tf.data.Dataset.from_tensor_slices(np.zeros((20, 3), np.float32))
  with pytest.raises(ValueError, match="labels"):
    data.apply(tf_repulsive.repulsive_batch(4, tf_repulsive.ActiveBias()))
