"""The importance samplers: the law of their batches, their weights, their refusals; the alias table; LossFeatures."""

import itertools

import hypothesis
from hypothesis import strategies as st
import keras
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _alias
from tf_repulsive import diagnostics

# Six points on a line: their norms are the scores, and at radius 1.1 neighbours up to 4.0
# conflict, while every pair of points leaves a third free (no batch of three needs the fill).
POINTS = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 6.0])
RADIUS = 1.1
MIXING = 0.2
BATCH = 3
STEPS = 8000
SEED = 5


def _dart_probabilities():
  scores = np.abs(POINTS)
  return (1 - MIXING) * scores / scores.sum() + MIXING / len(POINTS)


def _set_law(radius):
  """Each k-set's probability under sequential dart throwing with darts ∝ p and disks of `radius` (0: none)."""
  p = _dart_probabilities()
  law = {}
  for subset in itertools.combinations(range(len(POINTS)), BATCH):
    total = 0.0
    for order in itertools.permutations(subset):
      probability, taken = 1.0, []
      for point in order:
        free = [i for i in range(len(POINTS))
                if all(i != j and abs(POINTS[i] - POINTS[j]) >= radius for j in taken)]
        if point not in free:
          probability = 0.0
          break
        probability *= p[point] / p[free].sum()
        taken.append(point)
      total += probability
    law[subset] = total
  return law


def _batcher(sampler, inclusion_weights=False):
  batcher = tf_repulsive.repulsive_batch(BATCH, sampler, seed=SEED, start_step=0, inclusion_weights=inclusion_weights,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  x = POINTS[:, None].astype(np.float32)
  tf.data.Dataset.from_tensor_slices((x, np.zeros(len(POINTS), np.int64))).apply(batcher)
  return batcher


def _drawn_sets(batcher):
  per_draw = batcher.drawer.steps_per_draw
  draws = [batcher._built.draw_once(tf.constant(first, tf.int64))[0].numpy()  # pylint: disable=protected-access
           for first in range(0, STEPS, per_draw)]
  return np.concatenate(draws)


@pytest.mark.slow
@pytest.mark.parametrize("sampler, radius", [
    (tf_repulsive.Importance(mixing=MIXING), 0.0),
    (tf_repulsive.ImportancePDS(radius=RADIUS, mixing=MIXING), RADIUS),
], ids=["importance", "importance_pds"])
def test_batches_follow_sequential_darts_in_proportion_to_the_score(sampler, radius):
  batcher = _batcher(sampler)
  batches = _drawn_sets(batcher)
  assert np.all(batcher.fallback_counts(range(64)) == 0)
  assert all(len(set(batch)) == BATCH for batch in batches)
  law = _set_law(radius)
  np.testing.assert_allclose(sum(law.values()), 1.0)
  counts = {subset: 0 for subset in law}
  for batch in batches:
    counts[tuple(sorted(batch))] += 1
  possible = [subset for subset in law if law[subset] > 0]
  # Sets the disks forbid never occur.
  assert all(counts[subset] == 0 for subset in law if law[subset] == 0)
  observed = np.array([counts[subset] for subset in possible])
  expected = np.array([law[subset] for subset in possible]) * len(batches)
  assert scipy.stats.chisquare(observed, expected).pvalue > 1e-3
  # What the test can tell: the same batches against equal probabilities for the possible sets.
  uniform = np.full(len(possible), len(batches) / len(possible))
  assert scipy.stats.chisquare(observed, uniform).pvalue < 1e-12
  # The first element of a batch is the first dart: drawn from the dart probabilities.
  first = np.bincount(batches[:, 0], minlength=len(POINTS))
  assert scipy.stats.chisquare(first, _dart_probabilities() * len(batches)).pvalue > 1e-3


def test_the_irreducible_loss_is_taken_off_each_score():
  # Scores 0.5 ... 6 less these: reducible 0, 1, 0, 2, 4, 0 (the last would be negative).
  irreducible = np.array([0.5, 0.0, 2.0, 1.0, 0.0, 10.0])
  batcher = _batcher(tf_repulsive.Importance(mixing=MIXING, irreducible_loss=irreducible))
  first = np.bincount(_drawn_sets(batcher)[:, 0], minlength=len(POINTS))
  reducible = np.maximum(np.abs(POINTS) - irreducible, 0)
  expected = (1 - MIXING) * reducible / reducible.sum() + MIXING / len(POINTS)
  assert scipy.stats.chisquare(first, expected * first.sum()).pvalue > 1e-3
  assert scipy.stats.chisquare(first, _dart_probabilities() * first.sum()).pvalue < 1e-12
  with pytest.raises(ValueError, match="irreducible_loss.*one per element"):
    _batcher(tf_repulsive.Importance(irreducible_loss=np.zeros(len(POINTS) + 1)))
  with pytest.raises(ValueError, match="irreducible_loss"):
    tf_repulsive.ImportancePDS(irreducible_loss=[[1.0]])


@pytest.mark.parametrize("sampler, radius", [
    (tf_repulsive.Importance(mixing=MIXING), 0.0),
    (tf_repulsive.ImportancePDS(radius=RADIUS, mixing=MIXING), RADIUS),
], ids=["importance", "importance_pds"])
def test_inclusion_weights_are_the_inverse_of_each_elements_probability_of_being_in_a_batch(sampler, radius):
  batcher = _batcher(sampler, inclusion_weights="self_normalized")
  law = _set_law(radius)
  exact = np.zeros(len(POINTS))
  for subset, probability in law.items():
    exact[list(subset)] += probability
  np.testing.assert_allclose(batcher.inclusion_probabilities, exact, atol=0.02)
  assert np.abs(exact - BATCH / len(POINTS)).max() > 0.1  # not the uniform law


def test_the_score_of_a_batch_is_biased_towards_large_norms_and_the_weights_remove_the_bias():
  rng = np.random.default_rng(0)
  features = np.exp(rng.normal(size=[400, 1])).astype(np.float32)
  batcher = tf_repulsive.repulsive_batch(16, tf_repulsive.Importance(mixing=0.3), seed=SEED, start_step=0,
                                         inclusion_weights="self_normalized",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  tf.data.Dataset.from_tensor_slices((features, np.zeros(400, np.int64))).apply(batcher)
  batches = diagnostics.draw_batches(batcher, 300)
  values = features[batches, 0]
  weights = 1.0 / batcher.inclusion_probabilities[batches]
  plain = values.mean()
  weighted = np.sum(values * weights) / np.sum(weights)
  assert plain > 1.3 * features.mean()
  assert abs(weighted - features.mean()) < 0.05 * features.mean()


@pytest.mark.parametrize("mixing, error", [
    (0.0, ValueError), (1.5, ValueError), (-0.1, ValueError), ("0.2", TypeError), (float("nan"), ValueError),
])
def test_a_mixing_outside_0_to_1_is_refused_naming_it(mixing, error):
  for sampler in (tf_repulsive.Importance, tf_repulsive.ImportancePDS):
    with pytest.raises(error, match="mixing"):
      sampler(mixing=mixing)


def test_features_without_finite_norms_are_refused():
  features = np.ones([20, 2], np.float32)
  features[3, 1] = np.inf
  batcher = tf_repulsive.repulsive_batch(4, tf_repulsive.Importance(), seed=0, start_step=0)
  with pytest.raises(ValueError, match="NaN or infinite"):
    tf.data.Dataset.from_tensor_slices(features).apply(batcher)


@pytest.mark.slow
def test_mixing_one_draws_every_element_alike():
  features = np.exp(np.linspace(-3, 3, 50))[:, None].astype(np.float32)
  batcher = tf_repulsive.repulsive_batch(5, tf_repulsive.Importance(mixing=1.0), seed=SEED, start_step=0)
  tf.data.Dataset.from_tensor_slices(features).apply(batcher)
  counts = np.bincount(diagnostics.draw_batches(batcher, 2000).ravel(), minlength=50)
  assert scipy.stats.chisquare(counts).pvalue > 1e-3


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(st.lists(st.one_of(st.integers(0, 3).map(float), st.floats(0.0, 1e3), st.floats(1e-6, 1e-3)),
                           min_size=1, max_size=40).filter(lambda weights: sum(weights) > 0))
def test_the_alias_table_hits_each_point_in_proportion_to_its_weight(weights):
  weights = np.array(weights)
  threshold, alias = _alias.alias_table(weights)
  assert np.all((threshold >= 0) & (threshold <= 1))
  assert np.all((alias >= 0) & (alias < len(weights)))
  np.testing.assert_allclose(_alias.masses(threshold, alias), weights / weights.sum(), atol=1e-12)


def test_darts_of_the_alias_table_in_the_graph_follow_the_weights():
  weights = np.array([0.0, 1.0, 2.0, 3.0, 10.0, 0.5])
  features = np.ones([6, 1], np.float32)
  plan = tf_repulsive._dart_throwing.DartPlan(  # pylint: disable=protected-access
      point_radius=None, pi=None, mingling_values=None, num_mingling_values=0, max_darts=256, point_weights=weights)
  thrower = tf_repulsive._dart_throwing.DartThrower(features, plan, 1)  # pylint: disable=protected-access
  key = tf.constant([3, 4], tf.int64)
  draws = np.concatenate([thrower.draw(key, tf.constant(step, tf.int64))[0].numpy().ravel()
                          for step in range(0, 6000, thrower.steps_per_draw)])
  counts = np.bincount(draws, minlength=6)
  assert counts[0] == 0
  positive = weights > 0
  assert scipy.stats.chisquare(counts[positive], weights[positive] / weights.sum() * len(draws)).pvalue > 1e-3


def test_a_plan_takes_darts_by_mingling_value_or_by_weight_not_both():
  with pytest.raises(ValueError, match="not both"):
    tf_repulsive._dart_throwing.DartPlan(  # pylint: disable=protected-access
        point_radius=None, pi=lambda h, n: h, mingling_values=np.zeros(3, np.int64), num_mingling_values=1,
        max_darts=16, point_weights=np.ones(3))


@pytest.mark.parametrize("activation", ["softmax", "linear", "sigmoid"])
def test_loss_features_are_each_elements_cross_entropy(activation):
  rng = np.random.default_rng(1)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation=activation)])
  x = rng.normal(size=[9, 3]).astype(np.float32)
  outputs = model(x).numpy()
  if activation == "sigmoid":
    y = rng.integers(0, 2, size=[9, 4])
    expected = -np.sum(y * np.log(outputs) + (1 - y) * np.log(1 - outputs), axis=1)
  else:
    y = rng.integers(0, 4, size=9)
    logits = outputs if activation == "linear" else np.log(outputs)
    expected = -(logits[np.arange(9), y] - np.log(np.sum(np.exp(logits), axis=1)))
  features = tf_repulsive.compute_features(tf_repulsive.LossFeatures(), model, x, y, verbose=False)
  assert features.shape == (9, 1)
  np.testing.assert_allclose(features[:, 0], expected, rtol=1e-4, atol=1e-5)


def test_loss_features_refuse_a_model_without_a_cross_entropy_output():
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu")])
  with pytest.raises(TypeError, match="LossFeatures needs a model whose last layer"):
    tf_repulsive.compute_features(tf_repulsive.LossFeatures(), model, np.ones([2, 3], np.float32), np.zeros(2, int))


@pytest.mark.slow
def test_marginals_draw_each_element_as_often_as_the_disks_with_no_repulsion():
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.normal(size=[300, 2]) * 0.3, rng.normal(size=[100, 2]) * 3]).astype(np.float32)
  y = np.zeros(400, np.int64)
  disks = tf_repulsive.VanillaPDS(radius=0.75)
  options = tf_repulsive.BatcherOptions(verbose=False)
  reference = tf_repulsive.repulsive_batch(10, disks, seed=1, start_step=0, inclusion_weights="self_normalized",
                                           options=options)
  tf.data.Dataset.from_tensor_slices((x, y)).apply(reference)
  marginals = tf_repulsive.repulsive_batch(10, tf_repulsive.Marginals(disks), seed=1, start_step=0, options=options)
  tf.data.Dataset.from_tensor_slices((x, y)).apply(marginals)
  per_draw = marginals.drawer.steps_per_draw
  batches = np.concatenate([marginals._built.draw_once(tf.constant(first, tf.int64))[0].numpy()  # pylint: disable=protected-access
                            for first in range(0, 8000, per_draw)])
  frequencies = np.bincount(batches.ravel(), minlength=400) / len(batches)
  probabilities = reference.inclusion_probabilities
  # The dense cluster is drawn far less than uniform under the disks, and as little here.
  assert probabilities[:300].mean() < 0.5 * 10 / 400
  np.testing.assert_allclose(frequencies[:300].mean(), probabilities[:300].mean(), rtol=0.03)
  np.testing.assert_allclose(frequencies[300:].mean(), probabilities[300:].mean(), rtol=0.03)
  assert np.corrcoef(frequencies, probabilities)[0, 1] > 0.98
  # No repulsion: pairs closer than the radius occur, which the disks never give.
  def close_pairs(batch):
    distances = np.linalg.norm(x[batch][:, None] - x[batch][None], axis=-1)
    return np.sum(np.triu(distances < 0.75, 1))
  assert sum(close_pairs(batch) for batch in batches[:200]) > 20
  assert sum(close_pairs(reference.batch_indices(step)) for step in range(20)) == 0


def test_marginals_refuse_a_sampler_without_inclusion_probabilities():
  batcher = tf_repulsive.repulsive_batch(4, tf_repulsive.Marginals(tf_repulsive.AnnealPDS()), seed=0, start_step=0)
  x, y = np.random.default_rng(0).normal(size=[60, 2]).astype(np.float32), np.arange(60) % 3
  with pytest.raises(ValueError, match="Marginals needs each element's probability"):
    tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  with pytest.raises(TypeError, match="`sampler` must be a tf_repulsive.Sampler"):
    tf_repulsive.Marginals("vanilla_pds")
