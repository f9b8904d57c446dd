"""Where the first batch of a new iterator spends its time (issue 10's epoch start).

  .venv/bin/python scripts/probe_epoch_start.py              # Grappler on (TensorFlow's default)
  .venv/bin/python scripts/probe_epoch_start.py nograppler   # Grappler off process-wide

Median over 7 new iterators of the time to their first batch, on the digits (1797 x 64, k = 50):
a bare `range.map(gather)`, then `repulsive_batch` with three samplers, then shuffle + batch.
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from sklearn import datasets as sk_datasets  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_repulsive  # noqa: E402


def first_batch_ms(dataset, iterators=7):
  times = []
  for _ in range(iterators):
    start = time.perf_counter()
    next(iter(dataset))
    times.append(time.perf_counter() - start)
  return 1000 * float(np.median(times))


def main(argv):
  if argv[1:] == ["nograppler"]:
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
  x = (sk_datasets.load_digits().data / 16).astype(np.float32)
  table = tf.constant(x)
  rows = tf.data.Dataset.range(10**9).map(lambda i: tf.gather(table, tf.range(50) + tf.cast(i % 100, tf.int32)))
  print(f"range.map(gather): {first_batch_ms(rows):.1f} ms")
  for sampler in (tf_repulsive.Uniform(), tf_repulsive.EpochShuffle(), tf_repulsive.VanillaPDS()):
    batcher = tf_repulsive.repulsive_batch(50, sampler, seed=0, start_step=0, verbose=False)
    batches = tf.data.Dataset.from_tensor_slices(x).apply(batcher)
    print(f"repulsive_batch({type(sampler).__name__}): {first_batch_ms(batches):.1f} ms")
  baseline = tf.data.Dataset.from_tensor_slices(x).shuffle(len(x)).batch(50)
  print(f"shuffle(N).batch(50): {first_batch_ms(baseline):.1f} ms")


if __name__ == "__main__":
  main(sys.argv)
