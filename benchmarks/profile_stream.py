"""Where a batch stream's CPU time goes, steady state: its draw against the machinery around it, and by op.

  .venv/bin/python -m benchmarks.profile_stream [--data=gaussian] [--num_points=50000] [--dim=64]
      [--batch_size=50] [--sampler=vanilla_pds] [--radius=auto] [--rounds=3] [--seconds=2] [--profile_batches=2000]

`--data` (the first of the list), `--num_points`, `--dim`, `--radius`, `--rounds` and `--seconds` are
benchmark_batch_sizes.py's flags, with its defaults.

Two parts, on one batcher (`start_step=None`, started at 0):

1. Graph-loop batches/s (a `tf.function` loop of `get_next()`, as in benchmark_batch_sizes.py), one
   iterator each, alternating rounds, with the process's CPU seconds per batch (all threads): shuffle +
   batch; the batch stream; the same stream with the sampler's draw replaced by constant indices (the
   stream's start, checks, record, gather, unbatch, prefetch and delivery all kept), so that the
   difference is the draw.
2. A TensorFlow profiler trace of `--profile_batches` batches of the stream in the graph loop, its
   op events summed by op (the name without its trailing number) and type: microseconds per batch,
   and op calls per batch. The profiler's own cost inflates every figure alike.
"""

import collections
import glob
import os
import re
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

import tf_repulsive  # noqa: E402
from benchmarks.batch_sizes import _DATA  # noqa: E402
from benchmarks.batch_sizes import _DIM  # noqa: E402
from benchmarks.batch_sizes import _NUM_POINTS  # noqa: E402
from benchmarks.batch_sizes import _RADIUS  # noqa: E402
from benchmarks.batch_sizes import _ROUNDS  # noqa: E402
from benchmarks.batch_sizes import _SAMPLERS_BY_NAME  # noqa: E402
from benchmarks.batch_sizes import _SECONDS  # noqa: E402
from benchmarks.batch_sizes import graph_rounds  # noqa: E402
from benchmarks.batch_sizes import Timed  # noqa: E402
from benchmarks.data import dataset  # noqa: E402
from tf_repulsive import _drawers  # noqa: E402

_BATCH_SIZE = flags.DEFINE_integer("batch_size", 50, "k.")
_SAMPLER = flags.DEFINE_enum("sampler", "vanilla_pds", list(_SAMPLERS_BY_NAME), "Sampler.")
_PROFILE_BATCHES = flags.DEFINE_integer("profile_batches", 2000, "Batches in the profiler trace (0: none).")
_TOP = flags.DEFINE_integer("top", 12, "Ops listed from the trace.")


def with_constant_draw(batcher, source):
  """`source.apply(batcher)` again, the drawer's draw replaced by fixed distinct indices (a new batcher)."""
  constant = tf_repulsive.repulsive_batch(batcher.batch_size, batcher.sampler, seed=0, start_step=None,
                                          options=batcher.options)
  checked_draw = _drawers.checked_draw

  def fixed(drawer, key, first_step, batch_size):
    del key
    rows = np.random.default_rng(0).permutation(batcher.num_points)[:drawer.steps_per_draw * batch_size]
    indices = tf.reshape(tf.constant(rows, tf.int32), [drawer.steps_per_draw, batch_size])
    # (A step-dependent shift keeps the ops from being folded into constants.)
    indices = (indices + tf.cast(first_step % 2, tf.int32)) % batcher.num_points
    return indices, tf.zeros([drawer.steps_per_draw], tf.int32)

  _drawers.checked_draw = fixed
  try:
    # A drawer with a trace of its own draws through `drawer.draw` in the stream; replace it too.
    stream = source.apply(constant)
    return stream, constant
  finally:
    _drawers.checked_draw = checked_draw


def op_profile(stream, batcher, batches, top):
  """Microseconds and calls per batch of the stream's ops, from a profiler trace of the graph loop."""
  batcher.start_at(0)
  reader = Timed(stream)
  logdir = tempfile.mkdtemp(prefix="profile_stream_")
  tf.profiler.experimental.start(logdir)
  reader._seconds_per_batch("graph", batches)  # pylint: disable=protected-access
  tf.profiler.experimental.stop()
  space = xplane_pb2.XSpace()
  with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as file:
    space.ParseFromString(file.read())
  seconds, calls = collections.Counter(), collections.Counter()
  for plane in space.planes:
    if not plane.name.startswith("/host:CPU"):
      continue
    for line in plane.lines:
      for event in line.events:
        name = plane.event_metadata[event.metadata_id].name
        # Op events are "name:Type"; the runtime's own events (iterators, executors) are left out.
        if ":" not in name or "::" in name or name.startswith(("Iterator", "EagerLocalExecute")):
          continue
        op, kind = name.rsplit(":", 1)
        if kind in ("", "While", "StatelessWhile", "If", "StatelessIf"):
          continue
        key = (re.sub(r"_\d+$", "", op), kind)
        seconds[key] += event.duration_ps * 1e-12
        calls[key] += 1
  count = batches
  total = sum(seconds.values())
  print(f"\nop events of {count} batches: {1e6 * total / count:.0f} us per batch in all")
  print("| op | type | us per batch | share | calls per batch |\n|---|---|---|---|---|")
  for (op, kind), value in seconds.most_common(top):
    print(f"| {op} | {kind} | {1e6 * value / count:.0f} | {value / total:.0%} | {calls[op, kind] / count:.2f} |")


def main(argv):
  del argv
  features, labels = dataset(_DATA.value[0], _NUM_POINTS.value, _DIM.value)
  k = _BATCH_SIZE.value
  source = tf.data.Dataset.from_tensor_slices((features, labels))
  radius = {"radius": "auto"} if _RADIUS.value == "auto" else {}
  batcher = tf_repulsive.repulsive_batch(k, _SAMPLERS_BY_NAME[_SAMPLER.value](radius), seed=0, start_step=None,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = source.apply(batcher)
  constant_stream, constant = with_constant_draw(batcher, source)
  pipelines = {"shuffle + batch": (source.shuffle(len(features)).batch(k).repeat(), None),
               "batch stream": (stream, batcher), "batch stream, constant draw": (constant_stream, constant)}
  timed = {}
  for name, (pipeline, owner) in pipelines.items():
    if owner is not None:
      owner.start_at(0)
    timed[name] = Timed(pipeline)
  rates, cpu = graph_rounds(timed, _ROUNDS.value, _SECONDS.value)
  print(f"{_DATA.value[0]}: N = {len(features)}, d = {features.shape[1]}, k = {k}, {_SAMPLER.value}, radius "
        f"{batcher.stats().report.get('radius', '-')}; graph loop, {_ROUNDS.value} rounds of ~{_SECONDS.value:g} s")
  print("| pipeline | batches/s | ratio | CPU us per batch |\n|---|---|---|---|")
  for name in timed:
    ratio = np.median(np.asarray(rates[name]) / np.asarray(rates["shuffle + batch"]))
    print(f"| {name} | {np.median(rates[name]):.0f} | {ratio:.2f} | {1e6 * np.median(cpu[name]):.0f} |")
  del timed
  if _PROFILE_BATCHES.value:
    op_profile(stream, batcher, _PROFILE_BATCHES.value, _TOP.value)


if __name__ == "__main__":
  app.run(main)
