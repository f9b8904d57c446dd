"""Feature sources computed from the model: what they compute, against the quantities they claim."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from tf_repulsive import diagnostics

_N = 30


def _classifier(output_units=3, activation=None, hidden=6, seed=0):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((4,)), keras.layers.Dense(hidden, activation="tanh"),
                           keras.layers.Dropout(0.5), keras.layers.Dense(output_units, activation=activation)])


def _data(classes=3):
  rng = np.random.default_rng(0)
  return rng.normal(size=(_N, 4)).astype(np.float32), np.arange(_N) % classes


def _gram(features):
  return features.astype(np.float64) @ features.astype(np.float64).T


@pytest.mark.parametrize("activation, loss", [
    (None, keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)),
    ("softmax", keras.losses.SparseCategoricalCrossentropy(reduction=None)),
])
def test_gradient_features_are_the_last_layer_gradients(activation, loss):
  """Exact case (3 x 7 <= 256 entries): the same inner products as the per-example gradients of the last layer."""
  model = _classifier(activation=activation)
  x, y = _data()
  features = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y)
  gradients = diagnostics.per_example_gradients(model, loss, x, y, variables="last_layer")
  assert features.shape == (_N, 3 * 7)
  np.testing.assert_allclose(_gram(features), _gram(gradients), rtol=1e-4, atol=1e-5)


def test_gradient_features_of_a_sigmoid_output_are_its_gradients():
  model = _classifier(output_units=1, activation="sigmoid")
  x, y = _data(classes=2)
  features = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y)
  loss = keras.losses.BinaryCrossentropy(reduction=None)
  gradients = diagnostics.per_example_gradients(model, lambda t, p: loss(t[:, None], p),
                                                x, y.astype(np.float32), variables="last_layer")
  np.testing.assert_allclose(_gram(features), _gram(gradients), rtol=1e-4, atol=1e-5)


def test_projected_gradient_features_keep_the_inner_products():
  """Past projection_dim, inner products are estimated without bias: at 16384 dims, within a few percent.

  The estimate of <a, b> has a standard deviation of at most 3 |a| |b| / sqrt(projection_dim)
  (products of Gaussians), 0.023 |a| |b| here; the bound is 5 of them.
  """
  model = _classifier(output_units=10, hidden=2000)  # 10 x 2001 entries
  x, y = _data(classes=10)
  exact = _gram(tf_repulsive.compute_features(tf_repulsive.GradientFeatures(projection_dim=20010), model, x, y))
  projected = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(projection_dim=16384), model, x, y)
  assert projected.shape == (_N, 16384)
  norms = np.sqrt(np.diag(exact))
  assert np.all(np.abs(_gram(projected) - exact) <= 0.12 * np.outer(norms, norms))


def test_projection_is_fixed_by_its_seed():
  model = _classifier()
  x, y = _data()
  first, again, other = (tf_repulsive.compute_features(tf_repulsive.GradientFeatures(projection_dim=8, seed=seed),
                                                     model, x, y) for seed in (1, 1, 2))
  assert first.shape == (_N, 8)
  np.testing.assert_array_equal(first, again)
  assert not np.allclose(first, other)


def test_embedding_features_are_the_last_layers_input_in_inference_mode():
  model = _classifier()
  x, _ = _data()
  hidden = np.tanh(x @ model.layers[0].kernel.numpy() + model.layers[0].bias.numpy())  # dropout off
  np.testing.assert_allclose(tf_repulsive.compute_features(tf_repulsive.EmbeddingFeatures(), model, x, chunk_size=7),
                             hidden, rtol=1e-5, atol=1e-6)


def test_embedding_features_of_a_named_layer_of_a_multi_input_model():
  first, second = keras.Input((2,), name="first"), keras.Input((3, 1), name="second")
  joined = keras.layers.Concatenate(name="joined")([first, keras.layers.Flatten()(second)])
  model = keras.Model({"first": first, "second": second}, keras.layers.Dense(2)(joined))
  x = {"first": np.arange(10, dtype=np.float32).reshape(5, 2), "second": np.ones([5, 3, 1], np.float32)}
  features = tf_repulsive.compute_features(tf_repulsive.EmbeddingFeatures("joined"), model, x, chunk_size=2)
  np.testing.assert_array_equal(features, np.concatenate([x["first"], np.ones([5, 3])], axis=1))


class _Subclassed(keras.Model):

  def __init__(self):
    super().__init__()
    self.dense = keras.layers.Dense(2)

  def call(self, inputs):
    return self.dense(inputs)


@pytest.mark.parametrize("source, model, labels, error, match", [
    (tf_repulsive.GradientFeatures(), lambda: _Subclassed(), True, TypeError, "Subclass tf_repulsive.FeatureSource"),
    (tf_repulsive.GradientFeatures(),
     lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu")]),
     True, TypeError, "softmax, sigmoid or linear"),
    (tf_repulsive.GradientFeatures(), _classifier, False, ValueError, "needs the labels"),
    (tf_repulsive.GradientFeatures(), _classifier, "float", TypeError, "integer class ids"),
    (tf_repulsive.EmbeddingFeatures("nope"), _classifier, False, ValueError, "not a layer"),
    ("gradient", _classifier, True, TypeError, "must be a tf_repulsive.FeatureSource"),
])
def test_bad_sources_and_models_are_named(source, model, labels, error, match):
  x, y = _data()
  y = {True: y, False: None, "float": y.astype(np.float32)}[labels]
  with pytest.raises(error, match=match):
    tf_repulsive.compute_features(source, model(), x, y)


def test_bad_arguments_are_named():
  with pytest.raises(ValueError, match="projection_dim"):
    tf_repulsive.GradientFeatures(projection_dim=0)
  with pytest.raises(TypeError, match="layer"):
    tf_repulsive.EmbeddingFeatures(3)


def test_features_that_are_not_finite_are_refused():
  model = _classifier()
  x, y = _data()
  x[3, 0] = np.nan
  with pytest.raises(ValueError, match="not finite"):
    tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y)


def test_gradient_variance_draws_in_the_feature_space(digits):
  """The draws equal those of a batcher built on the computed features; the table says where they were drawn."""
  x, y = digits[0][:400], digits[1][:400]
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)])
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
  source = tf_repulsive.GradientFeatures(projection_dim=32)
  result = diagnostics.gradient_variance(model, loss, x, y, {"vanilla": tf_repulsive.VanillaPDS(radius="auto")}, 20,
                                         num_batches=5, variables="last_layer", features=source)
  features = tf_repulsive.compute_features(source, model, x, y)
  batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(radius="auto"), seed=0, start_step=0)
  tf.data.Dataset.from_tensor_slices((features, y)).apply(batcher)
  np.testing.assert_array_equal(result.batches["vanilla"], diagnostics.draw_batches(batcher, 5))
  assert result.reports["vanilla"].radius == pytest.approx(batcher.stats().report["radius"])
  assert "distances: GradientFeatures(projection_dim=32, seed=0)" in result.table()
  with pytest.raises(TypeError, match="`features` must be None"):
    diagnostics.gradient_variance(model, loss, x, y, {"u": tf_repulsive.Uniform()}, 20, num_batches=3,
                                  features="gradient")
