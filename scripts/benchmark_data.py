"""The synthetic datasets the benchmarks share (`PYTHONPATH=.` to import them as `scripts.benchmark_data`)."""

import numpy as np
from sklearn import datasets as sk_datasets


def mnist_like(num_points=60000, dim=784, classes=10, seed=0):
  """Ten overlapping clusters in [0, 1]^784 with their labels (the mingling values then vary)."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, classes, num_points)
  centres = rng.random((classes, dim), dtype=np.float32)
  features = np.clip(centres[labels] + rng.normal(0.0, 0.35, (num_points, dim)).astype(np.float32), 0.0, 1.0)
  return features, labels


def dataset(name, num_points, dim, seed=0):
  """`[num_points, dim]` float32 features and 10 labels: `gaussian`, `clusters`, `mnist_like` or `digits`.

  `gaussian`: standard normal; `clusters`: 10 well separated Gaussian clusters, one per label;
  `mnist_like`: as `mnist_like`; `digits`: the bundled digits' 1257 x 64 training split
  (`num_points` and `dim` do not apply).
  """
  if name == "mnist_like":
    return mnist_like(num_points, dim, seed=seed)
  if name == "digits":
    digits = sk_datasets.load_digits()
    return (digits.data[:1257] / 16.0).astype(np.float32), digits.target[:1257]
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, num_points)
  features = rng.normal(size=(num_points, dim)).astype(np.float32)
  if name == "clusters":
    features += 4.0 * rng.normal(size=(10, dim)).astype(np.float32)[labels]
  elif name != "gaussian":
    raise ValueError(f"--data: unknown dataset {name!r}; use gaussian, clusters, mnist_like or digits.")
  return features, labels
