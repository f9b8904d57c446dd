"""Inclusion weights: each element of a batch weighted by the inverse of its probability of being in a batch.

The drawer estimates the probabilities pi_i once (`BatchDrawer.inclusion_probabilities`), again
at each refresh of a `ModelSpace` batcher. The stream gathers the weights of a batch's elements
and hands the batch to Keras as `(x, y, sample_weight)`. Keras' default reduction divides the
weighted sum of the losses by k, so the two forms give:

* "unbiased": w_i = k / (N pi_i), the Horvitz–Thompson estimate of the dataset's mean loss,
  unbiased for every k;
* "self_normalized": w_i = 1 / pi_i scaled to average 1 over the global batch, the ratio
  sum w_i l_i / sum w_i: lower variance, consistent, biased at finite k.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _contract

# Keys the draws that estimate the inclusion probabilities, apart from the stream's.
INCLUSION_SALT = 0x1C1
# The forms of `repulsive_batch(..., inclusion_weights=...)`.
UNBIASED = "unbiased"
SELF_NORMALIZED = "self_normalized"


def checked_form(value: Any) -> str | None:
  """The form `inclusion_weights` names, None for none, or an error naming the choices."""
  if value is None or value is False:
    return None
  if value is True:
    raise TypeError(
        "`inclusion_weights=True` does not say which estimate the weights make: pass "
        f"inclusion_weights={UNBIASED!r} (w = k / (N pi), the Horvitz–Thompson estimate, unbiased) or "
        f"{SELF_NORMALIZED!r} (1 / pi scaled to average 1 per batch, the ratio estimate: what True gave).")
  if value not in (UNBIASED, SELF_NORMALIZED):
    raise TypeError(f"`inclusion_weights` must be None, {UNBIASED!r} or {SELF_NORMALIZED!r}; got {value!r}.")
  return value


class InclusionWeights:
  """The inclusion probabilities of a batcher's drawer and the weights the stream gathers.

  Args:
    form: `UNBIASED` or `SELF_NORMALIZED`.
    seed: the batcher's seed (the estimate's draws are keyed by it and `INCLUSION_SALT`).
    refreshable: whether a refresh installs new weights (a `ModelSpace` batcher): then they live
      in a variable.
    verbose: show a progress bar for an estimate that takes more than about 2 s.
  """

  def __init__(self, form: str, seed: int, refreshable: bool, verbose: bool):
    self.form = form
    self._key = tf.constant([seed, INCLUSION_SALT], tf.int64)
    self._refreshable = refreshable
    self._verbose = verbose
    # `[N]` each element's estimated probability of being in a batch.
    self.probabilities: np.ndarray | None = None
    # `[N]` float32 what the stream gathers: 1 / probability, times k / N for the unbiased form (0
    # where the probability is 0).
    self.weights: tf.Tensor | tf.Variable | None = None

  def install(self, sampler: _contract.Sampler, drawer: _contract.BatchDrawer, num_points: int,
              batch_size: int) -> None:
    """Estimates `drawer`'s inclusion probabilities and installs their inverses as the weights."""
    probabilities = drawer.inclusion_probabilities(self._key, self._verbose)
    if probabilities is None:
      raise ValueError(
          f"inclusion_weights weights each element by its probability of being in a batch, which "
          f"{type(sampler).__name__} does not provide (its drawer's inclusion_probabilities() is None; "
          "AnnealPDS's change with the step): use Uniform, VanillaPDS, EasyPDS or DensePDS.")
    probabilities = np.asarray(probabilities, np.float64)
    if probabilities.shape != (num_points,) or not np.all(np.isfinite(probabilities)) or np.any(probabilities < 0):
      raise ValueError(
          f"{type(drawer).__name__}.inclusion_probabilities must return [N] = [{num_points}] finite "
          f"probabilities >= 0; got shape {probabilities.shape}.")
    weights = inverse_inclusion(probabilities)
    if self.form == UNBIASED:
      weights = weights * (batch_size / num_points)
    weights = weights.astype(np.float32)
    self.probabilities = probabilities
    if isinstance(self.weights, tf.Variable):
      self.weights.assign(weights)
      return
    with tf.device("CPU:0"):
      self.weights = tf.Variable(weights, trainable=False) if self._refreshable else tf.constant(weights)

  def of_batch(self, indices: tf.Tensor, batch_size: int, read: Callable[[tf.Tensor], tf.Tensor]) -> tf.Tensor:
    """`[rows, k]` the weights of the elements `indices` of global batches, in the batcher's form."""
    assert self.weights is not None  # installed by the build
    weights = tf.gather(read(self.weights), indices)
    if self.form == UNBIASED:
      return weights
    # Keras divides the weighted sum of the losses by k: with weights that average 1 the step's
    # loss is the ratio estimate sum_b w_i loss_i / sum_b w_i of the dataset's mean loss.
    return weights * (batch_size / tf.reduce_sum(weights, axis=-1, keepdims=True))


def weighted(batch: Any, weights: tf.Tensor) -> Any:
  """The `(x, y)` or `(x, y, sample_weight)` batch with `weights` as (a factor of) its sample weight."""
  if len(batch) == 2:
    return (*batch, weights)
  inputs, targets, sample_weight = batch
  return inputs, targets, sample_weight * tf.cast(weights, sample_weight.dtype)


def inverse_inclusion(probabilities: np.ndarray) -> np.ndarray:
  """1 / each inclusion probability; 0 for a point the batches never hold (its weight is never gathered)."""
  return np.where(probabilities > 0, 1.0 / np.maximum(probabilities, 1e-300), 0.0)


def check_weighable(element_spec: Any, weigher: str = "inclusion_weights") -> None:
  """Raises unless the elements are Keras' (x, y) or (x, y, sample_weight) tuples, the forms weights join.

  `weigher` names what weighs them in the message.
  """
  if isinstance(element_spec, tuple) and len(element_spec) in (2, 3):
    if len(element_spec) == 2:
      return
    weight = element_spec[2]
    if isinstance(weight, tf.TensorSpec) and weight.dtype.is_floating and weight.shape.rank == 0:
      return
    raise TypeError(
        f"{weigher} multiplies the sample weight of (x, y, sample_weight) elements by its own weight; the "
        f"third component must be a float scalar per element, got {weight}.")
  raise TypeError(
      f"{weigher} hands each batch to Keras as (x, y, sample_weight): the elements must be "
      f"(x, y) or (x, y, sample_weight) tuples; got elements of spec {element_spec}. Map them to that "
      "form before the batcher.")
