"""The samplers' side of the diagnostics: the dataset they are built over, their draws and weights."""

from __future__ import annotations

from typing import Any, TypeAlias

import keras
import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _contract
from tf_repulsive import _inclusion_weights
from tf_repulsive import _model_features
from tf_repulsive import _pipeline
from tf_repulsive.diagnostics import _kernels

# Where the samplers measure distances: the inputs (None), a feature source, or `[N, d]` features.
DistanceSpace: TypeAlias = _contract.FeatureSource | np.ndarray | tf.Tensor | None


def draw_batches(batcher: _pipeline.RepulsiveBatcher, num_batches: int, *, start_step: int = 0) -> np.ndarray:
  """The indices of the batches `batcher` draws at steps start_step, ..., + num_batches − 1.

  Batches are a pure function of (seed, step), so this does not disturb the pipeline. Row m is
  `batcher.batch_indices(start_step + m)`; a drawer that draws several steps at once is called
  once per block of them, not once per step.

  Args:
    batcher: a `repulsive_batch` batcher already applied to a dataset.
    num_batches: M >= 1.
    start_step: the first global step (>= 0); matters for step-dependent samplers (Anneal PDS).

  Returns:
    `[M, k]` int64 indices into the dataset.

  Raises:
    TypeError: for a non-batcher or non-int counts.
    ValueError: for counts out of range, a batcher not applied to a dataset, or steps drawn on
      the features of a refresh the batcher does not hold (as `batch_indices`).
  """
  if not isinstance(batcher, _pipeline.RepulsiveBatcher):
    raise TypeError(f"`batcher` must be what tf_repulsive.repulsive_batch(...) returned; got {batcher!r}.")
  num_batches = _checks.integer(num_batches, "num_batches", 1)
  start_step = _checks.integer(start_step, "start_step", 0)
  return _pipeline.hooks(batcher).batches_of(start_step, num_batches).astype(np.int64)


def batch_weights(batcher: _pipeline.RepulsiveBatcher, batches: Any) -> np.ndarray:
  """The sample weights the batcher's stream gives the elements of `batches`, in its `inclusion_weights` form.

  "unbiased": each element's k / (N pi_i); "self_normalized": 1 / pi_i scaled to average 1 over
  its batch, pi being `batcher.inclusion_probabilities`.

  Args:
    batcher: a batcher built with `inclusion_weights` and applied to a dataset.
    batches: `[M, k]` indices of its batches (from `draw_batches`).

  Returns:
    `[M, k]` float64 weights.

  Raises:
    ValueError: for a batcher without inclusion weights.
  """
  if not isinstance(batcher, _pipeline.RepulsiveBatcher):
    raise TypeError(f"`batcher` must be what tf_repulsive.repulsive_batch(...) returned; got {batcher!r}.")
  probabilities = batcher.inclusion_probabilities
  if probabilities is None:
    raise ValueError("this batcher has no inclusion weights: build it with repulsive_batch(..., "
                     "inclusion_weights=\"unbiased\") or \"self_normalized\".")
  batches = _kernels.check_batches(batches, len(probabilities), "batches", 1)
  inverse = _inclusion_weights.inverse_inclusion(probabilities)[batches]
  if batcher.inclusion_weights == _inclusion_weights.UNBIASED:
    return inverse * (batches.shape[1] / len(probabilities))
  return inverse * (batches.shape[1] / inverse.sum(axis=1, keepdims=True))


def sampling_data(model: keras.Model, x: Any, y: Any, features: DistanceSpace) -> tuple[tf.data.Dataset, str]:
  """The dataset the samplers are built over (features first, labels second) and what the features are."""
  labels = np.asarray(y)
  if features is None:
    return tf.data.Dataset.from_tensor_slices((np.asarray(x), labels)), "inputs, flattened"
  if isinstance(features, _contract.FeatureSource):
    computed = _model_features.compute_features(features, model, x, y, verbose=False)
    return (tf.data.Dataset.from_tensor_slices((computed, labels)),
            f"{features!r} of the model at these parameters ({computed.shape[1]} dims)")
  if hasattr(features, "__array__"):  # numpy arrays, eager tensors
    given = np.asarray(features)
    if given.ndim != 2 or given.shape[0] != labels.shape[0] or given.dtype.kind not in "fiu":
      raise ValueError(f"`features` as an array must be numeric [N, d] with N = {labels.shape[0]}; got "
                       f"{given.dtype} {given.shape}.")
    return tf.data.Dataset.from_tensor_slices((given, labels)), f"given features ({given.shape[1]} dims)"
  raise TypeError(f"`features` must be None (the inputs), a tf_repulsive.FeatureSource such as "
                  f"GradientFeatures(), or an [N, d] array; got {features!r}.")
