"""One-time costs at the sizes users train with: build, radius="auto" calibration, mingling search,
and the first batch of a new iterator, each with its conditions (N, d, k, sampler, radius).

  .venv/bin/python -m benchmarks.one_time_costs [--cases=digits,gauss_k50,...]

Cases (data x sampler x radius at batch size k):
  digits: scikit-learn's digits (1797 x 64), k = 50, VanillaPDS default and "auto";
  gauss_k50 / gauss_k512 / gauss_k2048: 50000 x 64 standard Gaussian, VanillaPDS "auto";
  clusters_k512: 50000 x 64 in 10 clusters, AnnealPDS default (the mingling search at that size);
  mnist_like: the 60000 x 784 clusters of benchmark_throughput.py, k = 50, VanillaPDS default.
Per case: the whole build (`dataset.apply(batcher)`, after one warm-up build in the process, as
the first of its configuration: the process keeps no trace of its draw), the build of a second
batcher on the same data (which draws through the first one's trace), the calibration's own
draws (rerun on the built drawer, median of 3), the K-nearest-neighbour search of the mingling
values (median of 2), the estimate of the inclusion probabilities that `inclusion_weights`
adds to the build (samplers with one law for every step; once), and a new iterator's first batch
(median of 5 new iterators).
"""

import os
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
from sklearn import datasets as sk_datasets  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_repulsive  # noqa: E402
from tf_repulsive import _dart_blocks  # noqa: E402
from tf_repulsive import _mingling  # noqa: E402
from tf_repulsive import _radius  # noqa: E402

_CASES = flags.DEFINE_list("cases", "digits,gauss_k50,gauss_k512,gauss_k2048,clusters_k512,mnist_like",
                           "Cases to measure (see the module docstring).")


def _gaussian(num_points=50000, dim=64):
  rng = np.random.default_rng(0)
  return rng.normal(size=(num_points, dim)).astype(np.float32), rng.integers(0, 10, num_points)


def _clusters(num_points=50000, dim=64, classes=10, spread=0.35):
  rng = np.random.default_rng(0)
  labels = rng.integers(0, classes, num_points)
  centres = rng.normal(size=(classes, dim)).astype(np.float32)
  return centres[labels] + rng.normal(0.0, spread, (num_points, dim)).astype(np.float32), labels


def _mnist_like():
  from benchmarks.data import mnist_like  # pylint: disable=import-outside-toplevel
  return mnist_like()


def _digits():
  digits = sk_datasets.load_digits()
  return (digits.data / 16).astype(np.float32), digits.target


CASES = {
    "digits": ("digits 1797 x 64", _digits, 50, [("VanillaPDS", None), ("VanillaPDS", "auto")]),
    "gauss_k50": ("Gaussian 50000 x 64", _gaussian, 50, [("VanillaPDS", "auto")]),
    "gauss_k512": ("Gaussian 50000 x 64", _gaussian, 512, [("VanillaPDS", "auto")]),
    "gauss_k2048": ("Gaussian 50000 x 64", _gaussian, 2048, [("VanillaPDS", "auto")]),
    "clusters_k512": ("10 clusters 50000 x 64", _clusters, 512, [("AnnealPDS", None)]),
    "mnist_like": ("clusters 60000 x 784", _mnist_like, 50, [("VanillaPDS", None)]),
}


def _build(x, y, k, sampler_name, radius, seed=1):
  sampler = getattr(tf_repulsive, sampler_name)(radius=radius)
  batcher = tf_repulsive.repulsive_batch(k, sampler, seed=seed, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  start = time.perf_counter()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    stream = tf.data.Dataset.from_tensor_slices((x, y.astype(np.int64))).apply(batcher)
  return time.perf_counter() - start, batcher, stream


def _median_seconds(function, rounds):
  times = []
  for _ in range(rounds):
    start = time.perf_counter()
    function()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def main(argv):
  del argv
  x, y = _digits()
  _build(x, y, 50, "VanillaPDS", None)  # warm-up: a process's first build traces more
  print("| data | k | sampler, radius | radius | build (s) | build again (s) | calibration (s) | "
        "mingling search (s) | inclusion probabilities (s) | first batch (ms) |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  for name in _CASES.value:
    label, make, k, samplers = CASES[name]
    x, y = make()
    for sampler_name, radius in samplers:
      _dart_blocks.traced_draws.cache_clear()
      seconds, batcher, stream = _build(x, y, k, sampler_name, radius)
      again = _build(x, y, k, sampler_name, radius, seed=2)[0]
      drawer = batcher.drawer
      calibration = (_median_seconds(lambda: _radius.calibrated_scale(
          drawer.count_fills, drawer._plan.max_darts, drawer._config.batch_size, verbose=False), 3)
          if radius == "auto" else None)
      mingling = (_median_seconds(lambda: _mingling.mingling_values(x, y.astype(np.int64), 5), 2)
                  if batcher.drawer.groups is not None else None)
      began = time.perf_counter()
      estimated = drawer.inclusion_probabilities(tf.constant([1, 2], tf.int64), verbose=False) is not None
      inclusion = time.perf_counter() - began if estimated else None
      # One batch per iterator: a peek, which the fixed start allows any number of times.
      first = 1000 * _median_seconds(lambda: next(iter(stream)), 5)
      print(f"| {label} | {k} | {sampler_name}, {radius or 'default'} | {batcher.stats().report['radius']:.4g} | "
            f"{seconds:.2f} | {again:.2f} | {'' if calibration is None else f'{calibration:.2f}'} | "
            f"{'' if mingling is None else f'{mingling:.1f}'} | "
            f"{'' if inclusion is None else f'{inclusion:.2f}'} | {first:.0f} |", flush=True)


if __name__ == "__main__":
  app.run(main)
