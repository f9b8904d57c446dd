"""Where the distance cache pays: a disk sampler's stream with and without it, against shuffle + batch.

  .venv/bin/python -m benchmarks.distance_cache --data=mnist_like --num_points=8000
      --batch_sizes=50,150 --rounds=5 --seconds=0.7 [--dims=64,256,784,1024,2048,3072]

`--data` (the first of the list), `--num_points`, `--batch_sizes`, `--rounds` and `--seconds` are
benchmark_batch_sizes.py's flags. Per dimension d and batch size k: that data at N x d, VanillaPDS with
the default radius, the N x N cache forced at every d (`DartTuning(cache_from_dim=1)`) or off
(`distance_cache_bytes=0`). A `tf.function` loop of `get_next()` (the graph loop of
benchmark_batch_sizes.py), one iterator each, alternating rounds; the cells are batches/s and
the median ratio of the rounds to shuffle + batch, with the process's CPU time per batch. The
package builds the cache from d = `DartTuning.cache_from_dim` on.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_repulsive  # noqa: E402
from benchmarks.batch_sizes import _BATCH_SIZES  # noqa: E402
from benchmarks.batch_sizes import _DATA  # noqa: E402
from benchmarks.batch_sizes import _NUM_POINTS  # noqa: E402
from benchmarks.batch_sizes import _ROUNDS  # noqa: E402
from benchmarks.batch_sizes import _SECONDS  # noqa: E402
from benchmarks.batch_sizes import graph_rounds  # noqa: E402
from benchmarks.batch_sizes import Timed  # noqa: E402
from benchmarks.data import dataset  # noqa: E402
from tf_repulsive import _dart_config  # noqa: E402

_DIMS = flags.DEFINE_list("dims", ["64", "256", "784", "1024", "2048", "3072"], "Feature dimensions d.")


class _VanillaPDSWithCache(tf_repulsive.VanillaPDS):
  _tuning = _dart_config.DartTuning(cache_from_dim=1)


def main(argv):
  del argv
  n = _NUM_POINTS.value
  data = _DATA.value[0]
  print(f"{data}, N = {n}, VanillaPDS, default radius; graph loop, {_ROUNDS.value} rounds of "
        f"~{_SECONDS.value:g} s; cells: batches/s, ratio to shuffle + batch, CPU us per batch")
  print("| d | k | shuffle + batch | without the cache | with the cache |\n|---|---|---|---|---|")
  for dim in map(int, _DIMS.value):
    features, labels = dataset(data, n, dim)
    source = tf.data.Dataset.from_tensor_slices((features, labels))
    for k in map(int, _BATCH_SIZES.value):
      pipelines = {"shuffle": source.shuffle(n).batch(k).repeat()}
      for name, sampler, cache_bytes in (("without", tf_repulsive.VanillaPDS(), 0),
                                         ("with", _VanillaPDSWithCache(), 4 * n * n)):
        batcher = tf_repulsive.repulsive_batch(k, sampler, seed=0, start_step=None, options=tf_repulsive.BatcherOptions(
            distance_cache_bytes=cache_bytes, verbose=False))
        pipelines[name] = source.apply(batcher)
        batcher.start_at(0)
      timed = {name: Timed(pipeline) for name, pipeline in pipelines.items()}
      rates, cpu = graph_rounds(timed, _ROUNDS.value, _SECONDS.value)
      cells = []
      for name in timed:
        ratio = np.median(np.asarray(rates[name]) / np.asarray(rates["shuffle"]))
        cells.append(f"{np.median(rates[name]):.0f}, {ratio:.2f}, {1e6 * np.median(cpu[name]):.0f} us")
      print(f"| {dim} | {k} | " + " | ".join(cells) + " |", flush=True)
      del timed, pipelines


if __name__ == "__main__":
  app.run(main)
