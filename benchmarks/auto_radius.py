"""radius="auto" against the default radius: the radius, fills, build time and batches/s.

  .venv/bin/python -m benchmarks.auto_radius [speech_data_dir]

Data: scikit-learn's digits (1797 x 64, k = 50), the paper's sine boundary (3000 x 2, k = 30),
the MNIST-sized clusters of benchmark_throughput.py (60000 x 784, k = 50) and, given the generated
speech dataset's directory, the MFCCs of its training clips (k = 100).
Per dataset and disk sampler: the radius, the batches of steps 0-199 that needed the fallback
fill, the build time, and batches/s over 1000 steps, for the default and for "auto". The build
times are medians of 5 builds each, alternating default and "auto" after one build of each that
warms up the process. The calibration's cost is its draws: the calibration rerun on the built
drawer, median of 3. (Its trace is the one every disk sampler's build traces anyway, for the
check of the first batch; builds of 2 s and more vary by +-0.4 s, more than the calibration.)
"""

import os
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from sklearn import datasets as sk_datasets  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_repulsive  # noqa: E402
from tf_repulsive import _radius  # noqa: E402
from benchmarks.data import mnist_like  # noqa: E402


def datasets(speech_dir):
  digits = sk_datasets.load_digits()
  yield "digits", (digits.data / 16).astype(np.float32), digits.target.astype(np.int64), 50
  points = np.random.default_rng(0).uniform(-1, 1, (3000, 2)).astype(np.float32)
  yield "sine boundary", points, (points[:, 1] > 0.5 * np.sin(2 * np.pi * points[:, 0])).astype(np.int64), 30
  yield "60000 x 784 clusters", *mnist_like(), 50
  if speech_dir:
    from examples.speech_commands import input_data

    settings = input_data.AudioSettings()
    words = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
    index = input_data.prepare_data_index(speech_dir, words, 10.0, 10.0, 10.0, 10.0)
    noise = input_data.load_background_noise(speech_dir, settings.desired_samples)
    waveforms, labels = input_data.load_partition(index.partitions["training"], noise, settings, "training")
    mfccs = np.concatenate([input_data.mfcc(tf.constant(chunk), settings).numpy()
                            for chunk in np.array_split(waveforms, 8)])
    yield "speech MFCCs", mfccs.reshape(len(labels), -1), labels.astype(np.int64), 100


def build(x, y, batch_size, sampler):
  start = time.perf_counter()
  batcher = tf_repulsive.repulsive_batch(batch_size, sampler, seed=1, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    batches = iter(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher))
  return time.perf_counter() - start, batcher, batches


def measure(batcher, batches):
  fills = sum(batcher.fallback_points(step) > 0 for step in range(200))
  next(batches)
  start = time.perf_counter()
  for _ in range(1000):
    next(batches)
  return batcher.stats().report["radius"], fills, 1000 / (time.perf_counter() - start)


def calibration_seconds(batcher, rounds=3):
  drawer = batcher._built.drawer  # the DartThrower the build calibrated
  times = []
  for _ in range(rounds):
    start = time.perf_counter()
    _radius.calibrated_scale(drawer.count_fills, drawer._plan.max_darts, drawer._config.batch_size, verbose=False)
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def median_builds(x, y, batch_size, samplers, rounds=5):
  for sampler in samplers:
    build(x, y, batch_size, sampler)
  times = [[build(x, y, batch_size, sampler)[0] for sampler in samplers] for _ in range(rounds)]
  return np.median(times, axis=0)


def main(argv):
  print("| data | sampler | radius default → auto | fills in 200 steps, default → auto "
        "| build (s), default → auto | calibration (s) | its share of the auto build | batches/s, default → auto |")
  print("|---|---|---|---|---|---|---|---|")
  for name, x, y, batch_size in datasets(argv[1] if len(argv) > 1 else None):
    for sampler in (tf_repulsive.VanillaPDS, tf_repulsive.EasyPDS, tf_repulsive.AnnealPDS):
      default = measure(*build(x, y, batch_size, sampler())[1:])
      _, auto_batcher, auto_batches = build(x, y, batch_size, sampler(radius="auto"))
      auto = measure(auto_batcher, auto_batches)
      del auto_batches
      calibration = calibration_seconds(auto_batcher)
      default_build, auto_build = median_builds(x, y, batch_size, (sampler(), sampler(radius="auto")))
      print(f"| {name} (k = {batch_size}) | {sampler.__name__} | {default[0]:.4g} → {auto[0]:.4g} | "
            f"{default[1]} → {auto[1]} | {default_build:.2f} → {auto_build:.2f} | {calibration:.3f} | "
            f"{calibration / auto_build:.0%} | {default[2]:.0f} → {auto[2]:.0f} |", flush=True)


if __name__ == "__main__":
  main(sys.argv)
