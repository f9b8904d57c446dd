"""Theorem-1 diagnostics: estimators against closed forms, per-example gradients by hand, g(r)."""

import itertools
import pathlib
import subprocess
import sys
import textwrap
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from tf_repulsive import diagnostics

# One process runs the module, so that its module fixtures are computed once.
pytestmark = pytest.mark.xdist_group("test_diagnostics")

_K = 20
_DRAWS = 200


def _linear_softmax(seed=0):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])


_XENT = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.fixture(scope="module")
def digit_draws(digits):
  """Uniform and Vanilla PDS draws (k = 20, 200 batches each) over the digits, and the radius."""
  x, y = digits
  draws = {}
  for name, sampler in (("uniform", tf_repulsive.Uniform()), ("vanilla", tf_repulsive.VanillaPDS())):
    batcher = tf_repulsive.repulsive_batch(_K, sampler, seed=3)
    tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
    draws[name] = diagnostics.draw_batches(batcher, _DRAWS)
    radius = batcher.stats().report.get("radius")
  return draws, radius


def test_draw_batches_are_the_batch_indices_of_their_steps_from_any_step(digits):
  # One draw covers a block of steps: a range that starts and ends inside blocks still gives each
  # step's own batch.
  x, y = digits
  batcher = tf_repulsive.repulsive_batch(_K, tf_repulsive.VanillaPDS(), seed=3)
  tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  block = batcher.drawer.steps_per_draw
  assert block > 1
  start, count = block // 2 + 1, 2 * block + 3
  np.testing.assert_array_equal(diagnostics.draw_batches(batcher, count, start_step=start),
                                [batcher.batch_indices(step) for step in range(start, start + count)])
  # On a model's features, only the steps of the refresh installed.
  model = _linear_softmax()
  space = tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(), refresh_every=4, verbose=False)
  refreshed = tf_repulsive.repulsive_batch(_K, tf_repulsive.Uniform(), seed=3, start_step=0, features=space,
                                           options=tf_repulsive.BatcherOptions(verbose=False))
  tf.data.Dataset.from_tensor_slices((x, y)).apply(refreshed)
  refreshed.refresh_features(0)
  np.testing.assert_array_equal(diagnostics.draw_batches(refreshed, 3, start_step=1),
                                [refreshed.batch_indices(step) for step in (1, 2, 3)])
  with pytest.raises(ValueError, match="refresh_features"):
    diagnostics.draw_batches(refreshed, 2, start_step=3)


@pytest.fixture(scope="module")
def digit_gradients(digits):
  x, y = digits
  return diagnostics.per_example_gradients(_linear_softmax(), _XENT, x, y)


# ----------------------------------------------------------------------------- variance estimators


def test_empirical_uniform_matches_closed_form(digit_gradients, digit_draws):
  draws, _ = digit_draws
  result = diagnostics.variance_split(digit_gradients, {"uniform": draws["uniform"]})
  report, exact = result.reports["uniform"], result.uniform_exact
  # The standard errors are informative (not so wide that any estimate passes) ...
  assert 0.0 < report.total_se < 0.15 * exact.total
  assert 0.0 < report.intensity_se < 0.05 * exact.intensity
  # ... and the estimates agree with the closed forms within a few of them.
  assert abs(report.total - exact.total) < 4 * report.total_se
  assert abs(report.intensity - exact.intensity) < 4 * report.intensity_se
  assert abs(report.pair - exact.pair) < 4 * report.pair_se
  assert report.total == pytest.approx(report.intensity + report.pair, rel=1e-12)
  assert report.bias < 4 * np.sqrt(report.total / _DRAWS)


def test_closed_form_uniform_by_enumeration():
  """All C(N, k) subsets once each: the exact uniform distribution, so the sample estimates are
  the population values times M / (M - 1)."""
  gradients = np.random.default_rng(1).normal(size=(7, 4)) + 0.3
  batches = np.array(list(itertools.combinations(range(7), 3)))
  m = len(batches)
  result = diagnostics.variance_split(gradients, {"all": batches})
  report, exact = result.reports["all"], result.uniform_exact
  means = gradients[batches].mean(axis=1)
  assert exact.total == pytest.approx(np.sum(means.var(axis=0)), rel=1e-12)
  assert report.total * (m - 1) / m == pytest.approx(exact.total, rel=1e-12)
  assert report.intensity * (m - 1) / m == pytest.approx(exact.intensity, rel=1e-12)
  num, k = 7, 3
  assert exact.pair == pytest.approx(
      -(num - k) / (k * num**2 * (num - 1))
      * (np.sum(gradients.sum(axis=0)**2) - np.sum(gradients**2)), rel=1e-10)
  assert report.bias == 0.0


def test_theorem1_split_on_a_repulsive_design():
  """A non-uniform, repulsive design (no two neighbours on a line together), listed with
  multiplicities: total, intensity and pair against brute-force p_i, p_ij and Theorem 1."""
  rng = np.random.default_rng(2)
  num, k = 8, 3
  # Neighbouring points have aligned gradients, as Remark 3 assumes.
  gradients = np.cumsum(rng.normal(size=(num, 5)), axis=0) * 0.3 + rng.normal(size=5)
  gradients[0] += 3.0  # the most frequent point stands out, so the design's bias is clear
  design = [b for b in itertools.combinations(range(num), k) if np.all(np.diff(b) > 1)]
  batches = np.array([b for i, b in enumerate(design) for _ in range(1 + i % 3)])
  m = len(batches)
  z = np.zeros((m, num))
  np.put_along_axis(z, batches, 1.0, axis=1)
  p = z.mean(axis=0)
  p2 = z.T @ z / m
  dots = gradients @ gradients.T
  off = ~np.eye(num, dtype=bool)
  intensity = np.sum(p * (1 - p) * np.diag(dots)) / k**2
  pair = np.sum(((p2 - np.outer(p, p)) * dots)[off]) / k**2
  means = gradients[batches].mean(axis=1)
  assert np.sum(means.var(axis=0)) == pytest.approx(intensity + pair, rel=1e-10)  # Theorem 1

  report = diagnostics.variance_split(gradients, {"design": batches}).reports["design"]
  assert report.total * (m - 1) / m == pytest.approx(intensity + pair, rel=1e-10)
  assert report.intensity * (m - 1) / m == pytest.approx(intensity, rel=1e-10)
  assert report.pair * (m - 1) / m == pytest.approx(pair, rel=1e-10)
  assert pair < 0
  # The mean of the listed batches is E[Ĝ] exactly, so the debiased bias² is short by total/M.
  expected_bias_sq = np.sum((p @ gradients / k - gradients.mean(axis=0))**2)
  assert expected_bias_sq > report.total / m
  assert report.bias**2 + report.total / m == pytest.approx(expected_bias_sq, rel=1e-10)
  assert report.relative_bias == pytest.approx(report.bias / np.linalg.norm(gradients.mean(axis=0)))


def test_estimates_unbiased_and_standard_errors_calibrated():
  """400 replicates of 10 uniform draws: the replicate means sit on the closed forms (the plain
  plug-in p(1 - p) would be 10% low, z ≈ -20) and the jackknife s.e. matches the spread."""
  rng = np.random.default_rng(0)
  num, k, draws, replicates = 40, 5, 10, 400
  gradients = rng.normal(size=(num, 3)) + 0.5
  exact = diagnostics.uniform_variance(gradients, k)
  reports = [
      diagnostics.variance_split(
          gradients, {"u": np.stack([rng.permutation(num)[:k] for _ in range(draws)])}).reports["u"]
      for _ in range(replicates)]
  for field in ("total", "intensity", "pair"):
    values = np.array([getattr(report, field) for report in reports])
    spread = values.std()
    assert abs(values.mean() - getattr(exact, field)) < 4 * spread / np.sqrt(replicates), field
    if field != "pair":
      mean_se = np.mean([getattr(report, field + "_se") for report in reports])
      assert 0.8 < mean_se / spread < 1.25, field


def test_vanilla_pds_reduces_variance_of_linear_model(digit_gradients, digit_draws):
  """On the digits the disk is wide enough to matter: the pair term is clearly negative."""
  draws, radius = digit_draws
  result = diagnostics.variance_split(digit_gradients, draws, radii={"vanilla": radius})
  vanilla = result.reports["vanilla"]
  assert vanilla.radius == radius and result.reports["uniform"].radius is None
  assert vanilla.pair + 4 * vanilla.pair_se < result.uniform_exact.pair
  assert vanilla.num_distinct_batches == _DRAWS
  table = str(result)
  assert "uniform (exact)" in table and "vanilla" in table and "total/unif" in table


@pytest.mark.slow
def test_gradient_variance_end_to_end(digits):
  x, y = digits[0][:300], digits[1][:300]
  model = _linear_softmax()
  result = diagnostics.gradient_variance(
      model, _XENT, x, y, {"uniform": tf_repulsive.Uniform, "easy": tf_repulsive.EasyPDS()},
      batch_size=10, num_batches=5, variables="last_layer", start_step=7)
  assert list(result.reports) == ["uniform", "easy"]
  assert result.num_examples == 300 and result.batch_size == 10
  assert result.reports["easy"].radius > 0 and result.reports["uniform"].radius is None
  assert "650 parameters" in result.gradient_space and "exact" in result.gradient_space
  direct = diagnostics.uniform_variance(diagnostics.per_example_gradients(model, _XENT, x, y), 10)
  assert result.uniform_exact.total == pytest.approx(direct.total, rel=1e-6)


@pytest.mark.slow
def test_gradient_variance_with_inclusion_weights_is_the_weighted_split_of_the_same_draws(digits):
  x, y = digits[0][:300], digits[1][:300]
  model = _linear_softmax()
  samplers = {"uniform": tf_repulsive.Uniform, "vanilla": tf_repulsive.VanillaPDS(radius="auto")}
  weighted = diagnostics.gradient_variance(model, _XENT, x, y, samplers, batch_size=10, num_batches=6,
                                           variables="last_layer", inclusion_weights="self_normalized")
  plain = diagnostics.gradient_variance(model, _XENT, x, y, samplers, batch_size=10, num_batches=6,
                                        variables="last_layer")
  gradients = diagnostics.per_example_gradients(model, _XENT, x, y, variables="last_layer")
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.VanillaPDS(radius="auto"), seed=0, start_step=0,
                                         inclusion_weights="self_normalized",
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  tf.data.Dataset.from_tensor_slices((x.reshape(len(x), -1), y)).apply(batcher)
  draws = weighted.batches["vanilla"]
  np.testing.assert_array_equal(draws, plain.batches["vanilla"])
  expected = diagnostics.variance_split(gradients, {"vanilla": draws},
                                        weights={"vanilla": diagnostics.batch_weights(batcher, draws)})
  assert weighted.reports["vanilla"].total == pytest.approx(expected.reports["vanilla"].total, rel=1e-9)
  assert weighted.reports["vanilla"].total != pytest.approx(plain.reports["vanilla"].total, rel=1e-3)
  # Uniform batches weigh every element 1: the weighted split is the plain one.
  assert weighted.reports["uniform"].total == pytest.approx(plain.reports["uniform"].total, rel=1e-9)
  assert np.isnan(weighted.reports["vanilla"].intensity)


def test_gradient_variance_of_a_regression_model_with_the_target_mingling(digits):
  x = digits[0][:300]
  y = (x[:, :8].sum(axis=1) + (x[:, 8] > 0.5)).astype(np.float32)  # a real target with a jump
  model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(1)])
  loss = lambda target, output: keras.ops.square(output[..., 0] - target)  # noqa: E731
  result = diagnostics.gradient_variance(
      model, loss, x, y, {"uniform": tf_repulsive.Uniform, "easy": tf_repulsive.EasyPDS(target_gap_quantile=0.9)},
      batch_size=10, num_batches=5, start_step=7)
  assert result.reports["easy"].radius > 0 and np.isfinite(result.reports["easy"].total)


# ----------------------------------------------------------------------------- per-example gradients


def test_per_example_gradients_of_linear_squared_loss():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(9, 3)).astype(np.float32)
  y = rng.normal(size=(9, 1)).astype(np.float32)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, bias_initializer="ones")])
  kernel, bias = (np.asarray(v) for v in model.trainable_variables)
  residual = x @ kernel + bias - y  # [9, 1]; loss_i = residual_i²
  expected = np.concatenate([2 * residual * x, 2 * residual], axis=1)
  got = diagnostics.per_example_gradients(model, keras.losses.MeanSquaredError(), x, y, chunk_size=4)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_last_layer_and_explicit_variables_select_columns():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(6, 4)).astype(np.float32)
  y = rng.integers(0, 3, 6)
  keras.utils.set_random_seed(1)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="tanh"),
                            keras.layers.Dropout(0.5), keras.layers.Dense(3)])
  full = diagnostics.per_example_gradients(model, _XENT, x, y)
  assert full.shape == (6, 4 * 5 + 5 + 5 * 3 + 3)
  last = diagnostics.per_example_gradients(model, _XENT, x, y, variables="last_layer")
  np.testing.assert_allclose(last, full[:, -18:], rtol=1e-5, atol=1e-7)
  first_kernel = diagnostics.per_example_gradients(model, _XENT, x, y,
                                                   variables=[model.layers[0].kernel])
  np.testing.assert_allclose(first_kernel, full[:, :20], rtol=1e-5, atol=1e-7)
  # training=False: dropout is off, so repeated calls agree exactly.
  np.testing.assert_array_equal(full, diagnostics.per_example_gradients(model, _XENT, x, y))


def test_sketch_preserves_the_variance_split(digit_gradients, digit_draws, digits):
  x, y = digits
  draws, _ = digit_draws
  sketched = diagnostics.per_example_gradients(_linear_softmax(), _XENT, x, y, sketch_dim=2048, seed=5)
  assert sketched.shape == (len(x), 2048)
  exact = diagnostics.variance_split(digit_gradients, draws)
  approx = diagnostics.variance_split(sketched, draws)
  tolerance = 3 * np.sqrt(2 / 2048)
  for name in draws:
    for field in ("total", "intensity"):
      assert getattr(approx.reports[name], field) == pytest.approx(
          getattr(exact.reports[name], field), rel=tolerance), (name, field)
  assert approx.uniform_exact.total == pytest.approx(exact.uniform_exact.total, rel=tolerance)
  # Row norms are preserved on average; a different seed is a different sketch.
  ratio = np.sum(sketched**2, axis=1) / np.sum(digit_gradients**2, axis=1)
  assert abs(ratio.mean() - 1) < 0.02
  other = diagnostics.per_example_gradients(_linear_softmax(), _XENT, x[:5], y[:5], sketch_dim=2048, seed=6)
  assert not np.allclose(other, sketched[:5])


# ----------------------------------------------------------------------------- pair correlation


def test_pair_correlation_by_hand():
  line = np.arange(4.0)[:, None]  # reference pairs: distance 1 (3 pairs), 2 (2), 3 (1)
  edges = [0.5, 1.5, 2.5, 3.5]
  result = diagnostics.pair_correlation(line, [[0, 2], [1, 3]], edges)
  np.testing.assert_allclose(result.g, [0.0, 3.0, 0.0])
  np.testing.assert_array_equal(result.counts, [0, 2, 0])
  np.testing.assert_allclose(result.bin_centres, [1.0, 2.0, 3.0])
  # Marginal reference: inclusion counts (2, 1, 1, 0) weight the pairs: distance 1 has weight
  # 2 + 1 of 5, distance 2 has 2 of 5, distance 3 none.
  marginal = diagnostics.pair_correlation(line, [[0, 1], [0, 2]], edges, reference="marginal")
  np.testing.assert_allclose(marginal.g, [5 / 6, 5 / 4, np.nan])
  assert marginal.num_pairs == 2


def test_pair_correlation_vanilla_empty_below_radius(digits, digit_draws):
  draws, radius = digit_draws
  edges = radius * np.array([0.0, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0, 4.0])
  below = edges[1:] <= radius
  vanilla = diagnostics.pair_correlation(digits[0], draws["vanilla"], edges)
  uniform = diagnostics.pair_correlation(digits[0], draws["uniform"], edges)
  assert np.all(vanilla.g[below] == 0) and np.all(vanilla.counts[below] == 0)
  # Uniform batches do hold such close pairs, about as often as random pairs of the dataset,
  # wherever random pairs are frequent enough to expect some.
  expected = uniform.reference_fraction * uniform.num_pairs
  assert np.sum(below & (expected >= 10)) >= 3
  assert np.all(uniform.g[below & (expected >= 10)] > 0)
  close = below & (uniform.counts >= 30)
  assert np.any(close)
  assert np.all(np.abs(uniform.g[close] - 1) < 5 / np.sqrt(uniform.counts[close]))
  assert uniform.num_pairs == _DRAWS * _K * (_K - 1) // 2


def test_pair_correlation_uniform_near_one(digits, digit_draws):
  draws, _ = digit_draws
  for reference in ("uniform", "marginal"):
    result = diagnostics.pair_correlation(digits[0], draws["uniform"], 25, reference=reference)
    enough = result.counts >= 100
    assert enough.sum() >= 8
    assert abs(np.mean(result.g[enough]) - 1) < 0.05, reference
    assert np.all(np.abs(result.g[enough] - 1) < 5 / np.sqrt(result.counts[enough])), reference
  # A seeded subsample of reference pairs estimates the same reference histogram.
  full = diagnostics.pair_correlation(digits[0], draws["uniform"], 25)
  sub = diagnostics.pair_correlation(digits[0], draws["uniform"], full.bin_edges,
                                     max_reference_pairs=100_000, seed=1)
  np.testing.assert_allclose(sub.reference_fraction, full.reference_fraction, atol=3e-3)
  full = diagnostics.pair_correlation(digits[0], draws["vanilla"], 25, reference="marginal")
  sub = diagnostics.pair_correlation(digits[0], draws["vanilla"], full.bin_edges, reference="marginal",
                                     max_reference_pairs=100_000, seed=1)
  np.testing.assert_allclose(sub.reference_fraction, full.reference_fraction, atol=3e-3)


# ----------------------------------------------------------------------------- bad arguments


@pytest.fixture(scope="module")
def tiny():
  """Small arguments the bad calls below spoil one at a time."""
  keras.utils.set_random_seed(0)
  return types.SimpleNamespace(
      g=np.ones((5, 2)), b=np.array([[0, 1], [2, 3], [1, 4]]),
      model=keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]),
      x=np.zeros((5, 2), np.float32), y=np.zeros((5, 1), np.float32), mse=keras.losses.MeanSquaredError())


_uniform = diagnostics.uniform_variance
_split = diagnostics.variance_split
_g_of_r = diagnostics.pair_correlation


def _grads(t, **kwargs):
  return diagnostics.per_example_gradients(t.model, t.mse, t.x, t.y, **kwargs)


def _variance(t, samplers, **kwargs):
  return diagnostics.gradient_variance(t.model, t.mse, t.x, t.y, samplers, 2, **kwargs)


_BAD_CALLS = {
    "batch_size zero": (lambda t: _uniform(t.g, 0), ValueError, "batch_size"),
    "batch_size > N": (lambda t: _uniform(t.g, 6), ValueError, "batch_size"),
    "batch_size float": (lambda t: _uniform(t.g, 2.0), TypeError, "batch_size"),
    "gradients 1-d": (lambda t: _uniform(np.ones(5), 2), ValueError, "gradients"),
    "gradients nan": (lambda t: _uniform(np.full((5, 2), np.nan), 2), ValueError, "gradients"),
    "batches list": (lambda t: _split(t.g, [[0, 1]]), TypeError, "batches"),
    "batches empty": (lambda t: _split(t.g, {}), ValueError, "batches"),
    "two draws": (lambda t: _split(t.g, {"a": [[0, 1], [2, 3]]}), ValueError, "at least 3"),
    "index out of range": (lambda t: _split(t.g, {"a": [[0, 1], [2, 3], [4, 5]]}), ValueError, "outside"),
    "repeated index": (lambda t: _split(t.g, {"a": [[0, 0], [2, 3], [1, 4]]}), ValueError, "repeated"),
    "float indices": (lambda t: _split(t.g, {"a": [[0.0, 1.0]] * 3}), TypeError, "batches"),
    "mixed batch sizes": (lambda t: _split(t.g, {"a": t.b, "b": [[0], [1], [2]]}), ValueError, "batch size"),
    "pairs need k >= 2": (lambda t: _g_of_r(t.g, [[0], [1]]), ValueError, "batch size"),
    "decreasing edges": (lambda t: _g_of_r(t.g, t.b, [1.0, 0.5]), ValueError, "r_bins"),
    "float bin count": (lambda t: _g_of_r(t.g, t.b, 2.5), TypeError, "r_bins"),
    "zero bins": (lambda t: _g_of_r(t.g, t.b, 0), ValueError, "r_bins"),
    "unknown reference": (lambda t: _g_of_r(t.g, t.b, reference="poisson"), ValueError, "reference"),
    "no reference pairs": (lambda t: _g_of_r(t.g, t.b, max_reference_pairs=0), ValueError,
                           "max_reference_pairs"),
    "string features": (lambda t: _g_of_r(np.array(["a"] * 5), t.b), TypeError, "features"),
    "not a model": (lambda t: diagnostics.per_example_gradients("m", t.mse, t.x, t.y), TypeError, "model"),
    "loss not callable": (lambda t: diagnostics.per_example_gradients(t.model, "mse", t.x, t.y), TypeError,
                          "loss_fn"),
    "y too short": (lambda t: diagnostics.per_example_gradients(t.model, t.mse, t.x, t.y[:3]), ValueError,
                    "`y`"),
    "unknown variables": (lambda t: _grads(t, variables="first"), ValueError, "variables"),
    "not variables": (lambda t: _grads(t, variables=[np.ones(2)]), TypeError, "variables"),
    "no variables": (lambda t: _grads(t, variables=[]), ValueError, "variables"),
    "sketch_dim zero": (lambda t: _grads(t, sketch_dim=0), ValueError, "sketch_dim"),
    "chunk_size zero": (lambda t: _grads(t, chunk_size=0), ValueError, "chunk_size"),
    "loss not per example": (lambda t: diagnostics.per_example_gradients(
        t.model, lambda target, prediction: target - prediction, t.x, np.zeros((5, 3), np.float32)),
                             ValueError, "loss_fn"),
    "draws of a string": (lambda t: diagnostics.draw_batches("uniform", 3), TypeError, "batcher"),
    "draws without pipeline": (lambda t: diagnostics.draw_batches(
        tf_repulsive.repulsive_batch(3, tf_repulsive.Uniform()), 3), ValueError, "not been applied"),
    "zero draws": (lambda t: diagnostics.draw_batches(
        tf_repulsive.repulsive_batch(3, tf_repulsive.Uniform()), 0), ValueError, "num_batches"),
    "samplers list": (lambda t: _variance(t, [tf_repulsive.Uniform]), TypeError, "samplers"),
    "samplers empty": (lambda t: _variance(t, {}), ValueError, "samplers"),
    "sampler name": (lambda t: _variance(t, {"u": "uniform"}), TypeError, r"samplers\['u'\]"),
    "two draws per sampler": (lambda t: _variance(t, {"u": tf_repulsive.Uniform}, num_batches=2), ValueError,
                              "num_batches"),
    "negative start_step": (lambda t: _variance(t, {"u": tf_repulsive.Uniform}, start_step=-1), ValueError,
                            "start_step"),
}


@pytest.mark.parametrize("case", list(_BAD_CALLS))
def test_bad_arguments_name_the_argument(tiny, case):
  call, error, match = _BAD_CALLS[case]
  with pytest.raises(error, match=match):
    call(tiny)


@pytest.fixture(scope="module")
def digit_sweep(digits):
  x, y = digits
  return diagnostics.radius_sweep(_linear_softmax(), _XENT, x, y, 50, scales=(0.5, 1.0, 3.0), num_batches=20)


def test_radius_sweep_measures_the_calibrated_radius_its_multiples_and_the_default(digits, digit_sweep):
  x, y = digits
  auto = tf_repulsive.repulsive_batch(50, tf_repulsive.VanillaPDS(radius="auto"), seed=0, start_step=0,
                                      options=tf_repulsive.BatcherOptions(verbose=False))
  default = tf_repulsive.repulsive_batch(50, tf_repulsive.VanillaPDS(), seed=0, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  for batcher in (auto, default):
    tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  by_label = {report.label: report for report in digit_sweep.reports}
  assert set(by_label) == {"0.5 x auto", "auto", "3 x auto", "default"}
  assert [report.radius for report in digit_sweep.reports] == sorted(report.radius for report in digit_sweep.reports)
  radius = auto.stats().report["radius"]
  assert by_label["auto"].radius == pytest.approx(radius)
  assert by_label["0.5 x auto"].radius == pytest.approx(0.5 * radius)
  assert by_label["default"].radius == pytest.approx(default.stats().report["radius"])
  assert by_label["auto"].fill_rate == 0.0
  assert by_label["3 x auto"].fill_rate > 0.5
  # The auto row's draws are the auto batcher's: the same class mix and variance.
  draws = diagnostics.draw_batches(auto, 20)
  mix = np.bincount(y[draws.ravel()], minlength=10) / draws.size
  np.testing.assert_allclose(by_label["auto"].class_mix, mix)
  assert by_label["auto"].class_mix_distance == pytest.approx(
      0.5 * np.abs(mix - np.bincount(y) / len(y)).sum())
  gradients = diagnostics.per_example_gradients(_linear_softmax(), _XENT, x, y)
  expected = diagnostics.variance_split(gradients, {"auto": draws}).reports["auto"]
  assert by_label["auto"].variance.total == pytest.approx(expected.total)
  assert by_label["auto"].variance.pair == pytest.approx(expected.pair)
  assert "3 x auto" in digit_sweep.table() and "fill" in str(digit_sweep)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"sampler": tf_repulsive.KDPP}, TypeError, "disk samplers"),
    ({"sampler": "VanillaPDS"}, TypeError, "callable radius -> sampler"),
    ({"scales": (0.5, -1.0)}, ValueError, "scales"),
    ({"scales": ()}, ValueError, "scales")])
def test_radius_sweep_bad_arguments(digits, kwargs, error, message):
  x, y = digits
  with pytest.raises(error, match=message):
    diagnostics.radius_sweep(_linear_softmax(), _XENT, x[:200], y[:200], 10, num_batches=3, **kwargs)


# ----------------------------------------------------------------------------- package layout


def test_the_numpy_estimators_load_and_run_without_tensorflow():
  # tf_repulsive's own __init__ imports TensorFlow, so the subprocess gives the two packages empty
  # stand-ins: only what the estimators' modules import themselves gets loaded.
  package = pathlib.Path(tf_repulsive.__file__).parent
  script = textwrap.dedent(f"""
      import sys, types
      import numpy as np
      for name, path in (("tf_repulsive", {str(package)!r}),
                         ("tf_repulsive.diagnostics", {str(package / "diagnostics")!r})):
        stand_in = types.ModuleType(name)
        stand_in.__path__ = [path]
        sys.modules[name] = stand_in
      from tf_repulsive.diagnostics import _kernels, _pair_correlation, _variance_split
      result = _variance_split.variance_split(np.eye(4), {{"pairs": [[0, 1], [2, 3], [0, 2]]}})
      assert result.reports["pairs"].batch_size == 2
      assert _pair_correlation.pair_correlation(np.arange(4.0)[:, None], [[0, 2], [1, 3]], 3).num_pairs == 2
      print(sorted(name for name in sys.modules if name.split(".")[0] in ("tensorflow", "keras")))
  """)
  run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
  assert run.returncode == 0, run.stderr
  assert run.stdout.strip() == "[]"
