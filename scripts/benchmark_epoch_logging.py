"""Per-batch cost of recording the mingling mix as batches are drawn, and what it saves at epoch end.

Run with the package under test first on the path (this tree, or an older one for comparison):
  PYTHONPATH=<tree> .venv/bin/python scripts/benchmark_mix_logging.py
AnnealPDS on the digits, k = 50: batches/s against shuffle+batch in the same process, and the time
to compute one epoch's (36 steps') mingling mix as `AnnealingCallback` logs it.
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn import datasets as sk_datasets  # noqa: E402

import tf_repulsive  # noqa: E402


def main():
  data = sk_datasets.load_digits()
  x, y = (data.data / 16.0).astype(np.float32), data.target.astype(np.int64)
  batcher = tf_repulsive.repulsive_batch(50, tf_repulsive.AnnealPDS(), seed=0, start_step=0)
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  shuffled = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y)).batch(50).repeat()
  for name, dataset in (("shuffle+batch", shuffled), ("AnnealPDS", stream)):
    iterator = iter(dataset)
    next(iterator)
    start = time.perf_counter()
    for _ in range(3000):
      next(iterator)
    print(f"{name}: {3000 / (time.perf_counter() - start):.0f} batches/s")
  steps = range(1, 1 + batcher.steps_per_epoch)
  start = time.perf_counter()
  # The trees compared name it differently: mingling_mixes, compositions, or composition per step.
  if hasattr(batcher, "mingling_mixes"):
    batcher.mingling_mixes(steps)
  elif hasattr(batcher, "compositions"):
    batcher.compositions(steps)
  else:
    [batcher.composition(step) for step in steps]
  print(f"one epoch's mingling mix for the logs: {1000 * (time.perf_counter() - start):.1f} ms")


if __name__ == "__main__":
  main()
