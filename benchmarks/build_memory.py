"""Peak and steady memory of building a repulsive_batch pipeline, against the data it holds.

  .venv/bin/python -m benchmarks.build_memory [case ...]

Each case runs in a fresh process. The baseline is the process once TensorFlow is imported and
the user's arrays and `from_tensor_slices` dataset exist; then the peak resident memory is reset
(`/proc/self/clear_refs`) and the pipeline is built and its first batch drawn. Printed: the peak
above the baseline and the steady state (after the build, garbage collected) as multiples of
"data" = bytes of the elements + bytes of the feature vectors where they are an array of their
own (a `features` function's; the default features of float32 x are x's array) (the bounds the package
keeps: peak <= 2x, steady <= 1.2x).
"""

import gc
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# name -> (N, element width, feature width, sampler); features are the first columns of x.
CASES = {
    "1M x 64, VanillaPDS": (1_000_000, 64, 64, "VanillaPDS"),
    "200k x 784, VanillaPDS": (200_000, 784, 784, "VanillaPDS"),
    "300k x 2048 elements, 16-d features, VanillaPDS": (300_000, 2048, 16, "VanillaPDS"),
    # The size tests/integration/test_inputs.py checks (large enough that TensorFlow's own noise is small).
    "500k x 128, VanillaPDS": (500_000, 128, 128, "VanillaPDS"),
}


def _status_kib(field):
  with open("/proc/self/status") as status:
    for line in status:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  raise KeyError(field)


def measure(name):
  num_points, width, feature_width, sampler_name = CASES[name]
  import numpy as np
  import tensorflow as tf
  import tf_repulsive

  rng = np.random.default_rng(0)
  x = rng.standard_normal((num_points, width), dtype=np.float32)
  y = rng.integers(0, 10, num_points)
  dataset = tf.data.Dataset.from_tensor_slices((x, y))
  data_bytes = x.nbytes + y.nbytes + (num_points * feature_width * 4 if feature_width < width else 0)
  gc.collect()
  baseline = _status_kib("VmRSS")
  with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")
  start = time.perf_counter()
  batcher = tf_repulsive.repulsive_batch(50, getattr(tf_repulsive, sampler_name)(), seed=0, start_step=0,
                                         features=(lambda x, y: x[:feature_width]) if feature_width < width else None,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  next(iter(dataset.apply(batcher)))
  seconds = time.perf_counter() - start
  peak = _status_kib("VmHWM")
  gc.collect()
  steady = _status_kib("VmRSS")
  kib = 1024
  print(f"| {name} | {data_bytes / 2**30:.2f} | {(peak - baseline) * kib / data_bytes:.2f} | "
        f"{(steady - baseline) * kib / data_bytes:.2f} | {seconds:.1f} |", flush=True)


def main(argv):
  if len(argv) > 2 and argv[1] == "--case":
    measure(argv[2])
    return
  names = argv[1:] or list(CASES)[:3]
  print("| case | data (GiB) | peak above baseline / data | steady / data | build + first batch (s) |")
  print("|---|---|---|---|---|", flush=True)
  for name in names:
    subprocess.run([sys.executable, __file__, "--case", name], check=True)


if __name__ == "__main__":
  main(sys.argv)
