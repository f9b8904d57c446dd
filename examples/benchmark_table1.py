r"""The paper's Table 1 side by side: CPU time to sample one mini-batch, k-DPP vs PDS vs uniform.

Table A: for k = 50, 80, 102, 150, 200 on N = 8189 points of 4198 dimensions (the Oxford-Flowers
setting; features from benchmark_sampling.flowers_like_features), the time per batch of FastKDPP,
VanillaPDS and Uniform through `repulsive_batch` and of KDPP's draw on one shared
eigendecomposition (its one-time cost, reported once), beside the paper's numbers; with
`dppy` installed (never required), its exact k-DPP sampler on the same eigendecomposition as an
outside reference. Table B: VanillaPDS per-batch time at N = 1e4, 1e5, 1e6 (d = 64, k = 80) and
the one-time preparation, showing that the per-batch cost does not grow with N.

  python examples/benchmark_table1.py
  python examples/benchmark_table1.py --sizes=80 --num_points=2000 --scaling_sizes=10000
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import benchmark_sampling  # noqa: E402
import common  # noqa: E402
import tf_repulsive  # noqa: E402
from tf_repulsive import _kdpp  # noqa: E402

FLAGS = flags.FlagValues()
_SIZES = flags.DEFINE_list("sizes", ["50", "80", "102", "150", "200"], "Batch sizes k of table A.",
                           flag_values=FLAGS)
_NUM_POINTS = flags.DEFINE_integer("num_points", 8189, "N of table A.", flag_values=FLAGS)
_LABEL_WEIGHT = flags.DEFINE_float("label_weight", 0.3, "One-hot label weight of table A's features.",
                                   flag_values=FLAGS)
_BATCHES = flags.DEFINE_integer("batches", 20, "Batches timed per cell (PDS and uniform use 10x).",
                                flag_values=FLAGS)
_SCALING_SIZES = flags.DEFINE_list("scaling_sizes", ["10000", "100000", "1000000"], "N of table B.",
                                   flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the data and the samplers.", flag_values=FLAGS)

# The paper's appendix table (CPU seconds per mini-batch).
PAPER_SECONDS = {
    "k-DPP": {50: 7.1680, 80: 29.687, 102: 58.4086, 150: 189.0303, 200: 436.4746},
    "Fast k-DPP": {50: 0.1032, 80: 0.3312, 102: 0.6512, 150: 1.8745, 200: 4.1964},
    "PDS": {50: 0.0461, 80: 0.0795, 102: 0.1048, 150: 0.1657, 200: 0.2391},
}


def _time_iterator(iterator, batches: int) -> tuple[float, float]:
  next(iterator)
  wall, cpu = time.perf_counter(), time.process_time()
  for _ in range(batches):
    next(iterator)
  return (time.perf_counter() - wall) / batches, (time.process_time() - cpu) / batches


def time_per_batch(features: np.ndarray, sampler: tf_repulsive.Sampler, k: int, batches: int
                   ) -> tuple[float, float, float, tf_repulsive.SamplingStats]:
  """(one-time preparation s, wall s and process-CPU s per batch, counters) through repulsive_batch."""
  constant = tf.constant(features)
  start = time.perf_counter()
  # start_step=0: the stream is iterated here, not by `fit` with its callback.
  batcher = tf_repulsive.repulsive_batch(k, sampler, feature_fn=lambda i: tf.gather(constant, i),
                                         seed=_SEED.value, start_step=0)
  indices = tf.data.Dataset.range(features.shape[0]).apply(batcher)
  preparation = time.perf_counter() - start
  return (preparation, *_time_iterator(iter(indices), batches), batcher.stats())


def spectral_decomposition(features: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
  """Eigendecomposition of KDPP's default RBF kernel, computed once for every k (and dppy)."""
  start = time.perf_counter()
  bandwidth = _kdpp.rbf_bandwidth(features, None)
  eigenvalues, eigenvectors = np.linalg.eigh(_kdpp.kernel_matrix(features, features, "rbf", bandwidth))
  return np.maximum(eigenvalues, 0.0), eigenvectors, time.perf_counter() - start


def kdpp_time_per_batch(eigenvalues: np.ndarray, eigenvectors: np.ndarray, k: int, batches: int
                        ) -> tuple[float, float]:
  """KDPP's per-batch draw (the code `KDPP().build` returns) on a shared eigendecomposition."""
  drawer = _kdpp._SpectralKDPPDrawer(eigenvalues, eigenvectors, k)
  key = tf.constant([_SEED.value, 1], tf.int64)
  draws = tf.data.Dataset.range(batches + 1).map(lambda step: drawer.draw(key, step)[0])
  return _time_iterator(iter(draws), batches)


def dppy_seconds_per_batch(eigenvalues: np.ndarray, eigenvectors: np.ndarray, k: int, batches: int
                           ) -> float | None:
  """dppy's exact k-DPP sampler on the same eigendecomposition, or None without dppy."""
  try:
    from dppy.finite_dpps import FiniteDPP  # optional outside reference
  except ImportError:
    return None
  dpp = FiniteDPP("likelihood", L_eig_dec=(eigenvalues, eigenvectors))
  rng = np.random.RandomState(_SEED.value)
  start = time.process_time()
  for _ in range(batches):
    dpp.sample_exact_k_dpp(size=k, random_state=rng)
  return (time.process_time() - start) / batches


def table_a(features: np.ndarray, sizes: list[int], batches: int) -> None:
  print(f"\nTable A: seconds per mini-batch (process CPU time; wall time in brackets), "
        f"N = {features.shape[0]}, d = {features.shape[1]}; one-time preparation in the last column")
  print(f"{'':12}" + "".join(f"{'k=' + str(k):>22}" for k in sizes) + f"{'prep s (k=' + str(sizes[0]) + ')':>16}")

  def print_row(name, cells, preparation):
    print(f"{name:12}" + "".join(f"{cell:>22}" for cell in cells) + f"{preparation:>16.1f}")
    if name in PAPER_SECONDS:
      print(f"{'  paper':12}" + "".join(f"{PAPER_SECONDS[name].get(k, float('nan')):>22.4f}" for k in sizes))

  eigenvalues, eigenvectors, decomposition_seconds = spectral_decomposition(features)
  cells = []
  for k in sizes:
    wall, cpu = kdpp_time_per_batch(eigenvalues, eigenvectors, k, batches)
    cells.append(f"{cpu:.5f} ({wall:.5f})")
  print_row("k-DPP", cells, decomposition_seconds)
  for name, make in {"Fast k-DPP": tf_repulsive.FastKDPP, "PDS": tf_repulsive.VanillaPDS,
                     "Uniform": tf_repulsive.Uniform}.items():
    cells, preparation = [], None
    for k in sizes:
      prep, wall, cpu, _ = time_per_batch(features, make(), k, batches if name == "Fast k-DPP" else 10 * batches)
      preparation = prep if preparation is None else preparation
      cells.append(f"{cpu:.5f} ({wall:.5f})")
    print_row(name, cells, preparation)
  reference = [dppy_seconds_per_batch(eigenvalues, eigenvectors, k, max(1, batches // 4)) for k in sizes]
  if reference[0] is None:
    print("(dppy not installed: no outside reference row)")
  else:
    print(f"{'dppy k-DPP':12}" + "".join(f"{seconds:>22.5f}" for seconds in reference))


def table_b(sizes: list[int], batches: int) -> None:
  print("\nTable B: VanillaPDS, d = 64, k = 80: per-batch time against N")
  print(f"{'N':>9} {'prep s':>8} {'cpu ms/batch':>13} {'wall ms/batch':>14} {'fallback':>9}")
  rng = np.random.default_rng(_SEED.value)
  centers = rng.normal(size=(50, 64))
  for num_points in sizes:
    features = (centers[rng.integers(0, 50, num_points)] + rng.normal(size=(num_points, 64))).astype(np.float32)
    prep, wall, cpu, stats = time_per_batch(features, tf_repulsive.VanillaPDS(), 80, 10 * batches)
    print(f"{num_points:>9} {prep:>8.1f} {cpu * 1e3:>13.3f} {wall * 1e3:>14.3f} "
          f"{stats.fallback_batches / max(1, stats.batches):>8.1%}")


def main(argv):
  del argv
  features = benchmark_sampling.flowers_like_features(_SEED.value, _LABEL_WEIGHT.value, _NUM_POINTS.value)
  table_a(features, [int(k) for k in _SIZES.value], _BATCHES.value)
  table_b([int(n) for n in _SCALING_SIZES.value], _BATCHES.value)


if __name__ == "__main__":
  common.run(main, FLAGS)
