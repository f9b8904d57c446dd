"""Inclusion weights: each element of a batch weighted by the inverse of its probability of being in a batch.

The estimated probabilities must be the law of the draws (tested against the empirical frequencies
of thousands of draws, chi-square), and the stream must hand Keras exactly those weights in every
element form Keras takes: k / (N pi) ("unbiased"), or 1 / pi scaled to average 1 over the global
batch ("self_normalized"). On a law whose probabilities are exact, the first form's batch loss is
the data's mean loss in expectation and the second's is biased.
"""

import dataclasses

import keras
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _dart_throwing
from tf_repulsive import _inclusion_weights
from tf_repulsive import diagnostics

NUM_POINTS, BATCH, SEED = 150, 8, 5


def _data():
  """A dense cluster and a sparse background: disks draw the two at very different rates."""
  rng = np.random.default_rng(3)
  x = np.concatenate([rng.normal(size=(100, 2)) * 0.3, rng.uniform(-4, 4, size=(50, 2))]).astype(np.float32)
  y = (x[:, 0] + 0.3 * rng.normal(size=NUM_POINTS) > 0).astype(np.int64)
  return x, y


def _estimated_over(sampler, steps):
  """`sampler` with a dart thrower that estimates the inclusion probabilities from `steps` steps' draws."""

  class Estimated(type(sampler)):
    _tuning = _dart_throwing.DartTuning(inclusion_steps=steps)

  return Estimated(**{field.name: getattr(sampler, field.name) for field in dataclasses.fields(sampler)})


def _frequencies(batcher, num_steps):
  """Each element's share of the batches of `num_steps` steps from 10**6 on, and how many steps those are."""
  per_draw = batcher.drawer.steps_per_draw
  draws = [batcher._built.draw_once(tf.constant(10**6 + first, tf.int64))[0].numpy()  # pylint: disable=protected-access
           for first in range(0, num_steps, per_draw)]
  steps = len(draws) * per_draw
  return np.bincount(np.concatenate(draws).ravel(), minlength=NUM_POINTS) / steps, steps


@pytest.mark.slow
@pytest.mark.parametrize("sampler", [
    tf_repulsive.VanillaPDS(radius=0.8),  # one radius
    tf_repulsive.EasyPDS(radius=0.8),  # disks only around points of mingling value 0
    tf_repulsive.DensePDS(pi=[0.5, 0.1, 0.1, 0.1, 0.1, 0.1], radius=0.8),  # darts by mingling value
    tf_repulsive.VanillaPDS(radius=3.0),  # so large that the fallback fill completes most batches
], ids=["vanilla", "easy", "dense", "vanilla_filled"])
@pytest.mark.filterwarnings("ignore:the darts filled only")
def test_inclusion_probabilities_are_the_law_of_the_draws(sampler):
  # Many more steps than the default, so that the estimate's own noise is small against the
  # frequencies': the chi-square then tests the estimate's mean, not its noise.
  sampler = _estimated_over(sampler, 4096)
  x, y = _data()
  batcher = tf_repulsive.repulsive_batch(BATCH, sampler, seed=SEED, start_step=0, inclusion_weights="self_normalized",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  probabilities = batcher.inclusion_probabilities
  np.testing.assert_allclose(probabilities.sum(), BATCH, rtol=1e-9)
  frequencies, steps = _frequencies(batcher, 8000)
  if sampler.radius == 3.0:
    assert np.mean(batcher.fallback_counts(range(10**6, 10**6 + 64)) > 0) > 0.5
  statistic = np.sum((frequencies - probabilities)**2 / (probabilities * (1 - probabilities) / steps))
  assert statistic < scipy.stats.chi2.ppf(0.999, NUM_POINTS)
  # What the test can tell: the uniform law k/N is rejected by orders of magnitude more.
  uniform = np.sum((frequencies - BATCH / NUM_POINTS)**2 / (BATCH / NUM_POINTS * (1 - BATCH / NUM_POINTS) / steps))
  assert uniform > 3 * statistic


def test_uniform_batches_are_weighted_one():
  x, y = _data()
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.Uniform(), seed=SEED, start_step=0,
                                         inclusion_weights="self_normalized",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  np.testing.assert_array_equal(batcher.inclusion_probabilities, np.full(NUM_POINTS, BATCH / NUM_POINTS))
  _, _, weights = next(iter(stream))
  np.testing.assert_array_equal(weights.numpy(), np.ones(BATCH, np.float32))


class _FixedSubsets(tf_repulsive.Sampler):
  """Draws one of a few fixed k-subsets with fixed probabilities: a law whose inclusion probabilities are exact."""

  def __init__(self, subsets, probabilities):
    self.subsets, self.probabilities = np.asarray(subsets, np.int32), np.asarray(probabilities, np.float64)

  def build(self, context):
    subsets, probabilities = self.subsets, self.probabilities
    exact = np.zeros(context.features.shape[0])
    for subset, probability in zip(subsets, probabilities):
      exact[subset] += probability

    class Drawer(tf_repulsive.BatchDrawer):
      def draw(self, key, first_step):
        seed = tf.random.experimental.stateless_fold_in(key, first_step)
        choice = tf.random.stateless_categorical(np.log(probabilities)[None], 1, seed)[0, 0]
        return tf.gather(subsets, choice)[None], tf.zeros([1], tf.int32)

      def inclusion_probabilities(self, key, verbose):
        return exact

    return Drawer()


@pytest.mark.slow
def test_unbiased_weights_make_the_batch_loss_the_data_mean_and_self_normalized_ones_are_biased():
  # Six points with per-element "losses" l; three 3-subsets. The crowded subset {0, 1, 2} holds
  # the small losses and comes most often.
  losses = np.array([0.0, 0.1, 0.2, 5.0, 9.0, 1.0], np.float32)
  subsets, probabilities = [[0, 1, 2], [2, 3, 4], [0, 4, 5]], [0.6, 0.25, 0.15]
  steps = 3000
  means = {}
  for form in ("unbiased", "self_normalized"):
    batcher = tf_repulsive.repulsive_batch(3, _FixedSubsets(subsets, probabilities), seed=SEED, start_step=0,
                                           inclusion_weights=form, options=tf_repulsive.BatcherOptions(verbose=False))
    stream = tf.data.Dataset.from_tensor_slices((losses[:, None], losses)).apply(batcher)
    # What Keras' default reduction makes of a weighted batch: sum_b w_i l_i / k.
    batch_losses = np.array([np.sum(weights * batch_losses) / 3 for _, batch_losses, weights
                             in stream.take(steps).as_numpy_iterator()])
    means[form] = batch_losses.mean(), batch_losses.std(ddof=1) / np.sqrt(steps)
  pi = np.array([0.75, 0.6, 0.85, 0.25, 0.4, 0.15])
  np.testing.assert_allclose(batcher.inclusion_probabilities, pi)
  mean, error = means["unbiased"]
  assert abs(mean - losses.mean()) < 4 * error
  # The ratio estimate's exact expectation over the three subsets, away from the data mean.
  ratio = sum(p * np.sum(losses[s] / pi[s]) / np.sum(1 / pi[s]) for s, p in zip(subsets, probabilities))
  mean, error = means["self_normalized"]
  assert abs(mean - ratio) < 4 * error
  assert abs(ratio - losses.mean()) > 10 * error


@pytest.mark.slow
def test_unbiased_weights_are_k_over_n_pi_and_uniform_batches_weigh_one():
  x, y = _data()
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(radius=0.8), seed=SEED, start_step=0,
                                         inclusion_weights="unbiased",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  _, _, weights = next(iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)))
  expected = BATCH / (NUM_POINTS * batcher.inclusion_probabilities[batcher.batch_indices(0)])
  np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-6)
  assert np.ptp(expected) > 0.5 and not np.isclose(expected.mean(), 1.0, atol=0.01)
  np.testing.assert_allclose(diagnostics.batch_weights(batcher, batcher.batch_indices(0)[None]), expected[None],
                             rtol=1e-6)
  uniform = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.Uniform(), seed=SEED, start_step=0,
                                         inclusion_weights="unbiased",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  _, _, weights = next(iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(uniform)))
  np.testing.assert_allclose(weights.numpy(), np.ones(BATCH), rtol=1e-6)


def _expected_weights(batcher, step):
  inverse = 1.0 / batcher.inclusion_probabilities[batcher.batch_indices(step)]
  return inverse * BATCH / inverse.sum()


def test_the_stream_gives_each_element_its_weight_and_multiplies_given_sample_weights():
  x, y = _data()
  given = np.linspace(0.5, 2.0, NUM_POINTS).astype(np.float64)
  sampler = tf_repulsive.VanillaPDS(radius=0.8)
  pairs = tf_repulsive.repulsive_batch(BATCH, sampler, seed=SEED, start_step=3, inclusion_weights="self_normalized",
                                       options=tf_repulsive.BatcherOptions(verbose=False))
  triples = tf_repulsive.repulsive_batch(BATCH, sampler, seed=SEED, start_step=3, inclusion_weights="self_normalized",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  pair_stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(pairs)
  triple_stream = tf.data.Dataset.from_tensor_slices((x, y, given)).apply(triples)
  assert pair_stream.element_spec[2] == tf.TensorSpec([BATCH], tf.float32)
  assert triple_stream.element_spec[2] == tf.TensorSpec([BATCH], tf.float64)
  for step, (pair, triple) in zip(range(3, 7), zip(pair_stream, triple_stream)):
    indices = pairs.batch_indices(step)
    np.testing.assert_array_equal(pair[0].numpy(), x[indices])
    np.testing.assert_array_equal(pair[1].numpy(), y[indices])
    np.testing.assert_allclose(pair[2].numpy(), _expected_weights(pairs, step), rtol=1e-5)
    np.testing.assert_allclose(triple[2].numpy(), given[indices] * _expected_weights(pairs, step), rtol=1e-5)
  # The weights differ from 1: the test above could tell a stream that forgot them.
  assert np.ptp(_expected_weights(pairs, 3)) > 0.5
  np.testing.assert_allclose(diagnostics.batch_weights(pairs, np.stack([pairs.batch_indices(3)])),
                             _expected_weights(pairs, 3)[None], rtol=1e-12)


def test_replica_slices_carry_the_weights_of_the_global_batch():
  x, y = _data()
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(radius=0.8), seed=SEED, start_step=0,
                                         inclusion_weights="self_normalized",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)
  slices = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher.per_replica(context)))
  for step in range(2):
    first, second = next(slices), next(slices)
    np.testing.assert_array_equal(np.concatenate([first[0], second[0]]), x[batcher.batch_indices(step)])
    np.testing.assert_allclose(np.concatenate([first[2], second[2]]), _expected_weights(batcher, step), rtol=1e-5)


@pytest.mark.slow
def test_fit_minimises_the_weighted_loss():
  x, y = _data()

  def model():
    keras.utils.set_random_seed(0)
    built = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    built.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return built

  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.VanillaPDS(radius=0.8), seed=SEED, start_step=0,
                                         inclusion_weights="self_normalized",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  trained = model()
  trained.fit(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher), steps_per_epoch=3, verbose=0)
  reference = model()
  for step in range(3):
    indices = batcher.batch_indices(step)
    reference.train_on_batch(x[indices], y[indices], sample_weight=_expected_weights(batcher, step))
  unweighted = model()
  for step in range(3):
    unweighted.train_on_batch(x[batcher.batch_indices(step)], y[batcher.batch_indices(step)])
  for got, expected, other in zip(trained.get_weights(), reference.get_weights(), unweighted.get_weights()):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
  assert not all(np.allclose(got, other, atol=1e-4) for got, other in zip(trained.get_weights(),
                                                                            unweighted.get_weights()))


@pytest.mark.slow
def test_a_refresh_estimates_the_probabilities_on_its_features(tmp_path):
  x, y = _data()
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
  model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  space = tf_repulsive.ModelSpace(model, tf_repulsive.GradientFeatures(), refresh_every=2, directory=tmp_path,
                                  verbose=False)
  sampler = tf_repulsive.VanillaPDS(radius="auto")
  batcher = tf_repulsive.repulsive_batch(BATCH, sampler, seed=SEED, start_step=0, features=space,
                                         inclusion_weights="self_normalized",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  for step in range(4):
    if step == 2:
      model.train_on_batch(x, y)  # the model moves between the refreshes
    batcher.refresh_features(step)
    _, _, weights = next(stream)
    # The estimate of a drawer built on this refresh's features (by the public contract, one step
    # per draw as a model-space stream draws).
    drawer = sampler.build(tf_repulsive.SamplingContext(
        features=tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y, verbose=False),
        labels=None, batch_size=BATCH, distance_cache_bytes=0, max_steps_per_draw=1))
    key = tf.constant([SEED, _inclusion_weights.INCLUSION_SALT], tf.int64)  # pylint: disable=protected-access
    np.testing.assert_allclose(batcher.inclusion_probabilities, drawer.inclusion_probabilities(key, False),
                               rtol=1e-6)
    np.testing.assert_allclose(weights.numpy(), _expected_weights(batcher, step), rtol=1e-5)
    if step == 0:
      first = batcher.inclusion_probabilities
  assert not np.allclose(first, batcher.inclusion_probabilities)


def test_elements_and_samplers_that_cannot_be_weighted_are_refused_before_reading():
  x, y = _data()
  vanilla = tf_repulsive.VanillaPDS(radius=0.8)
  with pytest.raises(TypeError, match="inclusion_weights"):
    tf_repulsive.repulsive_batch(BATCH, vanilla, inclusion_weights=1)
  with pytest.raises(TypeError, match="'unbiased'.*'self_normalized'"):
    tf_repulsive.repulsive_batch(BATCH, vanilla, inclusion_weights=True)
  for elements in ({"x": x, "label": y}, (x,), x, (x, y, np.ones(NUM_POINTS, np.int64)), (x, y, y, y)):
    batcher = tf_repulsive.repulsive_batch(BATCH, vanilla, seed=SEED, start_step=0, inclusion_weights="self_normalized")
    with pytest.raises(TypeError, match="inclusion_weights (hands|multiplies)"):
      tf.data.Dataset.from_tensor_slices(elements).apply(batcher)
  for sampler in (tf_repulsive.AnnealPDS(), tf_repulsive.KDPP()):
    batcher = tf_repulsive.repulsive_batch(BATCH, sampler, seed=SEED, start_step=0, inclusion_weights="self_normalized",
                                           options=tf_repulsive.BatcherOptions(verbose=False))
    with pytest.raises(ValueError, match=type(sampler).__name__):
      tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)


def test_weighted_variance_split_uses_the_weighted_mean():
  rng = np.random.default_rng(0)
  gradients = rng.normal(size=(40, 3))
  batches = np.stack([rng.choice(40, 5, replace=False) for _ in range(30)])
  weights = rng.uniform(0.5, 1.5, size=batches.shape)
  result = diagnostics.variance_split(gradients, {"plain": batches, "weighted": batches},
                                      weights={"weighted": weights})
  means = (gradients[batches] * weights[..., None]).mean(axis=1)
  total = np.sum((means - means.mean(axis=0))**2) / (len(batches) - 1)
  np.testing.assert_allclose(result.reports["weighted"].total, total, rtol=1e-12)
  assert np.isnan(result.reports["weighted"].intensity) and not np.isnan(result.reports["plain"].intensity)
  ones = diagnostics.variance_split(gradients, {"plain": batches}, weights={"plain": np.ones(batches.shape)})
  np.testing.assert_allclose(ones.reports["plain"].total, result.reports["plain"].total, rtol=1e-12)
  with pytest.raises(ValueError, match="names no sampler"):
    diagnostics.variance_split(gradients, {"plain": batches}, weights={"other": weights})
  with pytest.raises(ValueError, match="shape"):
    diagnostics.variance_split(gradients, {"plain": batches}, weights={"plain": weights[:, :2]})
