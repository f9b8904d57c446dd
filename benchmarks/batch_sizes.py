"""Batches/s at every batch size, steady state on one iterator per pipeline, against `shuffle(N).batch(k)`.

  .venv/bin/python -m benchmarks.batch_sizes [--data=gaussian,clusters] [--num_points=50000]
      [--dim=64] [--batch_sizes=50,512,2048,4096] [--samplers=vanilla_pds,...] [--radius=auto]
      [--seconds=2] [--rounds=3] [--reuse_mingling] [--processes=1]

Each sampler's pipeline is timed beside a shuffle + batch iterator of its own, with no other
iterator open. Each of the two reads 3 batches to warm up (for shuffle + batch that fills its
shuffle buffer) and is then timed in rounds that alternate the two (shuffle + batch first), each
round reading batches for about `--seconds`: by a Python loop of `next(iterator)`
(what `for x, y in dataset:` custom loops do) and by a `tf.function` loop of `get_next()` (what
Keras' train step does). A ratio is the median over rounds of the round's ratio to its shuffle + batch
consumed the same way. Also per pipeline: its build, the points per batch the fallback fill
supplied, and the first batch of a new iterator (median of 3, measured first, while no other
iterator draws ahead beside it; shuffle + batch's last, as its iterators free a buffer of N
elements). With `--reuse_mingling` the mingling values of a dataset are computed by its first
build that needs them and reused by the later ones, whose build times then leave that search out.
With `--processes=P` the whole run repeats in P fresh processes, one after the other, and a final
table gives each cell's median over them and their range: a process's thread pools and memory
layout move its rates by up to a third, more than rounds within it differ.
Data: `--data` of `--num_points` x `--dim` float32 with 10 labels: `gaussian` (standard normal),
`clusters` (10 well separated Gaussian clusters, one per label), `mnist_like` (10 overlapping
clusters in [0, 1]^d, as in benchmark_throughput.py) or `digits` (the bundled digits' 1257 x 64
training split; `--num_points` and `--dim` do not apply).
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_repulsive  # noqa: E402
from benchmarks.data import dataset  # noqa: E402
from tf_repulsive import _mingling  # noqa: E402

_DATA = flags.DEFINE_list("data", "gaussian,clusters", "Datasets: gaussian, clusters, mnist_like, digits.")
_NUM_POINTS = flags.DEFINE_integer("num_points", 50000, "N.")
_DIM = flags.DEFINE_integer("dim", 64, "d.")
_BATCH_SIZES = flags.DEFINE_list("batch_sizes", "50,512,2048,4096", "Batch sizes k.")
_SAMPLERS = flags.DEFINE_list("samplers", "vanilla_pds,easy_pds,dense_pds,anneal_pds", "Samplers to time.")
_RADIUS = flags.DEFINE_enum("radius", "auto", ["auto", "default"],
                            "The disk samplers' radius: \"auto\", or the paper's default (half the median distance).")
_SECONDS = flags.DEFINE_float("seconds", 2.0, "Seconds of batches per pipeline, consumption style and round.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
_STARTS = flags.DEFINE_integer("starts", 3, "New iterators per pipeline for the first-batch median.")
_REUSE_MINGLING = flags.DEFINE_bool("reuse_mingling", False,
                                    "Compute the mingling values once per dataset (the later builds leave them out).")
_PROCESSES = flags.DEFINE_integer("processes", 1, "Fresh processes that each run every cell; cells give their median.",
                                  lower_bound=1)
_ROWS_OUT = flags.DEFINE_string("rows_out", None, "Also append the rows as JSON lines to this file.")

_SAMPLERS_BY_NAME = {
    "uniform": lambda radius: tf_repulsive.Uniform(),
    "vanilla_pds": lambda radius: tf_repulsive.VanillaPDS(**radius),
    "easy_pds": lambda radius: tf_repulsive.EasyPDS(**radius),
    "dense_pds": lambda radius: tf_repulsive.DensePDS(pi=[1.0] * 6, **radius),
    "anneal_pds": lambda radius: tf_repulsive.AnnealPDS(**radius),
}


class Timed:
  """One pipeline's single iterator, read by a Python loop or by a `tf.function` loop."""

  def __init__(self, pipeline):
    self.iterator = iter(pipeline)
    for _ in range(3):
      next(self.iterator)

    @tf.function
    def read(iterator, count):
      def body(i):
        with tf.control_dependencies(tf.nest.flatten(iterator.get_next())):
          return i + 1
      return tf.while_loop(lambda i: i < count, body, (tf.constant(0),))

    self._read = read
    self._read(self.iterator, tf.constant(1))  # traces
    self.per_batch = {"python": self._seconds_per_batch("python", 3), "graph": self._seconds_per_batch("graph", 3)}

  def _seconds_per_batch(self, style, count):
    start = time.perf_counter()
    if style == "python":
      for _ in range(count):
        next(self.iterator)
    else:
      self._read(self.iterator, tf.constant(count))
    return (time.perf_counter() - start) / count

  def rate(self, style, seconds):
    count = max(3, int(seconds / self.per_batch[style]))
    self.per_batch[style] = self._seconds_per_batch(style, count)
    return 1.0 / self.per_batch[style]


def graph_rounds(timed, rounds, seconds):
  """Graph-loop batches/s and process CPU seconds per batch of each `Timed` reader, in alternating rounds.

  Returns `{name: [batches/s per round]}` and `{name: [CPU s per batch per round]}`; the CPU time
  counts every thread of the process.
  """
  rates = {name: [] for name in timed}
  cpu = {name: [] for name in timed}
  for _ in range(rounds):
    for name, reader in timed.items():
      start = time.process_time()
      count = max(3, int(seconds / reader.per_batch["graph"]))  # what `rate` reads
      rates[name].append(reader.rate("graph", seconds))
      cpu[name].append((time.process_time() - start) / count)
  return rates, cpu


def reuse_mingling_values():
  """Makes the samplers' mingling search return what it found before for the same features, labels and settings."""
  search, found = _mingling.mingling_values, {}

  def reusing(features, labels, neighbors=5, *, verbose=False, **settings):
    key = (features.shape, hashlib.blake2b(np.ascontiguousarray(features)).hexdigest(),
           hashlib.blake2b(np.ascontiguousarray(labels)).hexdigest(), neighbors,
           tuple(sorted(settings.items())))
    if key not in found:
      found[key] = search(features, labels, neighbors, verbose=verbose, **settings)
    return found[key]

  _mingling.mingling_values = reusing


def first_batch_ms(pipeline, repeats, batcher):
  times = []
  for _ in range(repeats):
    if batcher is not None:
      batcher.start_at(0)  # as AnnealingCallback does before each new iterator
    start = time.perf_counter()
    next(iter(pipeline))
    times.append(time.perf_counter() - start)
  return 1000 * float(np.median(times))


_MEASURES = ("python_rate", "python_ratio", "graph_rate", "graph_ratio", "first_ms", "first_ratio")


def median_over_processes():
  """Runs this benchmark in `--processes` fresh processes and prints each cell's median and range over them."""
  forwarded = [flags.FLAGS[holder.name].serialize() for holder in (
      _DATA, _NUM_POINTS, _DIM, _BATCH_SIZES, _SAMPLERS, _RADIUS, _SECONDS, _ROUNDS, _STARTS, _REUSE_MINGLING)]
  with tempfile.TemporaryDirectory() as directory:
    rows_file = os.path.join(directory, "rows.jsonl")
    for process in range(_PROCESSES.value):
      print(f"Process {process + 1} of {_PROCESSES.value}:", flush=True)
      subprocess.run([sys.executable, os.path.abspath(__file__), *forwarded, "--processes=1",
                      f"--rows_out={rows_file}"], check=True)
    with open(rows_file) as rows_text:
      rows = [json.loads(line) for line in rows_text]
  cells = {}
  for row in rows:
    cells.setdefault((row["data"], row["k"], row["pipeline"]), []).append(row)
  print(f"\nMedian over {_PROCESSES.value} processes (lowest–highest in brackets):")
  print("| data | k | pipeline | batches/s, Python loop | ratio | batches/s, graph loop | ratio "
        "| first batch (ms) | ratio |")
  print("|---|---|---|---|---|---|---|---|---|")
  for (data_name, batch_size, name), runs in cells.items():
    values = {measure: np.asarray([run[measure] for run in runs]) for measure in _MEASURES}
    text = [f"{np.median(v):.{1 if measure.endswith(('rate', 'ms')) else 2}f}"
            + (f" [{v.min():.2f}–{v.max():.2f}]" if measure.endswith("ratio") else "")
            for measure, v in values.items()]
    print(f"| {data_name} | {batch_size} | {name} | {' | '.join(text)} |", flush=True)


def main(argv):
  del argv
  if _PROCESSES.value > 1:
    median_over_processes()
    return
  if _REUSE_MINGLING.value:
    reuse_mingling_values()
  radius = {"radius": "auto"} if _RADIUS.value == "auto" else {}
  print(f"N = {_NUM_POINTS.value}, d = {_DIM.value} (digits: 1257 x 64), radius {_RADIUS.value}; steady state, "
        "one iterator each, "
        f"{_ROUNDS.value} rounds of ~{_SECONDS.value:g} s per pipeline and style; ratio: median of the rounds' "
        "ratios to shuffle + batch read the same way; first batch: median of "
        f"{_STARTS.value} new iterators")
  print("| data | k | pipeline | build (s) | fill per batch | batches/s, Python loop | ratio "
        "| batches/s, graph loop | ratio | first batch (ms) | ratio |")
  print("|---|---|---|---|---|---|---|---|---|---|---|")
  for data_name in _DATA.value:
    features, labels = dataset(data_name, _NUM_POINTS.value, _DIM.value)
    for batch_size in map(int, _BATCH_SIZES.value):
      source = tf.data.Dataset.from_tensor_slices((features, labels))
      pipelines, builds, batchers = {}, {}, {}
      pipelines["shuffle + batch"] = source.shuffle(len(features)).batch(batch_size).repeat()
      for name in _SAMPLERS.value:
        batcher = tf_repulsive.repulsive_batch(batch_size, _SAMPLERS_BY_NAME[name](radius), seed=0, start_step=None,
                                               options=tf_repulsive.BatcherOptions(verbose=False))
        start = time.perf_counter()
        pipelines[name] = source.apply(batcher)
        builds[name], batchers[name] = time.perf_counter() - start, batcher
      # First: a new iterator's first batch, while no other iterator draws ahead beside it;
      # shuffle + batch's last, as its iterators' teardown frees N buffered elements.
      starts = {name: first_batch_ms(pipelines[name], _STARTS.value, batchers.get(name))
                for name in [*batchers, "shuffle + batch"]}
      # Each sampler is timed against a shuffle + batch iterator of its own, with no other
      # iterator open: with all of them open at once, the graph loop read each stream slower the
      # later it was built (up to 2x at 60000 x 784, k = 50), whatever the sampler.
      rates = {(name, style): [] for name in pipelines for style in ("python", "graph")}
      baseline = {(name, style): [] for name in batchers for style in ("python", "graph")}
      for name, batcher in batchers.items():
        batcher.start_at(0)
        timed = {"shuffle + batch": Timed(pipelines["shuffle + batch"]), name: Timed(pipelines[name])}
        for _ in range(_ROUNDS.value):
          for style in ("python", "graph"):
            shuffled = timed["shuffle + batch"].rate(style, _SECONDS.value)
            rates["shuffle + batch", style].append(shuffled)
            baseline[name, style].append(shuffled)
            rates[name, style].append(timed[name].rate(style, _SECONDS.value))
        del timed
      fills = {name: batcher.stats().fallback_points / max(1, batcher.stats().batches)
               for name, batcher in batchers.items()}
      for name in pipelines:
        row = {"data": data_name, "k": batch_size, "pipeline": name}
        for style in ("python", "graph"):
          row[f"{style}_rate"] = float(np.median(rates[name, style]))
          row[f"{style}_ratio"] = 1.0 if name not in batchers else float(
              np.median(np.asarray(rates[name, style]) / np.asarray(baseline[name, style])))
        row["first_ms"], row["first_ratio"] = starts[name], starts[name] / starts["shuffle + batch"]
        fill = f"{fills[name]:.0f}" if name in fills else ""
        build = f"{builds[name]:.1f}" if name in builds else ""
        print(f"| {data_name} | {batch_size} | {name} | {build} | {fill} | {row['python_rate']:.1f} | "
              f"{row['python_ratio']:.2f} | {row['graph_rate']:.1f} | {row['graph_ratio']:.2f} | "
              f"{row['first_ms']:.1f} | {row['first_ratio']:.2f} |", flush=True)
        if _ROWS_OUT.value:
          with open(_ROWS_OUT.value, "a") as rows_file:
            rows_file.write(json.dumps(row) + "\n")
      del pipelines


if __name__ == "__main__":
  app.run(main)
