"""The per-draw cost of the sampled check of data files: the function that maps a stream's files, with and without it.

  .venv/bin/python -m benchmarks.file_checks

For each case (Gaussian data, `benchmarks/data.py`; VanillaPDS; `BatcherOptions(data_dir=...)`
in a temporary directory) it builds the batcher, then times two `tf.function`s that map the
stream's files as a draw does (`DataFiles.mapped`): one with the sampled check of every file, one
with it replaced by no op. 20 rounds of 500 calls each, interleaved; the medians.
"""

import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_repulsive  # noqa: E402
from benchmarks.data import dataset  # noqa: E402
from tf_repulsive import _data_file_checks  # noqa: E402

_CASES = ((60000, 784, 50), (50000, 64, 512), (1000000, 128, 512))
_ROUNDS, _CALLS = 20, 500


def _mapping(files, paths):
  # Each array's first value, so that the function returns what it mapped.
  return tf.function(lambda: [tf.reshape(array, [-1])[0] for array in files.mapped(paths)])


def main():
  print("| data | k | files | steps per draw | mapping the files (µs per draw) | with the check (µs per draw) |")
  print("|---|---|---|---|---|---|")
  for num_points, dim, batch_size in _CASES:
    features, labels = dataset("gaussian", num_points, dim)
    with tempfile.TemporaryDirectory() as directory:
      batcher = tf_repulsive.repulsive_batch(batch_size, tf_repulsive.VanillaPDS(), seed=0, start_step=0,
                                             options=tf_repulsive.BatcherOptions(data_dir=directory, verbose=False))
      tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
      files, paths = batcher._built.files, batcher.data_files  # pylint: disable=protected-access
      checked = _mapping(files, paths)
      sampled_check = _data_file_checks.sampled_check
      _data_file_checks.sampled_check = lambda path, array, samples: tf.no_op()
      try:
        unchecked = _mapping(files, paths)
        unchecked()  # traced without the check
      finally:
        _data_file_checks.sampled_check = sampled_check
      times = {checked: [], unchecked: []}
      for function in times:
        for _ in range(_CALLS):
          function()
      for _ in range(_ROUNDS):
        for function in times:
          start = time.perf_counter()
          for _ in range(_CALLS):
            function()
          times[function].append((time.perf_counter() - start) / _CALLS * 1e6)
      megabytes = sum(os.path.getsize(path) for path in paths) / 2**20
      print(f"| {num_points} × {dim} | {batch_size} | {len(paths)} ({megabytes:.0f} MiB) | "
            f"{batcher.drawer.steps_per_draw} | {np.median(times[unchecked]):.0f} | {np.median(times[checked]):.0f} |",
            flush=True)


if __name__ == "__main__":
  main()
