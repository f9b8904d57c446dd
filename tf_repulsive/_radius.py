"""The default disk radius: half the median pairwise distance (the paper's Table 1 setting)."""

from __future__ import annotations

import numpy as np

# The estimate is a property of the data, not of a run: a fixed subsample seed keeps the radius
# identical whatever seed the batches use.
_SUBSAMPLE_SEED = 20180529
_SUBSAMPLE_SIZE = 2000


def half_median_distance(features: np.ndarray, subsample: int = _SUBSAMPLE_SIZE) -> float:
  """Half the median Euclidean distance between distinct points of a seeded subsample.

  Args:
    features: `[N, d]` float array, N >= 2.
    subsample: at most this many points enter the estimate (all pairs among them).

  Returns:
    The radius as a Python float (0.0 when most points coincide).
  """
  n = features.shape[0]
  rng = np.random.default_rng(_SUBSAMPLE_SEED)
  rows = rng.choice(n, size=min(n, subsample), replace=False)
  points = features[rows].astype(np.float64)
  points -= points.mean(axis=0)
  sq_norms = np.einsum("ij,ij->i", points, points)
  sq_dist = sq_norms[:, None] + sq_norms[None, :] - 2.0 * points @ points.T
  upper = np.triu_indices(len(rows), k=1)
  return 0.5 * float(np.sqrt(max(np.median(sq_dist[upper]), 0.0)))
