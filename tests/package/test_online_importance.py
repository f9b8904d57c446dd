"""OnlineImportance: the law of its draws, unbiased weights, the switch, fit and a custom loop, refusals.

The law is tested on `select` itself over thousands of steps on a fixed presample, against the
exact shares of the scores (chi-square), with the uniform law as the control the test must reject.
"""

import keras
import numpy as np
import pytest
from scipy import stats
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _online_importance

PRESAMPLE, BATCH = 12, 4


def _data(num_points=PRESAMPLE, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=[num_points, 3]).astype(np.float32)
  return x, (x[:, 0] + 0.3 * rng.normal(size=num_points) > 0).astype(np.int64)


def _model():
  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])


def _scores(model, x, y):
  probabilities = tf.nn.softmax(model(x)).numpy()
  return np.linalg.norm(probabilities - np.eye(2)[y], axis=1)


def _selections(trainer, x, y, steps):
  select = tf.function(lambda step: trainer.select(x, y, step=step)[:3])
  return [tuple(value.numpy() for value in select(tf.constant(step, tf.int64))) for step in range(steps)]


@pytest.mark.slow
def test_above_the_threshold_draws_follow_the_scores_and_the_weighted_loss_is_unbiased():
  x, y = _data()
  model = _model()
  trainer = tf_repulsive.OnlineImportance(model, batch_size=BATCH, seed=1)
  trainer.tau.assign(100.0)
  steps = 3000
  selections = _selections(trainer, x, y, steps)
  scores = _scores(model, x, y)
  shares = scores / scores.sum()
  counts = np.zeros(PRESAMPLE)
  batch_losses = []
  losses = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)(y, model(x)).numpy()
  for x_k, y_k, weights in selections:
    chosen = [int(np.flatnonzero((x == row).all(axis=1))[0]) for row in x_k]
    np.testing.assert_array_equal(y_k, y[chosen])
    np.testing.assert_allclose(weights, 1 / (PRESAMPLE * shares[chosen]), rtol=1e-5)
    np.add.at(counts, chosen, 1)  # drawn with replacement: an element can come twice
    batch_losses.append(np.mean(weights * losses[chosen]))  # Keras' reduction: the weighted sum over k
  expected = shares * steps * BATCH
  statistic = np.sum((counts - expected) ** 2 / expected)
  critical = stats.chi2.ppf(0.999, PRESAMPLE - 1)
  assert statistic < critical
  uniform = np.full(PRESAMPLE, steps * BATCH / PRESAMPLE)
  assert np.sum((counts - uniform) ** 2 / uniform) > 10 * critical
  mean, error = np.mean(batch_losses), np.std(batch_losses, ddof=1) / np.sqrt(steps)
  assert abs(mean - losses.mean()) < 4 * error
  # Plain means of the same draws are biased: their mean is the score-weighted mean loss.
  plain = np.array([np.mean(losses[[int(np.flatnonzero((x == row).all(axis=1))[0]) for row in x_k]])
                    for x_k, _, _ in selections])
  biased, plain_error = np.sum(shares * losses), plain.std(ddof=1) / np.sqrt(steps)
  assert abs(plain.mean() - biased) < 4 * plain_error and biased - losses.mean() > 6 * plain_error


def test_below_the_threshold_a_step_takes_the_first_k_at_their_given_weights():
  x, y = _data()
  trainer = tf_repulsive.OnlineImportance(_model(), batch_size=BATCH)
  given = np.linspace(0.5, 2.0, PRESAMPLE).astype(np.float32)
  x_k, y_k, weights, (importance, _) = trainer.select(x, y, given, step=tf.constant(0, tf.int64))
  np.testing.assert_array_equal(x_k, x[:BATCH])
  np.testing.assert_array_equal(y_k, y[:BATCH])
  np.testing.assert_allclose(weights, given[:BATCH])
  assert not bool(importance)
  assert trainer.threshold(PRESAMPLE) == pytest.approx((PRESAMPLE + 3 * BATCH) / (3 * BATCH))


def test_tau_is_the_variance_reduction_of_the_scores():
  rng = np.random.default_rng(0)
  for scores in (rng.exponential(size=50), np.ones(7), np.zeros(5), np.array([1.0, 0, 0, 0])):
    shares = scores / scores.sum() if scores.sum() else np.full(len(scores), 1 / len(scores))
    uniform = 1 / len(scores)
    expected = 1 / np.sqrt(1 - np.sum((shares - uniform) ** 2) / np.sum(shares ** 2))
    assert float(_online_importance._variance_reduction(tf.constant(scores))) == pytest.approx(expected, rel=1e-5)  # pylint: disable=protected-access


def _fit(threshold, jit_compile="auto", epochs=3):
  x, y = _data(300, seed=2)
  batcher = tf_repulsive.repulsive_batch(3 * 10, tf_repulsive.Uniform(), seed=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  model = _model()
  trainer = tf_repulsive.OnlineImportance(model, batch_size=10, seed=3, tau_threshold=threshold)
  trainer.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)
  history = trainer.fit(stream, epochs=epochs, steps_per_epoch=10, verbose=0,
                        callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  return trainer, model, batcher, history.history


@pytest.mark.slow
def test_fit_switches_by_tau_and_a_custom_loop_trains_the_same_steps():
  calls = [layer.call for layer in _model().layers]
  trainer, model, batcher, history = _fit(threshold=1.02)
  assert history["importance"][0] < history["importance"][-1] and history["importance"][-1] > 0.3
  assert history["tau"][-1] == pytest.approx(float(trainer.tau.numpy()))
  assert len(calls) == len(model.layers) and trainer.trainable_weights == model.trainable_weights
  # The same steps in a custom loop: select, a step on the k elements at their weights, observe.
  x, y = _data(300, seed=2)
  loop_model = _model()
  loop = tf_repulsive.OnlineImportance(loop_model, batch_size=10, seed=3, tau_threshold=1.02)
  optimizer = keras.optimizers.SGD(0.5)
  loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  @tf.function
  def train_step(batch_x, batch_y):
    x_k, y_k, weights, selection = loop.select(batch_x, batch_y, step=optimizer.iterations)
    with tf.GradientTape() as tape:
      outputs = loop_model(x_k, training=True)
      loss = loss_fn(y_k, outputs, sample_weight=weights)
    optimizer.apply_gradients(zip(tape.gradient(loss, loop_model.trainable_variables),
                                  loop_model.trainable_variables))
    loop.observe(y_k, outputs, selection)

  for step in range(30):
    indices = batcher.batch_indices(step)
    train_step(x[indices], y[indices])
  for got, expected in zip(loop_model.get_weights(), model.get_weights()):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
  assert float(loop.tau.numpy()) == pytest.approx(float(trainer.tau.numpy()), rel=1e-5)


def test_the_switch_state_is_saved_with_the_weights(tmp_path):
  trainer, _, _, _ = _fit(threshold=1.02, epochs=1)
  trainer.save_weights(str(tmp_path / "trainer.weights.h5"))
  restored = tf_repulsive.OnlineImportance(_model(), batch_size=10, seed=3)
  restored.load_weights(str(tmp_path / "trainer.weights.h5"))
  assert float(restored.tau.numpy()) == float(trainer.tau.numpy()) > 0
  assert int(restored.importance_steps.numpy()) == int(trainer.importance_steps.numpy())


def test_bad_arguments_and_presamples_are_refused():
  model = _model()
  for arguments, error, match in [
      (dict(batch_size=0), ValueError, "batch_size"),
      (dict(batch_size=4, tau_threshold=0.5), ValueError, "tau_threshold"),
      (dict(batch_size=4, smoothing=1.0), ValueError, "smoothing"),
      (dict(batch_size=4, smoothing=-0.1), ValueError, "smoothing"),
      (dict(batch_size=4, score_fn=3), TypeError, "score_fn"),
      (dict(batch_size=4, from_logits="yes"), TypeError, "from_logits"),
  ]:
    with pytest.raises(error, match=match):
      tf_repulsive.OnlineImportance(model, **arguments)
  with pytest.raises(TypeError, match="`model`"):
    tf_repulsive.OnlineImportance("model", batch_size=4)
  x, y = _data()
  trainer = tf_repulsive.OnlineImportance(model, batch_size=PRESAMPLE + 1)
  with pytest.raises(ValueError, match="at least k"):
    trainer.select(x, y, step=0)
  reduced = tf_repulsive.OnlineImportance(model, batch_size=4, score_fn=lambda y_true, y_pred: tf.reduce_sum(y_pred))
  reduced.tau.assign(100.0)
  with pytest.raises(ValueError, match="one per element"):
    reduced.select(x, y, step=0)
