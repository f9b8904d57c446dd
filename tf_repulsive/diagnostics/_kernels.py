"""Numpy building blocks of the estimators: the check of drawn batches and chunked float64 kernels.

This module imports numpy, never TensorFlow or Keras; tests/package/test_diagnostics.py checks it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Bound on the float64 scratch arrays of the numpy kernels (elements), so memory stays O(this)
# whatever N, k, M and the gradient dimension.
_CHUNK_ELEMENTS = 2**22


def check_batches(batches: Any, num_points: int, name: str, least_batches: int) -> np.ndarray:
  """`[M, k]` int64 batches of distinct indices into N points."""
  batches = np.asarray(batches)
  if batches.dtype.kind not in "iu":
    raise TypeError(f"`{name}` must be an integer [M, k] array of indices; got dtype {batches.dtype}.")
  if batches.ndim != 2 or batches.shape[1] < 1:
    raise ValueError(f"`{name}` must be [num_batches, batch_size]; got shape {batches.shape}.")
  if batches.shape[0] < least_batches:
    raise ValueError(f"`{name}` must hold at least {least_batches} batches; got {batches.shape[0]}.")
  if batches.min() < 0 or batches.max() >= num_points:
    raise ValueError(f"`{name}` has indices outside [0, {num_points}).")
  ordered = np.sort(batches, axis=1)
  if np.any(ordered[:, 1:] == ordered[:, :-1]):
    raise ValueError(f"`{name}` has a batch with a repeated index; batches hold distinct points.")
  return batches.astype(np.int64)


def _row_chunk(row_elements: int) -> int:
  return max(1, _CHUNK_ELEMENTS // max(1, row_elements))


def squared_norms(gradients: np.ndarray, centre: np.ndarray | None = None) -> np.ndarray:
  """`[N]` float64 |g_i − centre|², in chunks (gradients may be float32 and large)."""
  rows = _row_chunk(gradients.shape[1])
  norms = []
  for start in range(0, gradients.shape[0], rows):
    block = gradients[start:start + rows].astype(np.float64)
    if centre is not None:
      block -= centre
    norms.append(np.einsum("ij,ij->i", block, block))
  return np.concatenate(norms)


def batch_means(gradients: np.ndarray, batches: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
  """`[M, D]` float64 mean gradient of each batch, each element's times its weight when given."""
  rows = _row_chunk(batches.shape[1] * gradients.shape[1])
  means = []
  for start in range(0, batches.shape[0], rows):
    block = gradients[batches[start:start + rows]].astype(np.float64)
    if weights is not None:
      block *= weights[start:start + rows, :, None]
    means.append(block.mean(axis=1))
  return np.concatenate(means)


def pair_distances(points: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
  """Exact float64 |x_left − x_right| per index pair, in chunks (no Gram-matrix cancellation)."""
  rows = _row_chunk(points.shape[1])
  out = np.empty(left.size)
  for start in range(0, left.size, rows):
    diff = points[left[start:start + rows]] - points[right[start:start + rows]]
    out[start:start + rows] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
  return out
