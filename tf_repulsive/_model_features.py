"""Feature sources computed from the model: its embedding and its per-example last-layer gradient.

The paper measures distances between inputs; the variance the mini-batch gradient has lives in
the model's space. `EmbeddingFeatures` takes the penultimate activations (or a named layer's
output); `GradientFeatures` the per-example gradient of the loss with respect to the last Dense
layer (BADGE's gradient embedding, DivBS' selection space), exactly when it is small and through
a fixed seeded random projection otherwise; `LossFeatures` the per-example loss.
`compute_features` computes a source's features for a whole dataset, in chunks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _contract
from tf_repulsive import _progress

_DEFAULT_CHUNK = 512
# Last-layer activations whose per-example output gradient under cross-entropy is `output - target`.
_SOFTMAX_OUTPUTS = ("softmax", "linear")
_SIGMOID_OUTPUTS = ("sigmoid",)


def _model_inputs(model: Any, source: str) -> Any:
  """The symbolic inputs of a Sequential or functional model, or a TypeError saying what to do."""
  if not isinstance(model, keras.Model):
    raise TypeError(f"`model` must be a keras.Model; got {model!r}.")
  inputs = None
  # `input` is the structure a functional model was built with (one tensor, a list, a dict); a
  # Sequential model that was never called has only the flat list `inputs`.
  for attribute in ("input", "inputs"):
    try:
      inputs = getattr(model, attribute)
      break
    except (AttributeError, ValueError):
      continue
  if isinstance(inputs, list) and len(inputs) == 1:
    inputs = inputs[0]
  if inputs is None or not tf.nest.flatten(inputs):
    raise TypeError(
        f"{source} needs a Sequential or functional model with known inputs (built from keras.Input), "
        f"so that it can read an inner layer; {model.name!r} has none (a subclassed model, or a "
        "Sequential without an Input). Subclass tf_repulsive.FeatureSource and compute the features "
        "in its features_fn.")
  return inputs


def _flat_rows(values: Any) -> Any:
  return keras.ops.reshape(values, [keras.ops.shape(values)[0], -1])


@dataclasses.dataclass(frozen=True)
class EmbeddingFeatures(_contract.FeatureSource):
  """The model's embedding of each element: where the model itself puts it.

  By default the input of the model's last layer (the penultimate activations, after any dropout,
  which inference skips); with `layer`, that layer's output. Non-flat outputs are flattened.

  Attributes:
    layer: the name of the layer whose output is the embedding; None: the last layer's input.

  Example:

  >>> import keras, numpy as np, tf_repulsive
  >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="relu"),
  ...                           keras.layers.Dense(2)])
  >>> tf_repulsive.compute_features(tf_repulsive.EmbeddingFeatures(), model, np.ones([5, 3], np.float32)).shape
  (5, 8)
  """

  layer: str | None = None

  def __post_init__(self):
    if self.layer is not None and not isinstance(self.layer, str):
      raise TypeError(f"`layer` must be a layer's name or None (the last layer's input); got {self.layer!r}.")

  def features_fn(self, model: Any) -> Callable[[Any, Any], Any]:
    inputs = _model_inputs(model, "EmbeddingFeatures")
    if self.layer is None:
      embedded = model.layers[-1].input
    else:
      try:
        embedded = model.get_layer(self.layer).output
      except ValueError as error:
        names = [layer.name for layer in model.layers]
        raise ValueError(f"`layer`={self.layer!r} is not a layer of {model.name!r}; its layers: {names}.") from error
    embedding = keras.Model(inputs, embedded)
    return lambda chunk, labels: _flat_rows(embedding(chunk, training=False))

  def last_layer_fn(self, model: Any) -> Callable[[Any, Any, Any], Any] | None:
    # The last layer's input is the default embedding; another layer's output is not at hand.
    return None if self.layer is not None else lambda activations, outputs, labels: _flat_rows(activations)


@dataclasses.dataclass(frozen=True)
class GradientFeatures(_contract.FeatureSource):
  """Each element's gradient of the loss with respect to the model's last Dense layer.

  For cross-entropy, the gradient of one element's loss with respect to the last layer's kernel
  is the outer product h ⊗ (p − t) of its input h (the penultimate activations, with a 1
  appended for the bias) and the output error p − t: softmax probabilities minus the one-hot
  label for a softmax or logits output, sigmoid outputs minus the 0/1 targets for a sigmoid one.
  Distances between these vectors are distances between the per-example gradients of the last
  layer, the space in which a batch's gradients add up.

  When h ⊗ (p − t) has at most `projection_dim` entries it is the feature vector itself. Past
  that, it goes through a fixed random projection, seeded by `seed`, that never forms the outer
  product: ``((p − t) R1) ⊙ (h R2) / sqrt(projection_dim)`` with R1, R2 standard Gaussian, whose
  inner products are unbiased estimates of the exact ones (the Khatri–Rao form of a Gaussian
  projection). Memory is N × projection_dim.

  The labels are what the batcher's label convention gives: integer class ids for a softmax or
  logits output, 0/1 targets for a sigmoid one.

  Attributes:
    projection_dim: the largest feature dimension (>= 1).
    seed: the seed of the projection (the same projection at every refresh).

  Example:

  >>> import keras, numpy as np, tf_repulsive
  >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="relu"),
  ...                           keras.layers.Dense(4)])
  >>> x, y = np.ones([5, 3], np.float32), np.arange(5) % 4
  >>> tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y).shape  # 4 x (8 + 1)
  (5, 36)
  >>> tf_repulsive.compute_features(tf_repulsive.GradientFeatures(projection_dim=16), model, x, y).shape
  (5, 16)
  """

  projection_dim: int = 256
  seed: int = 0

  needs_labels = True

  def __post_init__(self):
    object.__setattr__(self, "projection_dim", _checks.integer(self.projection_dim, "projection_dim", 1))
    object.__setattr__(self, "seed", _checks.integer(self.seed, "seed", 0))

  def features_fn(self, model: Any, for_last_layer: bool = False) -> Callable[..., Any]:
    """The features of chunks of inputs; with `for_last_layer`, `last_layer_fn`'s function."""
    inputs = _model_inputs(model, "GradientFeatures")
    last, activation = _cross_entropy_output(model, "GradientFeatures")
    if len(last.input.shape) != 2:
      raise TypeError(f"GradientFeatures needs the last Dense layer's input to be [batch, units]; "
                      f"{last.name!r} takes {tuple(last.input.shape)}. Flatten before it, or use EmbeddingFeatures.")
    embedding = keras.Model(inputs, last.input)
    kernel, bias = last.kernel, last.bias
    outputs = int(kernel.shape[1])
    hidden = int(kernel.shape[0]) + (bias is not None)
    sigmoid = activation in _SIGMOID_OUTPUTS
    projections = None
    if outputs * hidden > self.projection_dim:
      rng = np.random.default_rng(self.seed)
      projections = (rng.standard_normal([outputs, self.projection_dim]).astype(np.float32),
                     rng.standard_normal([hidden, self.projection_dim]).astype(np.float32))
    scale = 1.0 / math.sqrt(self.projection_dim)

    def gradient(activations, probabilities, labels):
      """The features of the outer product h ⊗ (p − t), from h (without the 1) and p."""
      if bias is not None:
        activations = keras.ops.concatenate([activations, keras.ops.ones_like(activations[:, :1])], axis=1)
      if sigmoid:
        targets = keras.ops.reshape(keras.ops.cast(labels, probabilities.dtype),
                                    [keras.ops.shape(probabilities)[0], -1])
        error = probabilities - targets
      else:
        if not keras.backend.standardize_dtype(labels.dtype).startswith(("int", "uint")):
          raise TypeError(f"GradientFeatures needs integer class ids as labels for {last.name!r}'s "
                          f"{activation} output; got dtype {labels.dtype}.")
        error = probabilities - keras.ops.one_hot(labels, outputs, dtype=probabilities.dtype)
      if projections is None:
        return _flat_rows(error[:, :, None] * activations[:, None, :])
      return keras.ops.matmul(error, projections[0]) * keras.ops.matmul(activations, projections[1]) * scale

    def gradient_embedding(chunk, labels):
      activations = embedding(chunk, training=False)
      logits = keras.ops.matmul(activations, kernel)
      if bias is not None:
        logits = logits + bias
      return gradient(activations, keras.ops.sigmoid(logits) if sigmoid else keras.ops.softmax(logits), labels)

    if for_last_layer:
      # The layer's output is p already, except for logits.
      return lambda activations, layer_outputs, labels: gradient(
          activations, keras.ops.softmax(layer_outputs) if activation == "linear" else layer_outputs, labels)
    return gradient_embedding

  def last_layer_fn(self, model: Any) -> Callable[[Any, Any, Any], Any] | None:
    return self.features_fn(model, for_last_layer=True)


def _cross_entropy_output(model: Any, source: str) -> tuple[Any, str]:
  """The model's last layer and its activation, or a TypeError if it is no cross-entropy output."""
  if not isinstance(model, keras.Model) or not model.layers:
    raise TypeError(f"`model` must be a built keras.Model with layers; got {model!r}.")
  last = model.layers[-1]
  activation = getattr(getattr(last, "activation", None), "__name__", None)
  if not isinstance(last, keras.layers.Dense) or activation not in _SOFTMAX_OUTPUTS + _SIGMOID_OUTPUTS:
    raise TypeError(
        f"{source} needs a model whose last layer is a Dense layer with a softmax, sigmoid or "
        f"linear (logits) activation, trained with cross-entropy; {model.name!r} ends with {last!r}"
        f"{'' if activation is None else f' (activation {activation})'}. Use EmbeddingFeatures, or "
        "subclass tf_repulsive.FeatureSource.")
  return last, activation


@dataclasses.dataclass(frozen=True)
class LossFeatures(_contract.FeatureSource):
  """Each element's cross-entropy loss under the model, as a feature vector of one entry.

  The importance samplers score an element by its feature norm: with this source, by its loss.
  The loss is categorical cross-entropy for a softmax or logits output (integer class ids as
  labels), and binary cross-entropy summed over the outputs for a sigmoid one (0/1 targets).

  Example:

  >>> import keras, numpy as np, tf_repulsive
  >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="softmax")])
  >>> x, y = np.ones([5, 3], np.float32), np.arange(5) % 4
  >>> tf_repulsive.compute_features(tf_repulsive.LossFeatures(), model, x, y).shape
  (5, 1)
  """

  needs_labels = True

  def features_fn(self, model: Any) -> Callable[[Any, Any], Any]:
    loss = self.last_layer_fn(model)
    return lambda chunk, labels: loss(None, model(chunk, training=False), labels)

  def last_layer_fn(self, model: Any) -> Callable[[Any, Any, Any], Any]:
    _, activation = _cross_entropy_output(model, "LossFeatures")

    def loss(activations, outputs, labels):
      del activations
      if activation in _SIGMOID_OUTPUTS:
        targets = keras.ops.reshape(keras.ops.cast(labels, outputs.dtype), keras.ops.shape(outputs))
        per_output = keras.ops.binary_crossentropy(targets[..., None], outputs[..., None])
        return keras.ops.sum(_flat_rows(per_output), axis=1, keepdims=True)
      losses = keras.ops.sparse_categorical_crossentropy(labels, outputs, from_logits=activation == "linear")
      return keras.ops.reshape(losses, [-1, 1])

    return loss


def _chunk(values: Any, start: int, stop: int) -> Any:
  return tf.nest.map_structure(lambda array: array[start:stop], values)


def compute_features(source: _contract.FeatureSource, model: Any, x: Any, y: Any = None, *,
                   inputs_fn: Callable[[Any], Any] | None = None, chunk_size: int = _DEFAULT_CHUNK,
                   verbose: bool = True) -> np.ndarray:
  """The features `source` computes from `model` (as it is now) for every element of `(x, y)`.

  One inference pass over the data in chunks; a progress bar appears when it takes longer than
  about 2 s.

  Args:
    source: the feature source (`EmbeddingFeatures`, `GradientFeatures`, or your own).
    model: a built Keras model.
    x: `[N, ...]` model inputs, or the nested structure of them the model takes; with
      `inputs_fn`, what it maps to them.
    y: `[N]` labels, needed when `source.needs_labels`.
    inputs_fn: None, or a function of a chunk of `x` to the model's inputs for it (for
      elements the model does not take as they are: audio it takes as spectrograms, image
      files it takes decoded), applied chunk by chunk so that the whole mapped data is never
      held at once.
    chunk_size: elements per model call (>= 1).
    verbose: whether a long computation shows a progress bar.

  Returns:
    `[N, d]` float32 features, row i those of element i.

  Raises:
    TypeError: for a bad source, model or argument types, or a model the source cannot read.
    ValueError: for missing or misshapen labels, inputs of differing lengths, or features that
      are not finite or not `[n, d]`.
  """
  if not isinstance(source, _contract.FeatureSource):
    raise TypeError(f"`source` must be a tf_repulsive.FeatureSource (EmbeddingFeatures(), GradientFeatures(), "
                    f"or a subclass); got {source!r}.")
  if inputs_fn is not None and not callable(inputs_fn):
    raise TypeError(f"`inputs_fn` must be a function of a chunk of `x` to the model's inputs, or None; "
                    f"got {inputs_fn!r}.")
  chunk_size = _checks.integer(chunk_size, "chunk_size", 1)
  leaves = [np.asarray(leaf) for leaf in tf.nest.flatten(x)]
  lengths = {leaf.shape[0] if leaf.ndim else -1 for leaf in leaves}
  if len(lengths) != 1 or -1 in lengths:
    shapes = [leaf.shape for leaf in leaves]
    raise ValueError(f"`x` must be an [N, ...] array or a nested structure of them sharing N; got shapes {shapes}.")
  num_points = int(lengths.pop())
  x = tf.nest.pack_sequence_as(x, leaves)
  labels = None
  if source.needs_labels:
    if y is None:
      raise ValueError(f"{type(source).__name__} needs the labels: pass `y`.")
    labels = np.asarray(y)
    if labels.shape[:1] != (num_points,):
      raise ValueError(f"`y` must hold one label per element ({num_points}); got shape {labels.shape}.")
  features_of = source.features_fn(model)
  rows: list[np.ndarray] = []
  with _progress.bar(f"features ({type(source).__name__})", num_points, verbose) as progress:
    for start in range(0, num_points, chunk_size):
      stop = min(start + chunk_size, num_points)
      inputs = _chunk(x, start, stop)
      if inputs_fn is not None:
        inputs = inputs_fn(inputs)
      chunk = keras.ops.convert_to_numpy(features_of(inputs, None if labels is None else labels[start:stop]))
      if chunk.ndim != 2 or chunk.shape[0] != stop - start or (rows and chunk.shape[1] != rows[0].shape[1]):
        raise ValueError(f"{type(source).__name__}'s features must be [n, d] with one d for all chunks; a chunk "
                         f"of {stop - start} elements gave shape {chunk.shape}.")
      rows.append(chunk.astype(np.float32, copy=False))
      progress.update(stop - start)
  features = np.concatenate(rows)
  if not np.all(np.isfinite(features)):
    raise ValueError(f"{type(source).__name__} computed NaN or infinite features: the model's outputs are not "
                     "finite on some elements.")
  return features
