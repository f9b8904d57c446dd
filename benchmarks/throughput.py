"""Where the batch stream's time goes at k = 50, against `shuffle(N).batch(k)` in the same run.

Batches/s of whole pipelines at every batch size: benchmarks/batch_sizes.py.

Default: at 60000 x 784 (the MNIST-sized clusters), per sampler, batches/s of the stream, of its
draw plus the gather of the rows, and of the draw alone, each timed in a `tf.function` loop over a
new iterator per round. `--start_breakdown`: on the digits' 1257 x 64 training split, the first
batch of a new iterator of streams built like the batch stream from one piece of a draw at a time
(a gather; a while loop; a loop in a loop; a cond; a sampler's draw), median of `--starts`.
  .venv/bin/python -m benchmarks.throughput [--batches=3000] [--samplers=uniform,vanilla_pds,...]
      [--rounds=3] [--disable_grappler] [--start_breakdown]
"""

import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
from sklearn import datasets as sk_datasets

import tf_repulsive
from benchmarks.data import mnist_like
from tf_repulsive import _stream_ops  # the stream's own map, for --breakdown's partial streams

_BATCHES = flags.DEFINE_integer("batches", 3000, "Batches timed per pipeline, after its first.")
_SAMPLERS = flags.DEFINE_list("samplers", "uniform,vanilla_pds,easy_pds,dense_pds,anneal_pds", "Samplers to time.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Alternating rounds of timing.")
_DISABLE_GRAPPLER = flags.DEFINE_bool(
    "disable_grappler", False, "Switch off Grappler process-wide, to see its share of a new iterator's start.")
_START_BREAKDOWN = flags.DEFINE_bool(
    "start_breakdown", False, "Instead of where a batch's time goes: on the digits, the first batch of a new "
    "iterator of streams built like the batch stream from one piece of a draw at a time (a gather; a while loop; a "
    "loop in a loop; a cond; a sampler's draw), against shuffle + batch.")
_STARTS = flags.DEFINE_integer("starts", 7, "New iterators per pipeline for the first-batch median.")

_BATCH_SIZE = 50
_SAMPLERS_BY_NAME = {
    "uniform": tf_repulsive.Uniform,
    "vanilla_pds": tf_repulsive.VanillaPDS,
    "easy_pds": tf_repulsive.EasyPDS,
    "dense_pds": lambda: tf_repulsive.DensePDS(pi=[1.0] * 6),
    "anneal_pds": tf_repulsive.AnnealPDS,
    "epoch_shuffle": tf_repulsive.EpochShuffle,
    "rs2": lambda: tf_repulsive.RS2(0.7),
}


def batches_per_second(dataset, count, before_each=lambda: None):
  """Batches/s of `count` batches after the first, consumed in the graph (as Keras' train step
  does), so that Python's per-batch cost does not cap both pipelines alike. `before_each` runs
  before each new iterator (a batch stream's `start_at`)."""
  consume = tf.function(lambda: dataset.take(count + 1).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
  before_each()
  consume()  # traces, and warms up the pipeline
  before_each()
  start = time.perf_counter()
  consume()
  return count / (time.perf_counter() - start)


def first_batch_ms(dataset, repeats, before_each=lambda: None):
  times = []
  for _ in range(repeats):
    before_each()
    start = time.perf_counter()
    next(iter(dataset))
    times.append(time.perf_counter() - start)
  return 1000 * float(np.median(times))


def shuffle_batch(features, labels):
  return tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(len(features)).batch(_BATCH_SIZE).repeat()


def repulsive(features, labels, name, start_step=0):
  batcher = tf_repulsive.repulsive_batch(_BATCH_SIZE, _SAMPLERS_BY_NAME[name](), seed=0, start_step=start_step,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  start = time.perf_counter()
  dataset = tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
  build = time.perf_counter() - start
  return dataset, build, batcher


def stream_of(draw_batches):
  """A stream built like the batch stream's, of `draw_batches(draw number)` unbatched."""
  options = tf.data.Options()
  options.experimental_optimization.apply_default_optimizations = False
  return _stream_ops.unbatch_dense(_stream_ops.parallel_map_on_host(
      tf.data.Dataset.range(2**40), draw_batches)).prefetch(tf.data.AUTOTUNE).with_options(options)


def breakdown(features, labels):
  """Where a batch's time goes: the draw, the gather of its rows, the rest of the stream."""
  rows = tf.constant(features)
  key = tf.constant([0, 1], tf.int64)
  baseline = shuffle_batch(features, labels)
  print(f"batches/s: median of {_ROUNDS.value} rounds of {_BATCHES.value} batches; us per batch from the medians")
  print("| sampler | shuffle + batch | stream (ratio) | draw + gather | draw alone "
        "| us per batch: draw, gather, rest |")
  print("|---|---|---|---|---|---|")
  for name in _SAMPLERS.value:
    # Started as AnnealingCallback starts it, so that every round's new iterator may begin at step 0.
    stream, _, batcher = repulsive(features, labels, name, start_step=None)
    drawer = batcher.drawer
    first_step = lambda draw: draw * drawer.steps_per_draw  # noqa: E731
    pipelines = {"baseline": baseline, "stream": stream,
                 "draw + gather": stream_of(lambda draw: tf.gather(rows, drawer.draw(key, first_step(draw))[0])),
                 "draw alone": stream_of(lambda draw: drawer.draw(key, first_step(draw))[0])}
    rates = {part: [] for part in pipelines}
    for _ in range(_ROUNDS.value):
      for part, dataset in pipelines.items():
        rates[part].append(batches_per_second(dataset, _BATCHES.value,
                                              (lambda: batcher.start_at(0)) if part == "stream" else lambda: None))
    rate = {part: float(np.median(values)) for part, values in rates.items()}
    draw_us = 1e6 / rate["draw alone"]
    gather_us = 1e6 / rate["draw + gather"] - draw_us
    rest_us = 1e6 / rate["stream"] - 1e6 / rate["draw + gather"]
    print(f"| {name} | {rate['baseline']:.0f} | {rate['stream']:.0f} ({rate['stream'] / rate['baseline']:.2f}) | "
          f"{rate['draw + gather']:.0f} | {rate['draw alone']:.0f} | {draw_us:.0f}, {gather_us:.0f}, {rest_us:.0f} |",
          flush=True)


def start_breakdown(features, labels):
  """What a new iterator's first batch costs per piece of the draw function, on small data."""
  rows = tf.constant(features)
  num_points = len(features)
  key = tf.constant([0, 1], tf.int64)

  def darts(draw):
    return tf.random.stateless_uniform([16, _BATCH_SIZE], tf.stack([draw, 0]), 0, num_points, tf.int32)

  def loop(indices, rounds, body=lambda indices: (indices + 1) % num_points):
    return tf.while_loop(lambda i, _: i < rounds, lambda i, indices: (i + 1, body(indices)), (0, indices))[1]

  pipelines = {
      "shuffle(N).batch(50)": tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(num_points).batch(
          _BATCH_SIZE),
      "a gather of 16 x 50 random rows": stream_of(lambda draw: tf.gather(rows, darts(draw))),
      "the same after a while loop": stream_of(lambda draw: tf.gather(rows, loop(darts(draw), 3))),
      "the same after a loop in a loop": stream_of(
          lambda draw: tf.gather(rows, loop(darts(draw), 3, lambda indices: loop(indices, 2)))),
      "the same after a cond": stream_of(
          lambda draw: tf.gather(rows, tf.cond(draw >= 0, lambda: darts(draw), lambda: darts(draw) // 2))),
  }
  for name in ("uniform", "vanilla_pds"):
    stream, _, batcher = repulsive(features, labels, name)
    drawer = batcher.drawer
    pipelines[f"{name}: its draw and a gather"] = stream_of(
        lambda draw, drawer=drawer: tf.gather(rows, drawer.draw(key, draw * drawer.steps_per_draw)[0]))
    pipelines[f"{name}: the batch stream"] = stream
  print(f"first batch of a new iterator, median of {_STARTS.value}")
  print("| stream | first batch (ms) | ratio |")
  print("|---|---|---|")
  baseline = None
  for name, dataset in pipelines.items():
    start = first_batch_ms(dataset, _STARTS.value)
    baseline = baseline or start
    print(f"| {name} | {start:.1f} | {start / baseline:.2f} |", flush=True)


def main(argv):
  del argv
  if _DISABLE_GRAPPLER.value:
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
  if _START_BREAKDOWN.value:
    digits = sk_datasets.load_digits()
    start_breakdown((digits.data[:1257] / 16.0).astype(np.float32), digits.target[:1257])
    return
  breakdown(*mnist_like())


if __name__ == "__main__":
  app.run(main)
