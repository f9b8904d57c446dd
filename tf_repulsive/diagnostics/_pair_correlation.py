"""The pair-correlation function g(r) of drawn batches in feature space.

This module imports numpy, never TensorFlow or Keras; tests/package/test_diagnostics.py checks it.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Sequence

import numpy as np

from tf_repulsive import _checks
from tf_repulsive.diagnostics import _kernels


@dataclasses.dataclass(frozen=True, eq=False)
class PairCorrelation:
  """Empirical pair-correlation function g(r) of a sampler's batches in feature space.

  Attributes:
    bin_edges: `[B + 1]` increasing distances.
    g: `[B]` fraction of within-batch pairs per bin / fraction of reference pairs per bin; NaN
      where no reference pair falls. 1 means "as often as independent pairs", 0 "never".
    counts: `[B]` within-batch pairs per bin, over all batches (their Poisson error is a guide to
      how much a bin's g can be trusted).
    reference_fraction: `[B]` fraction of the reference pair weight per bin.
    num_pairs: within-batch pairs in total, including those beyond the last edge.
    reference: "uniform" or "marginal" (see `pair_correlation`).
  """

  bin_edges: np.ndarray
  g: np.ndarray
  counts: np.ndarray
  reference_fraction: np.ndarray
  num_pairs: int
  reference: str

  @property
  def bin_centres(self) -> np.ndarray:
    """`[B]` midpoints of the bins."""
    return 0.5 * (self.bin_edges[1:] + self.bin_edges[:-1])


def pair_correlation(features: Any, batches: Any, r_bins: int | Sequence[float] = 20, *,
                     reference: str = "uniform", max_reference_pairs: int = 1_000_000,
                     seed: int = 0) -> PairCorrelation:
  """Empirical pair-correlation function g(r) of mini-batches in feature space.

  g(r) = (fraction of within-batch pairs at distance in the bin) / (fraction of reference pairs
  in the bin). With `reference="uniform"` the reference pairs are distinct points of the dataset
  drawn uniformly: g ≈ 1 at all r for uniform sampling, g = 0 below the disk radius for Vanilla PDS.
  With `reference="marginal"` a pair (i, j) is weighted by p̂_i p̂_j, the empirical inclusion
  frequencies of the batches: this divides out a changed intensity (Easy / Dense / Anneal PDS
  prefer some points) and leaves ρ(x, y)/(λ(x) λ(y)), the factor Theorem 1's pair term weighs.

  The reference uses all N(N − 1)/2 pairs when there are at most `max_reference_pairs`, otherwise
  that many pairs drawn with `seed`. Distances are exact Euclidean in float64.

  Args:
    features: `[N, ...]` numeric; each row flattened is a point (the space the sampler used).
    batches: `[M, k]` int indices of the draws (k >= 2), e.g. from `draw_batches`.
    r_bins: number of equal bins from 0 to the largest distance seen, or increasing bin edges >= 0.
    reference: "uniform" or "marginal".
    max_reference_pairs: bound on the reference pairs (>= 1).
    seed: seed of the reference subsample.

  Returns:
    The histogram (bin edges, g, within-batch counts, reference fractions).

  Raises:
    TypeError: for non-numeric features, non-integer batches or bins count, a non-str reference.
    ValueError: for bad shapes, non-finite features, bad indices, bad bin edges, unknown reference.
  """
  points = np.asarray(features)
  if points.dtype.kind not in "fiu":
    raise TypeError(f"`features` must be numeric; got dtype {points.dtype}.")
  if points.ndim < 1 or points.shape[0] < 2:
    raise ValueError(f"`features` must be [N, ...] with N >= 2; got shape {points.shape}.")
  points = points.reshape(points.shape[0], -1).astype(np.float64)
  if not np.all(np.isfinite(points)):
    raise ValueError("`features` contains NaN or infinite values.")
  num_points = points.shape[0]
  batches = _kernels.check_batches(batches, num_points, "batches", 1)
  if batches.shape[1] < 2:
    raise ValueError("`batches` must have batch size >= 2 to hold pairs.")
  if not isinstance(reference, str):
    raise TypeError(f"`reference` must be 'uniform' or 'marginal'; got {reference!r}.")
  if reference not in ("uniform", "marginal"):
    raise ValueError(f"`reference` must be 'uniform' or 'marginal'; got {reference!r}.")
  max_reference_pairs = _checks.integer(max_reference_pairs, "max_reference_pairs", 1)
  seed = _checks.integer(seed, "seed", 0)
  edges = None  # for a bin count: known once the distances are
  if isinstance(r_bins, numbers.Integral) and not isinstance(r_bins, bool):
    num_bins = _checks.integer(r_bins, "r_bins", 1)
  elif isinstance(r_bins, (str, bool, numbers.Number)):
    raise TypeError(f"`r_bins` must be a bin count or a sequence of bin edges; got {r_bins!r}.")
  else:
    edges = np.asarray(r_bins, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 2 or not np.all(np.isfinite(edges)) or edges[0] < 0 \
        or np.any(np.diff(edges) <= 0):
      raise ValueError(
          f"`r_bins` edges must be finite, >= 0, strictly increasing, at least 2; got {r_bins!r}.")

  first, second = np.triu_indices(batches.shape[1], 1)
  batch_distances = _kernels.pair_distances(points, batches[:, first].ravel(), batches[:, second].ravel())

  inclusion = np.bincount(batches.ravel(), minlength=num_points).astype(np.float64)
  num_all_pairs = num_points * (num_points - 1) // 2
  if num_all_pairs <= max_reference_pairs:
    left, right = np.triu_indices(num_points, 1)
    weights = None if reference == "uniform" else inclusion[left] * inclusion[right]
  else:
    rng = np.random.default_rng(seed)
    if reference == "uniform":
      left = rng.integers(num_points, size=max_reference_pairs)
      right = (left + 1 + rng.integers(num_points - 1, size=max_reference_pairs)) % num_points
    else:
      # Sampling i and j from p̂ weights each pair by p̂_i p̂_j; pairs i == j are not pairs.
      left, right = rng.choice(num_points, size=(2, max_reference_pairs), p=inclusion / inclusion.sum())
      distinct = left != right
      left, right = left[distinct], right[distinct]
    weights = None
  reference_distances = _kernels.pair_distances(points, left, right)

  if edges is None:
    top = max(float(batch_distances.max()), float(reference_distances.max()))
    edges = np.linspace(0.0, top if top > 0 else 1.0, num_bins + 1)
  counts = np.histogram(batch_distances, edges)[0]
  reference_mass = np.histogram(reference_distances, edges, weights=weights)[0].astype(np.float64)
  total_mass = reference_distances.size if weights is None else weights.sum()
  reference_fraction = reference_mass / total_mass
  batch_fraction = counts / batch_distances.size
  g = np.full(counts.shape, np.nan)
  np.divide(batch_fraction, reference_fraction, out=g, where=reference_fraction > 0)
  return PairCorrelation(bin_edges=edges, g=g, counts=counts, reference_fraction=reference_fraction,
                         num_pairs=int(batch_distances.size), reference=reference)
