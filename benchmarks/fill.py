"""Per-batch cost of the fallback fill against the dataset size N: the candidates' fill and the scores' fill.

VanillaPDS with radius 8 on d = 32 standard Gaussian points (pairwise distances about 8): the
darts run out in every batch, and the fill supplies about 15 of its 50 points. Per N and fill,
the steady-state batches/s of one iterator of the stream (a Python loop of `next`, `--batches`
batches after the first) and the median time of `batch_indices`. "scores" is the O(N) fill that
the package uses only for N <= 8 k (forced here for every N, as the baseline).
  .venv/bin/python -m benchmarks.fill [--sizes=100000,1250000,5000000] [--batches=300]
"""

import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _dart_throwing

_SIZES = flags.DEFINE_list("sizes", "100000,1250000,5000000", "Dataset sizes N.")
_BATCHES = flags.DEFINE_integer("batches", 300, "Batches timed per N, after the first.")
_DIM = 32
_BATCH_SIZE = 50


def main(argv):
  del argv
  print(f"VanillaPDS, radius 8, k = {_BATCH_SIZE}, d = {_DIM} Gaussian, one iterator, Python loop")
  print(f"{'N':>9} | {'fill':>10} | {'batches/s':>9} | {'batch_indices ms':>16} | filled batches")
  sizes = [int(size) for size in _SIZES.value]

  class VanillaPDSFilledByScores(tf_repulsive.VanillaPDS):
    _tuning = _dart_throwing.DartTuning(fill_by_scores_up_to=max(sizes))

  samplers = {"candidates": tf_repulsive.VanillaPDS(radius=8.0), "scores": VanillaPDSFilledByScores(radius=8.0)}
  for size in sizes:
    points = np.random.default_rng(0).normal(size=(size, _DIM)).astype(np.float32)
    for fill, sampler in samplers.items():
      batcher = tf_repulsive.repulsive_batch(_BATCH_SIZE, sampler, seed=0, start_step=0)
      iterator = iter(tf.data.Dataset.from_tensor_slices(points).apply(batcher))
      next(iterator)
      start = time.perf_counter()
      for _ in range(_BATCHES.value):
        next(iterator)
      rate = _BATCHES.value / (time.perf_counter() - start)
      times = []
      for step in range(1000, 1011):
        start = time.perf_counter()
        batcher.batch_indices(step)
        times.append(time.perf_counter() - start)
      stats = batcher.stats()
      print(f"{size:>9} | {fill:>10} | {rate:>9.0f} | {1e3 * np.median(times):>16.1f} | "
            f"{stats.fallback_batches} of {stats.batches}", flush=True)
      del iterator, batcher


if __name__ == "__main__":
  app.run(main)
