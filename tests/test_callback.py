"""model.fit with AnnealingCallback: batch of optimizer step n is the draw for n, with pi_n."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive

BATCH = 50


class _Recorder(keras.callbacks.Callback):
  """Keeps every batch's logs and the fingerprint of the batch the train step consumed."""

  def __init__(self, fingerprint):
    super().__init__()
    self.fingerprint = fingerprint
    self.batch_logs = []
    self.epoch_logs = []
    self.consumed = []

  def on_train_batch_end(self, batch, logs=None):
    step = int(self.model.optimizer.iterations.numpy()) - 1
    self.batch_logs.append((step, dict(logs)))
    self.consumed.append((step, float(self.fingerprint.numpy())))

  def on_epoch_end(self, epoch, logs=None):
    self.epoch_logs.append(dict(logs))


class FingerprintModel(keras.Model):
  """A small classifier whose train step stores the sum of the inputs it was given."""

  def __init__(self, fingerprint):
    super().__init__(name="fingerprint_model")
    self._fingerprint = fingerprint
    self.hidden = keras.layers.Dense(32, activation="relu")
    self.out = keras.layers.Dense(10)

  def call(self, x):
    return self.out(self.hidden(x))

  def train_step(self, data):
    self._fingerprint.assign(tf.reduce_sum(tf.cast(data[0], tf.float64)))
    return super().train_step(data)


def _model():
  fingerprint = tf.Variable(0.0, dtype=tf.float64, trainable=False)
  model = FingerprintModel(fingerprint)
  model.compile(optimizer=keras.optimizers.Adam(1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model, fingerprint


def _fit(digits, sampler, epochs, steps_per_epoch=None, seed=3, repeat=False, model=None,
         log_batches=False):
  features, labels = digits
  model, fingerprint = model or _model()
  batches = tf.data.Dataset.from_tensor_slices((features, labels)).apply(
      tf_repulsive.repulsive_batch(BATCH, sampler, seed=seed))
  if repeat:
    batches = batches.repeat()
  recorder = _Recorder(fingerprint)
  model.fit(batches, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0,
            callbacks=[tf_repulsive.AnnealingCallback(sampler, log_batches=log_batches), recorder])
  return recorder


def _expected_fingerprint(digits, sampler, step):
  indices = tf_repulsive.batch_indices(sampler, step)
  return float(digits[0][indices].astype(np.float64).sum())


def _assert_consumed_draws(digits, sampler, recorder, first_step, num_steps):
  steps = [step for step, _ in recorder.consumed]
  assert steps == list(range(first_step, first_step + num_steps))
  for step, fingerprint in recorder.consumed:
    assert fingerprint == pytest.approx(_expected_fingerprint(digits, sampler, step), rel=1e-9)


@pytest.mark.parametrize("steps_per_epoch,repeat", [(None, False), (25, True)])
def test_batch_of_step_n_is_the_draw_for_n(digits, steps_per_epoch, repeat):
  sampler = tf_repulsive.AnnealPDS()
  recorder = _fit(digits, sampler, epochs=3, steps_per_epoch=steps_per_epoch, repeat=repeat)
  per_epoch = steps_per_epoch or int(np.ceil(len(digits[1]) / BATCH))
  _assert_consumed_draws(digits, sampler, recorder, 0, 3 * per_epoch)


def test_resumed_training_continues_at_the_optimizer_step(digits):
  model = _model()
  _fit(digits, tf_repulsive.AnnealPDS(), epochs=1, model=model)
  # A new pipeline (as after a restart) on the trained model: the first batch is draw 36, not 0.
  sampler = tf_repulsive.AnnealPDS()
  recorder = _fit(digits, sampler, epochs=1, model=model)
  _assert_consumed_draws(digits, sampler, recorder, 36, 36)


def test_anneal_starts_easy_then_follows_h(digits):
  features, labels = digits
  values = np.round(tf_repulsive.mingling_index(features, labels, 5) * 5).astype(int)
  h = np.bincount(values, minlength=6) / len(values)
  sampler = tf_repulsive.AnnealPDS()
  recorder = _fit(digits, sampler, epochs=6, log_batches=True)  # 36 steps per epoch: steps 0..215
  composition = {step: np.array([logs[f"sampler_mingling_{m}"] for m in range(6)])
                 for step, logs in recorder.batch_logs}
  logged_pi = {step: np.array([logs[f"sampler_pi_{m}"] for m in range(6)])
               for step, logs in recorder.batch_logs}
  for step in (0, 1, 50, 172, 215):
    np.testing.assert_allclose(logged_pi[step], tf_repulsive.anneal_pi(h, step), atol=1e-12)
  early = np.mean([composition[step] for step in range(10)], axis=0)
  late = np.mean([composition[step] for step in range(150, 216)], axis=0)
  assert early[0] == 1.0  # only easy points in the first batches
  assert h[0] < 0.95
  total_variation = lambda p: 0.5 * np.abs(p - h).sum()
  assert total_variation(late) < 0.05 < total_variation(early)
  last_epoch = recorder.epoch_logs[-1]
  np.testing.assert_allclose([last_epoch[f"sampler_pi_{m}"] for m in range(6)], logged_pi[215])
  np.testing.assert_allclose([last_epoch[f"sampler_mingling_{m}"] for m in range(6)],
                             np.mean([composition[step] for step in range(180, 216)], axis=0))
  assert last_epoch["sampler_fallback_batches"] == 0


def test_batch_logs_are_opt_in(digits):
  recorder = _fit(digits, tf_repulsive.AnnealPDS(), epochs=1)
  assert not any("sampler_pi_0" in logs for _, logs in recorder.batch_logs)
  assert "sampler_pi_0" in recorder.epoch_logs[0]


def test_callback_needs_an_applied_sampler(digits):
  model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
  model.compile(optimizer="sgd", loss="mse")
  data = tf.data.Dataset.from_tensor_slices((digits[0][:100], np.zeros((100, 10), np.float32))).batch(10)
  with pytest.raises(ValueError, match="repulsive_batch"):
    model.fit(data, epochs=1, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(tf_repulsive.AnnealPDS())])
  with pytest.raises(TypeError, match="sampler"):
    tf_repulsive.AnnealingCallback("anneal")
