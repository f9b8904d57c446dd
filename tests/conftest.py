"""Shared fixtures. TensorFlow's C++ logging is silenced before it is imported."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from sklearn import datasets as sk_datasets  # noqa: E402


@pytest.fixture(scope="session")
def digits():
  """scikit-learn's bundled handwritten digits: float32 [1797, 64] in [0, 1], int64 labels."""
  data = sk_datasets.load_digits()
  return data.data.astype(np.float32) / 16.0, data.target.astype(np.int64)


def pairwise_distances(points: np.ndarray) -> np.ndarray:
  """Exact float64 Euclidean distances, +inf on the diagonal."""
  points = points.astype(np.float64)
  distances = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(-1))
  np.fill_diagonal(distances, np.inf)
  return distances
