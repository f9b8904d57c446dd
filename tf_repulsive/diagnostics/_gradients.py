"""Per-example gradients of a Keras model, exact or count-sketched."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from tf_repulsive import _checks

# Bound on the per-chunk per-example gradients `[chunk, P]` float32 when the chunk size is automatic.
_GRADIENT_CHUNK_BYTES = 256 * 2**20
_MAX_GRADIENT_CHUNK = 256


def resolve_variables(model: keras.Model, variables: str | Sequence[Any]) -> list[Any]:
  """The variables whose gradients are taken: "all", "last_layer" or an explicit list."""
  if isinstance(variables, str):
    if variables == "all":
      chosen = list(model.trainable_variables)
    elif variables == "last_layer":
      layers = [layer for layer in model.layers if layer.trainable_variables]
      chosen = list(layers[-1].trainable_variables) if layers else []
    else:
      raise ValueError(
          f"`variables` must be 'all', 'last_layer' or a list of variables; got {variables!r}.")
  else:
    try:
      chosen = list(variables)
    except TypeError:
      raise TypeError(
          f"`variables` must be 'all', 'last_layer' or a list of variables; got {variables!r}.") from None
    for variable in chosen:
      if not isinstance(variable, (keras.Variable, tf.Variable)):
        raise TypeError(f"`variables` must hold keras / tf Variables; got {variable!r}.")
  if not chosen:
    raise ValueError(
        "`variables` selects no trainable variables; build the model (call it once or give it an "
        "Input) before taking gradients.")
  return chosen


def _count_sketch(num_parameters: int, sketch_dim: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
  """Bucket in [0, m) and sign ±1 of every parameter: S g sums sign·g per bucket."""
  rng = np.random.default_rng(seed)
  buckets = rng.integers(0, sketch_dim, size=num_parameters).astype(np.int32)
  signs = (2 * rng.integers(0, 2, size=num_parameters) - 1).astype(np.float32)
  return tf.constant(buckets), tf.constant(signs)


def per_example_gradients(model: keras.Model, loss_fn: Callable[[Any, Any], Any], x: Any, y: Any, *,
                          variables: str | Sequence[Any] = "all", sketch_dim: int | None = None,
                          seed: int = 0, chunk_size: int | None = None) -> np.ndarray:
  """g_i = ∇ loss(y_i, model(x_i)) for every example, flattened over the chosen variables.

  The model is called with `training=False` (dropout off, batch norm in inference mode), so g_i
  is a function of the parameters and example i alone and the diagnostics measure the variance
  the choice of batch causes. Regularisation losses (`model.losses`) are not included: they add
  the same vector to every g_i and do not change the variance. Computed with `tf.vectorized_map`
  over chunks of examples (ops without a vectorised rule fall back to a loop with a warning).

  Memory and the trade-off between the options: the exact gradients take N × P floats (P the
  number of parameters in `variables`). `variables="last_layer"` keeps only the last layer with
  variables (exact, cheap, but it is the variance of a part of the gradient, which can behave
  differently from the whole). `sketch_dim=m` keeps all of P but stores S g_i, a count sketch (each
  parameter added with a random sign into one of m buckets, fixed by `seed`): E[S a · S b] = a·b,
  so every quantity of `variance_split` (linear in the gradients' dot products) is unbiased over
  sketches, with relative error up to about sqrt(2/m) for one sketch (2% at m = 4096); all samplers
  compared with one sketch share S, so their ratios are more precise than that. Cost O(P) per
  example, unlike a dense Gaussian projection (O(m P) time and memory).

  Args:
    model: a built Keras model.
    loss_fn: `loss_fn(y_true, y_pred)` of a single-example batch, reducing to one value, e.g.
      `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`: the loss whose batch mean is
      trained on.
    x: `[N, ...]` model inputs.
    y: `[N, ...]` targets.
    variables: "all" (the model's trainable variables), "last_layer", or a list of variables.
    sketch_dim: m, to return count sketches `[N, m]` instead of `[N, P]`; None for exact.
    seed: seed of the sketch.
    chunk_size: examples per vectorised call; None: as many as fit 256 MiB of gradients (<= 256).

  Returns:
    `[N, P]` (or `[N, m]`) float32 per-example gradients, parameters in the order of `variables`,
    each flattened row-major.

  Raises:
    TypeError: for a non-Keras model, a non-callable loss, bad `variables` entries, non-int sizes.
    ValueError: for mismatched x / y, unknown `variables`, a model without variables, a loss that
      does not reduce to one value per example.
  """
  if not isinstance(model, keras.Model):
    raise TypeError(f"`model` must be a keras.Model; got {type(model).__name__}.")
  if not callable(loss_fn):
    raise TypeError(f"`loss_fn` must be callable (y_true, y_pred) -> loss; got {loss_fn!r}.")
  x, y = np.asarray(x), np.asarray(y)
  if x.ndim < 1 or x.shape[0] < 1:
    raise ValueError(f"`x` must be [N, ...] with N >= 1; got shape {x.shape}.")
  if y.ndim < 1 or y.shape[0] != x.shape[0]:
    raise ValueError(f"`y` must have one target per example ({x.shape[0]}); got shape {y.shape}.")
  if sketch_dim is not None:
    sketch_dim = _checks.integer(sketch_dim, "sketch_dim", 1)
  seed = _checks.integer(seed, "seed", 0)
  chosen = resolve_variables(model, variables)
  num_parameters = sum(int(np.prod(variable.shape)) for variable in chosen)
  if chunk_size is None:
    chunk_size = max(1, min(_MAX_GRADIENT_CHUNK, _GRADIENT_CHUNK_BYTES // (4 * num_parameters)))
  chunk_size = _checks.integer(chunk_size, "chunk_size", 1)
  sketch = None if sketch_dim is None else _count_sketch(num_parameters, sketch_dim, seed)

  def example_gradient(example):
    example_x, example_y = example
    with tf.GradientTape() as tape:
      loss = loss_fn(example_y[None], model(example_x[None], training=False))
      if loss.shape.num_elements() not in (None, 1):
        raise ValueError(
            f"`loss_fn` must reduce a single-example batch to one loss; it returned shape {loss.shape}.")
      loss = tf.reshape(loss, [])
    gradients = tape.gradient(loss, chosen, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) for g in gradients], axis=0)

  @tf.function(input_signature=[tf.TensorSpec([None, *x.shape[1:]], tf.as_dtype(x.dtype)),
                                tf.TensorSpec([None, *y.shape[1:]], tf.as_dtype(y.dtype))])
  def chunk_gradients(chunk_x, chunk_y):
    flat = tf.vectorized_map(example_gradient, (chunk_x, chunk_y))
    if sketch is None:
      return flat
    buckets, signs = sketch
    return tf.transpose(tf.math.unsorted_segment_sum(
        tf.transpose(flat) * signs[:, None], buckets, num_segments=sketch_dim))

  return np.concatenate([chunk_gradients(x[start:start + chunk_size], y[start:start + chunk_size]).numpy()
                         for start in range(0, x.shape[0], chunk_size)])
