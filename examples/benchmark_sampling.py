r"""Per-batch sampling cost of Vanilla PDS (the paper's Table 1 setting) and pipeline throughput.

Part 1: time to sample one mini-batch with `VanillaPDS()` (radius = half the median distance) for
k = 50, 80, 102, 150, 200 on N = 8189 points of 4198 dimensions, the Oxford-Flowers setting of
the paper's Table 1: 4096 "off-the-shelf" features (synthetic, clustered by class) concatenated with
a one-hot label of 102 classes weighted by `--label_weight`, as in the paper's appendix.
Part 2: batches/s of `repulsive_batch(50, VanillaPDS())` against `shuffle(N).batch(50)` on
60000 x 784 float32, both measured here in the same run.

  python examples/benchmark_sampling.py
  python examples/benchmark_sampling.py --label_weight=0.7 --sizes=80,150
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import common  # noqa: E402
import tf_repulsive  # noqa: E402

FLAGS = flags.FlagValues()
_SIZES = flags.DEFINE_list("sizes", ["50", "80", "102", "150", "200"], "Mini-batch sizes k of part 1.",
                           flag_values=FLAGS)
_LABEL_WEIGHT = flags.DEFINE_float(
    "label_weight", 0.3, "Weight w of the one-hot label part; (1 - w) weighs the image features. "
    "The paper's main text uses 0.7, where (with these features) no batch holds two points of one class.",
    flag_values=FLAGS)
_BATCHES = flags.DEFINE_integer("batches", 300, "Batches timed per measurement (after warm-up).", flag_values=FLAGS)
_THROUGHPUT_BATCHES = flags.DEFINE_integer("throughput_batches", 3000, "Batches timed in part 2.", flag_values=FLAGS)
_CACHE = flags.DEFINE_integer(
    "distance_cache_mib", 512, "repulsive_batch's distance_cache_bytes in MiB (0: Gram blocks per batch).",
    flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the synthetic data and the sampler.", flag_values=FLAGS)

# The paper's Table 1 / appendix table: CPU seconds to sample one mini-batch.
_PAPER_PDS_SECONDS = {50: 0.0461, 80: 0.0795, 102: 0.1048, 150: 0.1657, 200: 0.2391}


def flowers_like_features(seed: int, label_weight: float, num_points: int = 8189,
                          feature_dim: int = 4096, num_classes: int = 102) -> np.ndarray:
  """Clustered non-negative unit-norm features with a weighted one-hot label appended."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, num_classes, num_points)
  centers = rng.gamma(0.5, 1.0, size=(num_classes, feature_dim))
  images = np.maximum(centers[labels] + rng.normal(0.0, 1.0, size=(num_points, feature_dim)), 0.0)
  images /= np.linalg.norm(images, axis=1, keepdims=True)
  one_hot = np.eye(num_classes)[labels]
  return np.concatenate([(1 - label_weight) * images, label_weight * one_hot], axis=1).astype(np.float32)


def mnist_like(seed: int, num_points: int = 60000) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, num_points)
  prototypes = rng.uniform(0.0, 1.0, size=(10, 784))
  images = np.clip(prototypes[labels] + rng.normal(0.0, 0.3, size=(num_points, 784)), 0.0, 1.0)
  return images.astype(np.float32), labels.astype(np.int64)


def _time_iteration(dataset: tf.data.Dataset, count: int) -> tuple[float, float]:
  """Wall and process-CPU seconds per element over `count` elements, after a warm-up."""
  iterator = iter(dataset)
  for _ in range(20):
    next(iterator)
  wall, cpu = time.perf_counter(), time.process_time()
  for _ in range(count):
    next(iterator)
  return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count


def table_one(features: np.ndarray, sizes: list[int], batches: int, cache_bytes: int) -> None:
  constant = tf.constant(features)
  indices = tf.data.Dataset.range(features.shape[0])
  print(f"\nPart 1: VanillaPDS on N = {features.shape[0]}, d = {features.shape[1]} "
        f"(label weight {_LABEL_WEIGHT.value}), distance cache {'on' if cache_bytes else 'off'}")
  print(f"{'k':>5} {'prep s':>7} {'wall ms':>8} {'cpu ms':>7} {'paper ms':>9} {'speed-up':>9} "
        f"{'fallback':>9} radius")
  for k in sizes:
    start = time.perf_counter()
    # start_step=0: the stream is iterated here, not by `fit` with its callback.
    batcher = tf_repulsive.repulsive_batch(
        k, tf_repulsive.VanillaPDS(), feature_fn=lambda i: tf.gather(constant, i), seed=_SEED.value,
        start_step=0, distance_cache_bytes=cache_bytes)
    # Elements are indices, so a batch is exactly the sampled index set.
    batches_of_indices = indices.apply(batcher)
    prep = time.perf_counter() - start
    wall, cpu = _time_iteration(batches_of_indices, batches)
    stats = batcher.stats()
    paper = _PAPER_PDS_SECONDS.get(k)
    print(f"{k:>5} {prep:>7.1f} {wall * 1e3:>8.3f} {cpu * 1e3:>7.3f} "
          f"{paper * 1e3 if paper else float('nan'):>9.1f} "
          f"{paper / wall if paper else float('nan'):>8.0f}x "
          f"{stats.fallback_batches / max(stats.batches, 1):>8.1%} {stats.radius:.4f}")


def throughput(batches: int) -> None:
  images, labels = mnist_like(_SEED.value)
  data = tf.data.Dataset.from_tensor_slices((images, labels))
  baseline_wall, _ = _time_iteration(data.shuffle(len(labels), seed=_SEED.value).batch(50).repeat(), batches)
  start = time.perf_counter()
  batcher = tf_repulsive.repulsive_batch(50, tf_repulsive.VanillaPDS(), seed=_SEED.value, start_step=0)
  pds = data.apply(batcher)
  prep = time.perf_counter() - start
  pds_wall, _ = _time_iteration(pds, batches)
  stats = batcher.stats()
  print(f"\nPart 2: batches/s on {images.shape[0]} x {images.shape[1]} float32, k = 50")
  print(f"  shuffle(N).batch(50):               {1 / baseline_wall:8.0f} batches/s")
  print(f"  repulsive_batch(50, VanillaPDS()):  {1 / pds_wall:8.0f} batches/s "
        f"(one-time preprocessing {prep:.1f} s, radius {stats.radius:.3f}, "
        f"fallback batches {stats.fallback_batches}/{stats.batches})")
  print(f"  ratio PDS / shuffle+batch:          {baseline_wall / pds_wall:8.2f}")


def main(argv):
  del argv
  sizes = [int(k) for k in _SIZES.value]
  features = flowers_like_features(_SEED.value, _LABEL_WEIGHT.value)
  table_one(features, sizes, _BATCHES.value, _CACHE.value * 2**20)
  throughput(_THROUGHPUT_BATCHES.value)


if __name__ == "__main__":
  common.run(main, FLAGS)
