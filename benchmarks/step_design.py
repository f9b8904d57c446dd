"""Per-batch and epoch-start cost of a repulsive_batch pipeline, for the old and the new step design.

Run once per tree, in separate processes, with the package under test first on the path:
  PYTHONPATH=<tree> .venv/bin/python benchmarks/step_design.py
It works with both APIs (the step-clock design's finite epochs, and the step stream) and prints
batches/s against `shuffle(N).batch(k)` measured in the same process.
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn import datasets as sk_datasets  # noqa: E402

import tf_repulsive  # noqa: E402

STREAM = hasattr(tf_repulsive, "RepulsiveBatcher")


def pipeline(features, batch_size):
  """The VanillaPDS pipeline, and a function to call before each new iterator of it."""
  dataset = tf.data.Dataset.from_tensor_slices(features)
  if STREAM:
    # A stream of a fixed start step begins once per process; a stream started by its batcher
    # begins at each start_at, as AnnealingCallback starts it before each new iterator.
    batcher = tf_repulsive.repulsive_batch(batch_size, tf_repulsive.VanillaPDS(), seed=0, start_step=None)
    return dataset.apply(batcher), lambda: batcher.start_at(0)
  return dataset.apply(tf_repulsive.repulsive_batch(batch_size, tf_repulsive.VanillaPDS(), seed=0)).repeat(), None


def batches_per_second(dataset, count, start=None):
  if start is not None:
    start()
  iterator = iter(dataset)
  next(iterator)
  start = time.perf_counter()
  for _ in range(count):
    next(iterator)
  return count / (time.perf_counter() - start)


def first_batch_seconds(dataset, repeats=5, start_stream=None):
  times = []
  for _ in range(repeats):
    if start_stream is not None:
      start_stream()
    start = time.perf_counter()
    next(iter(dataset))
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def main():
  print(f"tf_repulsive from {os.path.dirname(tf_repulsive.__file__)} ({'step stream' if STREAM else 'step clock'})")
  rng = np.random.default_rng(0)
  mnist_like = rng.random((60000, 784), dtype=np.float32)
  digits = (sk_datasets.load_digits().data / 16.0).astype(np.float32)
  for name, features, count in (("60000 x 784", mnist_like, 2000), ("1797 x 64 (digits)", digits, 2000)):
    shuffled = tf.data.Dataset.from_tensor_slices(features).shuffle(len(features)).batch(50).repeat()
    pds, start_stream = pipeline(features, 50)
    base, ours = batches_per_second(shuffled, count), batches_per_second(pds, count, start_stream)
    base_start = first_batch_seconds(tf.data.Dataset.from_tensor_slices(features).shuffle(len(features)).batch(50))
    ours_start = first_batch_seconds(pds, start_stream=start_stream)
    print(f"{name}: batches/s shuffle+batch {base:.0f}, VanillaPDS {ours:.0f} (ratio {ours / base:.2f}); "
          f"first batch of a new iterator: shuffle+batch {1000 * base_start:.1f} ms, "
          f"VanillaPDS {1000 * ours_start:.1f} ms")


if __name__ == "__main__":
  main()
