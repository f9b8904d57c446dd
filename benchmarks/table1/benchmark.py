"""The paper's Table 1 side by side: CPU time to sample one mini-batch, k-DPP vs PDS vs uniform.

Table A: for each k of `sizes` on N = `num_points` points of 4198 dimensions (the Oxford-Flowers
setting, `common.flowers_like_features`), the time per batch of KDPP, FastKDPP, VanillaPDS and
Uniform through `repulsive_batch`, and the one-time preparation (for KDPP the kernel and its
eigendecomposition, made again for each k), beside the paper's numbers; with `dppy` installed
(never required), its exact k-DPP sampler on an eigendecomposition of KDPP's kernel as an outside
reference. Table B: VanillaPDS per-batch time at each N of `scaling_sizes` (d = 64, k = 80) and
the one-time preparation, showing that the per-batch cost does not grow with N.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import tensorflow as tf

from examples import common
from examples import settings
import tf_repulsive

# The paper's appendix table (CPU seconds per mini-batch).
PAPER_SECONDS = {
    "k-DPP": {50: 7.1680, 80: 29.687, 102: 58.4086, 150: 189.0303, 200: 436.4746},
    "Fast k-DPP": {50: 0.1032, 80: 0.3312, 102: 0.6512, 150: 1.8745, 200: 4.1964},
    "PDS": {50: 0.0461, 80: 0.0795, 102: 0.1048, 150: 0.1657, 200: 0.2391},
}


@dataclasses.dataclass(frozen=True)
class Config(settings.Settings):
  """One benchmark run."""

  sizes: tuple[int, ...] = settings.setting((50, 80, 102, 150, 200), "Batch sizes k of table A.", minimum=1)
  num_points: int = settings.setting(8189, "N of table A.", minimum=2)
  label_weight: float = settings.setting(0.3, "One-hot label weight of table A's features.",
                                         minimum=0.0, maximum=1.0)
  batches: int = settings.setting(20, "Batches timed per cell (PDS and uniform use 10x).", minimum=1)
  scaling_sizes: tuple[int, ...] = settings.setting((10000, 100000, 1000000), "N of table B.", minimum=2)
  seed: int = settings.setting(0, "Seed of the data and the samplers.")


def time_per_batch(features: np.ndarray, sampler: tf_repulsive.Sampler, k: int, batches: int, seed: int
                   ) -> tuple[float, float, float, tf_repulsive.SamplingStats]:
  """(one-time preparation s, wall s and process-CPU s per batch, counters) through repulsive_batch."""
  constant = tf.constant(features)
  start = time.perf_counter()
  # start_step=0: the stream is iterated here, not by `fit` with its callback.
  batcher = tf_repulsive.repulsive_batch(k, sampler, features=lambda i: tf.gather(constant, i), seed=seed, start_step=0)
  # Elements are indices, so a batch is exactly the sampled index set.
  iterator = iter(tf.data.Dataset.range(features.shape[0]).apply(batcher))
  preparation = time.perf_counter() - start
  next(iterator)  # the first batch also traces the pipeline
  return (preparation, *common.seconds_per_element(iterator, batches), batcher.stats())


def rbf_eigendecomposition(features: np.ndarray, bandwidth: float) -> tuple[np.ndarray, np.ndarray]:
  """Eigenvalues (clipped at 0) and eigenvectors of the kernel exp(-|x - y|² / (2 bandwidth²))."""
  features = features.astype(np.float64)
  norms = np.einsum("ij,ij->i", features, features)
  squared_distances = np.maximum(norms[:, None] + norms[None, :] - 2 * features @ features.T, 0.0)
  eigenvalues, eigenvectors = np.linalg.eigh(np.exp(-squared_distances / (2.0 * bandwidth**2)))
  return np.maximum(eigenvalues, 0.0), eigenvectors


def dppy_seconds_per_batch(features: np.ndarray, bandwidth: float, sizes: tuple[int, ...], batches: int,
                           seed: int) -> list[float] | None:
  """Per k, dppy's exact k-DPP sampler's CPU seconds per batch on KDPP's kernel; None without dppy."""
  try:
    from dppy.finite_dpps import FiniteDPP  # optional outside reference
  except ImportError:
    return None
  dpp = FiniteDPP("likelihood", L_eig_dec=rbf_eigendecomposition(features, bandwidth))
  rng = np.random.RandomState(seed)
  seconds = []
  for k in sizes:
    start = time.process_time()
    for _ in range(batches):
      dpp.sample_exact_k_dpp(size=k, random_state=rng)
    seconds.append((time.process_time() - start) / batches)
  return seconds


def table_a(config: Config) -> None:
  """Prints table A: every sampler's seconds per batch for each k, beside the paper's."""
  features = common.flowers_like_features(config.seed, config.label_weight, config.num_points)
  print(f"\nTable A: seconds per mini-batch (process CPU time; wall time in brackets), "
        f"N = {features.shape[0]}, d = {features.shape[1]}; one-time preparation in the last column")
  print(f"{'':12}" + "".join(f"{'k=' + str(k):>22}" for k in config.sizes)
        + f"{'prep s (k=' + str(config.sizes[0]) + ')':>16}")
  stats = {}
  for name, make in {"k-DPP": tf_repulsive.KDPP, "Fast k-DPP": tf_repulsive.FastKDPP, "PDS": tf_repulsive.VanillaPDS,
                     "Uniform": tf_repulsive.Uniform}.items():
    cells, preparation = [], None
    # The k-DPPs take seconds per batch; PDS and uniform take milliseconds and get more batches.
    batches = config.batches if "k-DPP" in name else 10 * config.batches
    for k in config.sizes:
      prep, wall, cpu, stats[name] = time_per_batch(features, make(), k, batches, config.seed)
      preparation = prep if preparation is None else preparation
      cells.append(f"{cpu:.5f} ({wall:.5f})")
    print(f"{name:12}" + "".join(f"{cell:>22}" for cell in cells) + f"{preparation:>16.1f}")
    if name in PAPER_SECONDS:
      print(f"{'  paper':12}" + "".join(f"{PAPER_SECONDS[name].get(k, float('nan')):>22.4f}" for k in config.sizes))
  # KDPP's default RBF bandwidth is the median pairwise distance, twice PDS's default radius.
  reference = dppy_seconds_per_batch(features, 2 * stats["PDS"].report["radius"], config.sizes,
                                     max(1, config.batches // 4), config.seed)
  if reference is None:
    print("(dppy not installed: no outside reference row)")
  else:
    print(f"{'dppy k-DPP':12}" + "".join(f"{seconds:>22.5f}" for seconds in reference))


def table_b(config: Config) -> None:
  """Prints table B: VanillaPDS per-batch time against N."""
  print("\nTable B: VanillaPDS, d = 64, k = 80: per-batch time against N")
  print(f"{'N':>9} {'prep s':>8} {'cpu ms/batch':>13} {'wall ms/batch':>14} {'fallback':>9}")
  rng = np.random.default_rng(config.seed)
  centers = rng.normal(size=(50, 64))
  for num_points in config.scaling_sizes:
    features = (centers[rng.integers(0, 50, num_points)] + rng.normal(size=(num_points, 64))).astype(np.float32)
    prep, wall, cpu, stats = time_per_batch(features, tf_repulsive.VanillaPDS(), 80, 10 * config.batches,
                                            config.seed)
    print(f"{num_points:>9} {prep:>8.1f} {cpu * 1e3:>13.3f} {wall * 1e3:>14.3f} "
          f"{stats.fallback_batches / max(1, stats.batches):>8.1%}")


def benchmark(config: Config) -> None:
  """Both tables."""
  table_a(config)
  table_b(config)
