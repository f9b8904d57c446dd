"""Per-batch sampling cost of Vanilla PDS (the paper's Table 1 setting) and pipeline throughput.

Part 1: time to sample one mini-batch with `VanillaPDS()` (radius = half the median distance) for
each k of `sizes` on N = 8189 points of 4198 dimensions, the Oxford-Flowers setting of the paper's
Table 1: 4096 "off-the-shelf" features (synthetic, clustered by class) concatenated with a one-hot
label of 102 classes weighted by `label_weight`, as in the paper's appendix.
Part 2: batches/s of `repulsive_batch(50, VanillaPDS())` against `shuffle(N).batch(50)` on
60000 x 784 float32, both measured here in the same run.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import tensorflow as tf

from examples import common
from examples import settings
import tf_repulsive

# The paper's Table 1 / appendix table: CPU seconds to sample one mini-batch.
_PAPER_PDS_SECONDS = {50: 0.0461, 80: 0.0795, 102: 0.1048, 150: 0.1657, 200: 0.2391}
# Batches drawn before timing starts, past the first batch's one-time work.
_WARM_UP_BATCHES = 20


@dataclasses.dataclass(frozen=True)
class Config(settings.Settings):
  """One benchmark run."""

  sizes: tuple[int, ...] = settings.setting((50, 80, 102, 150, 200), "Mini-batch sizes k of part 1.", minimum=1)
  label_weight: float = settings.setting(
      0.3, "Weight w of the one-hot label part; (1 - w) weighs the image features. The paper's main text "
      "uses 0.7, where (with these features) no batch holds two points of one class.", minimum=0.0, maximum=1.0)
  batches: int = settings.setting(300, "Batches timed per measurement (after warm-up).", minimum=1)
  throughput_batches: int = settings.setting(3000, "Batches timed in part 2.", minimum=1)
  distance_cache_mib: int = settings.setting(
      512, "BatcherOptions.distance_cache_bytes in MiB (0: Gram blocks per batch).", minimum=0)
  seed: int = settings.setting(0, "Seed of the synthetic data and the sampler.")


def mnist_like(seed: int, num_points: int = 60000) -> tuple[np.ndarray, np.ndarray]:
  """MNIST-shaped float32 images [num_points, 784] in [0, 1] around 10 prototypes, and their labels."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, num_points)
  prototypes = rng.uniform(0.0, 1.0, size=(10, 784))
  images = np.clip(prototypes[labels] + rng.normal(0.0, 0.3, size=(num_points, 784)), 0.0, 1.0)
  return images.astype(np.float32), labels.astype(np.int64)


def _seconds_per_batch(dataset: tf.data.Dataset, count: int) -> tuple[float, float]:
  """Wall and process-CPU seconds per batch of a new iterator over `count` batches, after a warm-up."""
  iterator = iter(dataset)
  for _ in range(_WARM_UP_BATCHES):
    next(iterator)
  return common.seconds_per_element(iterator, count)


def table_one(config: Config) -> None:
  """Part 1: prints the per-batch time of VanillaPDS beside the paper's, for each k of `config.sizes`."""
  features = common.flowers_like_features(config.seed, config.label_weight)
  constant = tf.constant(features)
  indices = tf.data.Dataset.range(features.shape[0])
  cache_bytes = config.distance_cache_mib * 2**20
  print(f"\nPart 1: VanillaPDS on N = {features.shape[0]}, d = {features.shape[1]} "
        f"(label weight {config.label_weight}), distance cache {'on' if cache_bytes else 'off'}")
  print(f"{'k':>5} {'prep s':>7} {'wall ms':>8} {'cpu ms':>7} {'paper ms':>9} {'speed-up':>9} "
        f"{'fallback':>9} radius")
  for k in config.sizes:
    start = time.perf_counter()
    # start_step=0: the stream is iterated here, not by `fit` with its callback.
    batcher = tf_repulsive.repulsive_batch(k, tf_repulsive.VanillaPDS(), features=lambda i: tf.gather(constant, i),
                                           seed=config.seed, start_step=0,
                                           options=tf_repulsive.BatcherOptions(distance_cache_bytes=cache_bytes))
    # Elements are indices, so a batch is exactly the sampled index set.
    batches_of_indices = indices.apply(batcher)
    prep = time.perf_counter() - start
    wall, cpu = _seconds_per_batch(batches_of_indices, config.batches)
    stats = batcher.stats()
    paper = _PAPER_PDS_SECONDS.get(k)
    print(f"{k:>5} {prep:>7.1f} {wall * 1e3:>8.3f} {cpu * 1e3:>7.3f} "
          f"{paper * 1e3 if paper else float('nan'):>9.1f} "
          f"{paper / wall if paper else float('nan'):>8.0f}x "
          f"{stats.fallback_batches / max(stats.batches, 1):>8.1%} {stats.report['radius']:.4f}")


def throughput(config: Config) -> None:
  """Part 2: prints batches/s of VanillaPDS against shuffle + batch on MNIST-shaped data."""
  images, labels = mnist_like(config.seed)
  data = tf.data.Dataset.from_tensor_slices((images, labels))
  baseline_wall, _ = _seconds_per_batch(data.shuffle(len(labels), seed=config.seed).batch(50).repeat(),
                                        config.throughput_batches)
  start = time.perf_counter()
  batcher = tf_repulsive.repulsive_batch(50, tf_repulsive.VanillaPDS(), seed=config.seed, start_step=0)
  pds = data.apply(batcher)
  prep = time.perf_counter() - start
  pds_wall, _ = _seconds_per_batch(pds, config.throughput_batches)
  stats = batcher.stats()
  print(f"\nPart 2: batches/s on {images.shape[0]} x {images.shape[1]} float32, k = 50")
  print(f"  shuffle(N).batch(50):               {1 / baseline_wall:8.0f} batches/s")
  print(f"  repulsive_batch(50, VanillaPDS()):  {1 / pds_wall:8.0f} batches/s "
        f"(one-time preprocessing {prep:.1f} s, radius {stats.report['radius']:.3f}, "
        f"fallback batches {stats.fallback_batches}/{stats.batches})")
  print(f"  ratio PDS / shuffle+batch:          {baseline_wall / pds_wall:8.2f}")


def benchmark(config: Config) -> None:
  """Both parts; prints their tables."""
  table_one(config)
  throughput(config)
