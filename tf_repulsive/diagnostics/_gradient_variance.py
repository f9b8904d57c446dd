"""The Theorem-1 split for several samplers, from a Keras model, its data and the samplers' pipelines."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import keras
import numpy as np

from tf_repulsive import _checks
from tf_repulsive import _contract
from tf_repulsive import _pipeline
from tf_repulsive.diagnostics import _gradients
from tf_repulsive.diagnostics import _sampling
from tf_repulsive.diagnostics import _variance_split

SamplerFactory = Callable[[], _contract.Sampler]


def _gradient_space(num_parameters: int, variables: str | Sequence[Any], sketch_dim: int | None) -> str:
  if isinstance(variables, str):
    which = "all trainable variables" if variables == "all" else "last layer"
  else:
    which = "selected variables"
  sketch = "exact" if sketch_dim is None else f"count sketch to {sketch_dim} dims"
  return f"{which} ({num_parameters:,} parameters), {sketch}, training=False"


def gradient_variance(model: keras.Model, loss_fn: Callable[[Any, Any], Any], x: Any, y: Any,
                      samplers: Mapping[str, _contract.Sampler | SamplerFactory], batch_size: int, *,
                      num_batches: int = 200, seed: int = 0, start_step: int = 0,
                      variables: str | Sequence[Any] = "all", sketch_dim: int | None = None,
                      chunk_size: int | None = None, features: _sampling.DistanceSpace = None,
                      inclusion_weights: str | None = None) -> _variance_split.GradientVarianceResult:
  """Theorem-1 variance split of the mini-batch gradient for each sampler, at the model's parameters.

  For each sampler: builds its `repulsive_batch` pipeline over the data (distances measured on
  `features`, labels y), draws `num_batches` batches at consecutive steps, and estimates
  tr Cov(Ĝ), its intensity and pair parts and the bias with `variance_split`, from per-example
  gradients computed once (`per_example_gradients`). Compare `total` with
  `result.uniform_exact.total`.

  Args:
    model: a built Keras model (its current parameters are used).
    loss_fn: per-example loss, see `per_example_gradients`.
    x: `[N, ...]` inputs (the sampling features, flattened, unless `features` says otherwise).
    y: `[N]` integer labels (needed by the mingling-index samplers) or other targets.
    samplers: name -> a sampler, or a factory returning one (such as `tf_repulsive.VanillaPDS`).
    batch_size: `k`.
    num_batches: M >= 3 draws per sampler (the standard errors scale as 1/sqrt(M)).
    seed: seed of the pipelines and of the sketch.
    start_step: first global step of the draws (for Anneal PDS: where in its schedule to look).
    variables: "all", "last_layer" or a list of variables, see `per_example_gradients`.
    sketch_dim: count-sketch dimension, or None for exact gradients.
    chunk_size: examples per vectorised gradient call; None: automatic.
    features: where the samplers measure distances (and mingling values): None for the inputs
      x, flattened; a `tf_repulsive.FeatureSource` (`GradientFeatures()`, `EmbeddingFeatures()`)
      for the model's own space at its current parameters; or an `[N, d]` array.
    inclusion_weights: weight each sampler's elements as `repulsive_batch(...,
      inclusion_weights=...)` streams do, "unbiased" or "self_normalized" (None: unweighted):
      the reports are then those of the weighted estimate (intensity and pair NaN).

  Returns:
    One report per sampler, the closed-form uniform reference and the draws (`result.batches`);
    `print(result)` shows the table.

  Raises:
    TypeError: for a bad model, loss, sampler entry, feature source or argument types.
    ValueError: for bad sizes, an empty `samplers`, or anything `repulsive_batch` rejects.
  """
  if not isinstance(samplers, Mapping):
    raise TypeError(f"`samplers` must be a mapping name -> sampler or factory; got {samplers!r}.")
  if not samplers:
    raise ValueError("`samplers` is empty; give at least one sampler.")
  batch_size = _checks.integer(batch_size, "batch_size", 1)
  num_batches = _checks.integer(num_batches, "num_batches", 3)
  seed = _checks.integer(seed, "seed", 0)
  start_step = _checks.integer(start_step, "start_step", 0)
  instances = {}
  for name, entry in samplers.items():
    sampler = entry if isinstance(entry, _contract.Sampler) else entry() if callable(entry) else None
    if not isinstance(sampler, _contract.Sampler):
      raise TypeError(
          f"`samplers[{name!r}]` must be a tf_repulsive sampler or a factory of one; got {entry!r}.")
    instances[str(name)] = sampler
  data, sampling_space = _sampling.sampling_data(model, x, y, features)
  gradients = _gradients.per_example_gradients(model, loss_fn, x, y, variables=variables, sketch_dim=sketch_dim,
                                               seed=seed, chunk_size=chunk_size)
  batches, radii, weights = {}, {}, {}
  for name, sampler in instances.items():
    batcher = _pipeline.repulsive_batch(batch_size, sampler, seed=seed, start_step=start_step,
                                        inclusion_weights=inclusion_weights)
    data.apply(batcher)
    batches[name] = _sampling.draw_batches(batcher, num_batches, start_step=start_step)
    radii[name] = batcher.stats().report.get("radius")
    if inclusion_weights:
      weights[name] = _sampling.batch_weights(batcher, batches[name])
  num_parameters = sum(int(np.prod(v.shape)) for v in _gradients.resolve_variables(model, variables))
  result = _variance_split.variance_split(gradients, batches, radii=radii, weights=weights,
                                          gradient_space=_gradient_space(num_parameters, variables, sketch_dim))
  return dataclasses.replace(result, sampling_space=sampling_space)
