"""Mingling indices (Illian et al.): how many of a point's nearest neighbours carry another label.

Pure numpy / scikit-learn: computed once per dataset, before any batch is drawn.
"""

from __future__ import annotations

import numpy as np
from sklearn import neighbors as sk_neighbors

from tf_repulsive import _progress

# Points whose neighbours are searched per call (the progress bar advances by this many).
_QUERY_CHUNK = 8192


def _validated(features: np.ndarray, labels: np.ndarray, neighbors: int) -> tuple[np.ndarray, np.ndarray]:
  features = np.asarray(features)
  labels = np.asarray(labels)
  if features.ndim != 2:
    raise ValueError(f"`features` must be a 2-D array [N, d]; got shape {features.shape}.")
  if not np.issubdtype(features.dtype, np.number):
    raise TypeError(f"`features` must be numeric; got dtype {features.dtype}.")
  if not np.all(np.isfinite(features)):
    raise ValueError("`features` contains NaN or infinite values; clean or impute them first.")
  if labels.shape != (features.shape[0],):
    raise ValueError(
        f"`labels` must be a 1-D array with one label per row of `features` ({features.shape[0]}); "
        f"got shape {labels.shape}.")
  if not np.issubdtype(labels.dtype, np.integer):
    raise TypeError(
        f"`labels` must be integer class ids; got dtype {labels.dtype}. Convert one-hot labels with argmax.")
  if isinstance(neighbors, bool) or not isinstance(neighbors, (int, np.integer)):
    raise TypeError(f"`neighbors` must be an int; got {neighbors!r}.")
  if not 1 <= neighbors < features.shape[0]:
    raise ValueError(
        f"`neighbors` must be in [1, N) = [1, {features.shape[0]}); got {neighbors}. "
        "Use fewer neighbours or more data.")
  return features, labels


def mingling_disagreements(features: np.ndarray, labels: np.ndarray, neighbors: int = 5, *,
                           verbose: bool = False) -> np.ndarray:
  """Counts, for every point, its K nearest neighbours (itself excluded) with another label.

  Args:
    features: `[N, d]` array; Euclidean distance is used.
    labels: `[N]` integer class labels (the marks).
    neighbors: K, the number of nearest neighbours.
    verbose: show a progress bar if the search takes more than about 2 s.

  Returns:
    `[N]` int64 array with values in `{0, ..., K}`: K times the mingling index.

  Raises:
    ValueError: for shapes that do not match, non-finite features or K outside [1, N).
    TypeError: for non-integer labels or non-numeric features.
  """
  features, labels = _validated(features, labels, neighbors)
  n = features.shape[0]
  search = sk_neighbors.NearestNeighbors(n_neighbors=neighbors + 1).fit(features)
  disagreements = np.empty(n, np.int64)
  with _progress.bar(f"mingling values ({neighbors} nearest neighbours)", n, verbose) as progress:
    for start in range(0, n, _QUERY_CHUNK):
      rows = slice(start, min(start + _QUERY_CHUNK, n))
      _, candidates = search.kneighbors(features[rows])
      size = candidates.shape[0]
      # With duplicated points the query point need not come first: drop it wherever it is, else
      # the farthest candidate, so that exactly K others remain.
      is_self = candidates == np.arange(rows.start, rows.stop)[:, None]
      drop = np.where(is_self.any(axis=1), is_self.argmax(axis=1), neighbors)
      keep = np.ones_like(candidates, dtype=bool)
      keep[np.arange(size), drop] = False
      others = candidates[keep].reshape(size, neighbors)
      disagreements[rows] = (labels[others] != labels[rows, None]).sum(axis=1)
      progress.update(size)
  return disagreements


def mingling_index(features: np.ndarray, labels: np.ndarray, neighbors: int = 5) -> np.ndarray:
  """The paper's mingling index M̄_K(x_i) for every point.

  The fraction of the K nearest neighbours of `x_i` (itself excluded, Euclidean distance) whose
  label differs from `x_i`'s: 0 for points deep inside their class, 1 for points surrounded by
  other classes.

  Args:
    features: `[N, d]` array of feature vectors.
    labels: `[N]` integer class labels.
    neighbors: K, the number of nearest neighbours (the paper uses 5).

  Returns:
    `[N]` float64 array with values in `{0, 1/K, ..., 1}`.

  Raises:
    ValueError: for shapes that do not match, non-finite features or K outside [1, N).
    TypeError: for non-integer labels or non-numeric features.
  """
  return mingling_disagreements(features, labels, neighbors) / neighbors
