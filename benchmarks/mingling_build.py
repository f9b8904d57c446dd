"""Build time of the mingling samplers at scale, and how exact their mingling values are.

  .venv/bin/python -m benchmarks.mingling_build [case ...]

Each case runs in a fresh process on synthetic labelled features: per class a few blobs in a
low-dimensional latent space, mapped linearly to d dimensions plus isotropic noise (real features
have a low intrinsic dimension); the blob width sets how much classes mingle. Printed per case:
the mingling values' histogram; `mingling_values` alone (the exhaustive search of the previous
implementation, scikit-learn's, is timed beside it on the cases marked so); the whole build of
`repulsive_batch(50, AnnealPDS())` (reading, radius, mingling values, drawer: Easy and Dense PDS
build the same); the agreement the build reports (on its fixed 2000-point check) and the
agreement on an independent random subsample of 1000 points, both against exhaustive search.
"""

import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# name -> (N, d, classes, latent dimension, blob width, time scikit-learn's exhaustive search too)
CASES = {
    "60000 x 784, 10 classes, MNIST's mingling histogram": (60_000, 784, 10, 16, 0.7, True),
    "60000 x 784, 10 classes, strongly mingled": (60_000, 784, 10, 16, 1.0, False),
    "1M x 64, 10 classes": (1_000_000, 64, 10, 16, 0.7, False),
    "320k x 128, 250 classes (a quarter of the ImageNet-sized case)": (320_000, 128, 250, 32, 0.7, False),
    "1.28M x 128, 1000 classes (ImageNet-sized embeddings)": (1_280_000, 128, 1000, 32, 0.7, False),
    # Blobs 10 times wider than their spread of centres, in all 128 dimensions: no cluster structure.
    "1M x 128, 10 classes, no cluster structure": (1_000_000, 128, 10, 128, 10.0, False),
}


def labelled_features(num_points, dim, classes, latent, width, seed=0):
  import numpy as np
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, classes, num_points)
  centres = rng.normal(0.0, 1.0, (classes, 4, latent)).astype(np.float32)
  projection = rng.normal(0.0, 1.0 / np.sqrt(latent), (latent, dim)).astype(np.float32)
  features = np.empty((num_points, dim), np.float32)
  for start in range(0, num_points, 65536):
    rows = slice(start, start + 65536)
    count = len(labels[rows])
    points = centres[labels[rows], rng.integers(0, 4, count)] + width * rng.standard_normal((count, latent), np.float32)
    features[rows] = points @ projection + 0.1 * rng.standard_normal((count, dim), np.float32)
  return features, labels


def measure(name):
  import numpy as np
  import tensorflow as tf
  from sklearn import neighbors as sk_neighbors

  import tf_repulsive
  from tf_repulsive import _mingling

  num_points, dim, classes, latent, width, with_sklearn = CASES[name]
  features, labels = labelled_features(num_points, dim, classes, latent, width)
  start = time.perf_counter()
  mingling = _mingling.mingling_values(features, labels, 5)
  alone = time.perf_counter() - start
  histogram = np.bincount(mingling.values, minlength=6) / num_points
  print(f"{name}: mingling histogram {np.round(histogram, 3).tolist()}")
  print(f"  mingling_values: {alone:.1f} s, reported agreement {mingling.agreement:.4f}")

  check = np.sort(np.random.default_rng(12345).choice(num_points, 1000, replace=False))
  search = _mingling._Search(features, 5)
  others = _mingling._neighbors_of(check, search.nearest(check, np.arange(num_points), 6), 5)
  exact = _mingling._count_others(labels, check, others, None)
  print(f"  agreement on an independent subsample of 1000: {np.mean(mingling.values[check] == exact):.4f}")

  if with_sklearn:
    start = time.perf_counter()
    sk_neighbors.NearestNeighbors(n_neighbors=6).fit(features).kneighbors(features)
    print(f"  scikit-learn exhaustive search (the previous implementation): {time.perf_counter() - start:.1f} s")

  dataset = tf.data.Dataset.from_tensor_slices((features, labels))
  batcher = tf_repulsive.repulsive_batch(50, tf_repulsive.AnnealPDS(), seed=0, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  start = time.perf_counter()
  batches = dataset.apply(batcher)
  next(iter(batches))
  print(f"  build of repulsive_batch(50, AnnealPDS()) and its first batch: {time.perf_counter() - start:.1f} s, "
        f"agreement {batcher.stats().report['mingling_agreement']:.4f}", flush=True)


def main(argv):
  if len(argv) == 3 and argv[1] == "--child":
    measure(argv[2])
    return
  names = argv[1:] or list(CASES)
  for name in names:
    if name not in CASES:
      raise SystemExit(f"unknown case {name!r}; choose from {list(CASES)}")
    subprocess.run([sys.executable, __file__, "--child", name], check=True)


if __name__ == "__main__":
  main(sys.argv)
