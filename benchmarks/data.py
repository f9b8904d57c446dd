"""The synthetic datasets the benchmarks share."""

import numpy as np
from sklearn import datasets as sk_datasets


def mnist_like(num_points=60000, dim=784, classes=10, seed=0, noise=0.35, clip=True):
  """Ten overlapping clusters around centres in [0, 1]^784 with their labels (the mingling values then vary).

  Clipped to [0, 1], pixel-range data; with `clip=False` (and a wider `noise`) the clusters are Gaussian.
  """
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, classes, num_points)
  centres = rng.random((classes, dim), dtype=np.float32)
  features = centres[labels] + rng.normal(0.0, noise, (num_points, dim)).astype(np.float32)
  return (np.clip(features, 0.0, 1.0) if clip else features), labels


def dataset(name, num_points, dim, seed=0):
  """`[num_points, dim]` float32 features and 10 labels: `gaussian`, `clusters`, `mnist_like`,
  `gaussian_clusters` or `digits`.

  `gaussian`: standard normal; `clusters`: 10 well separated Gaussian clusters, one per label;
  `mnist_like`: as `mnist_like`; `gaussian_clusters`: the same centres with noise 0.7, not clipped;
  `digits`: the bundled digits' 1257 x 64 training split (`num_points` and `dim` do not apply).
  """
  if name == "mnist_like":
    return mnist_like(num_points, dim, seed=seed)
  if name == "gaussian_clusters":
    return mnist_like(num_points, dim, seed=seed, noise=0.7, clip=False)
  if name == "digits":
    digits = sk_datasets.load_digits()
    return (digits.data[:1257] / 16.0).astype(np.float32), digits.target[:1257]
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, num_points)
  features = rng.normal(size=(num_points, dim)).astype(np.float32)
  if name == "clusters":
    features += 4.0 * rng.normal(size=(10, dim)).astype(np.float32)[labels]
  elif name != "gaussian":
    raise ValueError(f"--data: unknown dataset {name!r}; use gaussian, clusters, mnist_like, gaussian_clusters or "
                     "digits.")
  return features, labels
