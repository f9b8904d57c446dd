"""Batches/s of the dart thrower's draw alone, Vanilla against Easy, Dense and Anneal PDS at one radius.

  .venv/bin/python -m benchmarks.draw [--data=gaussian] [--num_points=50000]
      [--dim=64] [--batch_size=512] [--radius=auto] [--rounds=3] [--compare_tree=PATH]

Builds the dart throwers of Vanilla PDS, Easy PDS (the disk for mingling value 0 only), Dense PDS
(pi uniform over the mingling values) and Anneal PDS (the paper's schedule) on one dataset at one
radius (by default Vanilla PDS's `radius="auto"`), then times each one's `draw` in a `tf.function`
loop over consecutive draws from step 4000, in rounds that alternate the throwers (no tf.data
pipeline, no recording: what the disks and the darts by value cost against Vanilla PDS's). Then,
untimed, the darts a batch took (the mean over the first timed round's draws), counted by a
thrower with a trace of its own, traced while each block adds its settled darts to a variable (a
stateful op in the draw's loop slows it, so the timed throwers have none).
With `--compare_tree`, the dart thrower of another checkout (its path's
`tf_repulsive/_dart*.py`; the rest of the package is this one's) is timed beside this one in the
same process, its throwers suffixed "@other" (their darts are counted when that checkout's blocks
settle in `Acceptance.accept`, as here). Data as in benchmark_batch_sizes.py
(`benchmarks/data.py`).
"""

import importlib.abc
import importlib.util
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.data import dataset  # noqa: E402
import tf_repulsive  # noqa: E402
from tf_repulsive import _dart_throwing  # noqa: E402,F401 (loads this checkout's dart-throwing modules)
from tf_repulsive import _mingling  # noqa: E402
from tf_repulsive import _samplers  # noqa: E402
from tf_repulsive import _schedule  # noqa: E402

_DATA = flags.DEFINE_enum("data", "gaussian", ["gaussian", "clusters", "mnist_like"], "Dataset.")
_NUM_POINTS = flags.DEFINE_integer("num_points", 50000, "N.")
_DIM = flags.DEFINE_integer("dim", 64, "d.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 512, "k.")
_RADIUS = flags.DEFINE_string("radius", "auto",
                              "The disk radius of every thrower: a number, or \"auto\" (Vanilla PDS's).")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
_COMPARE_TREE = flags.DEFINE_string("compare_tree", None,
                                     "Another checkout whose dart thrower to time beside this one.")


_DART_MODULES = "tf_repulsive._dart"


class _TreeFinder(importlib.abc.MetaPathFinder):
  """Finds the modules `names` (`tf_repulsive._dart*`) in the package directory of another checkout."""

  def __init__(self, package, names):
    self._package, self._names = package, names

  def find_spec(self, fullname, path, target=None):
    del path, target
    if fullname not in self._names:
      return None
    return importlib.util.spec_from_file_location(fullname,
                                                  os.path.join(self._package, fullname.split(".")[-1] + ".py"))


def _dart_modules(tree=None):
  """The dart-throwing modules (`tf_repulsive/_dart*.py`) by name: this checkout's, or those of `tree`.

  Those of `tree` import each other from there while they load; this checkout's stay the package's.
  """
  loaded = {name for name in sys.modules if name.startswith(_DART_MODULES)}
  if tree is None:
    return {name.split(".")[-1]: sys.modules[name] for name in loaded}
  package = os.path.join(tree, "tf_repulsive")
  names = loaded | {f"tf_repulsive.{file[:-3]}" for file in os.listdir(package)
                    if file.startswith("_dart") and file.endswith(".py")}
  ours = {name: sys.modules.pop(name) for name in names if name in sys.modules}
  for name in ours:
    delattr(tf_repulsive, name.split(".")[-1])
  finder = _TreeFinder(package, names)
  sys.meta_path.insert(0, finder)
  try:
    importlib.import_module("tf_repulsive._dart_throwing")
    return {name.split(".")[-1]: sys.modules.pop(name) for name in names if name in sys.modules}
  finally:
    sys.meta_path.remove(finder)
    sys.modules.update(ours)
    for name, module in ours.items():
      setattr(tf_repulsive, name.split(".")[-1], module)


def _auto_radius(features, labels, batch_size):
  batcher = tf_repulsive.repulsive_batch(batch_size, tf_repulsive.VanillaPDS(radius="auto"), seed=0, start_step=0)
  tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
  return batcher.stats().report["radius"]


def _timed_draws(thrower):
  """A `tf.function` drawing `count` consecutive draws from `first_step`; returns their fill count."""
  key = tf.constant([1, 2], tf.int64)
  steps_per_draw = thrower.steps_per_draw

  @tf.function
  def draws(first_step, count):
    def body(draw, filled):
      _, fallback = thrower.draw(key, first_step + tf.cast(draw, tf.int64) * steps_per_draw)
      return draw + 1, filled + tf.reduce_sum(fallback)
    return tf.while_loop(lambda draw, filled: draw < count, body, (tf.constant(0), tf.constant(0)))[1]

  draws(tf.constant(0, tf.int64), tf.constant(2))
  return draws


def _darts_per_batch(modules, features, plan, batch_size, first_step, count):
  """The mean darts thrown per batch over `count` draws from `first_step`, or None in a tree without `Acceptance`.

  Counted by a thrower with a trace of its own, traced while `Acceptance.accept` counts.
  """
  holder = next((module for module in modules.values() if hasattr(module, "Acceptance")), None)
  if holder is None:
    return None
  acceptance = holder.Acceptance
  thrown = tf.Variable(0, dtype=tf.int64)
  accept = acceptance.accept

  def counting_accept(self, darts, accepted, count, radius_scale):
    accepted, count, settled, survival = accept(self, darts, accepted, count, radius_scale)
    with tf.control_dependencies([thrown.assign_add(tf.cast(settled, tf.int64))]):
      return accepted, tf.identity(count), settled, survival

  module = modules["_dart_throwing"]
  acceptance.accept = counting_accept
  try:
    if hasattr(module, "DrawTraces"):  # a tree whose throwers take their trace cache
      draws = _timed_draws(module.DartThrower(features, plan, batch_size, traces=module.DrawTraces()))
    else:  # one whose traces are a memo: the counting trace is new, and not kept
      modules["_dart_blocks"].traced_draws.cache_clear()
      draws = _timed_draws(module.DartThrower(features, plan, batch_size))
      modules["_dart_blocks"].traced_draws.cache_clear()
  finally:
    acceptance.accept = accept
  thrown.assign(0)
  draws(tf.constant(first_step, tf.int64), tf.constant(count))
  # Every step of a draw settles the same darts (`_accept`): the count is per step.
  return int(thrown.numpy()) / count


def main(argv):
  del argv
  features, labels = dataset(_DATA.value, _NUM_POINTS.value, _DIM.value)
  num_points, k = features.shape[0], _BATCH_SIZE.value
  radius = _auto_radius(features, labels, k) if _RADIUS.value == "auto" else float(_RADIUS.value)
  neighbors = 5
  values = _mingling.mingling_values(features, labels, neighbors, verbose=True).values
  counts = np.bincount(values, minlength=neighbors + 1)
  histogram = tf.constant(counts / counts.sum(), tf.float64)
  uniform_pi = tf.constant(np.full(neighbors + 1, 1 / (neighbors + 1)), tf.float64)
  point_radius, max_darts = np.full(num_points, radius), _samplers.dart_budget(None, k)
  print(f"{_DATA.value}: N = {num_points}, d = {features.shape[1]}, k = {k}, radius {radius}; "
        f"points per mingling value {counts.tolist()}")
  trees = {"": _dart_modules()}
  if _COMPARE_TREE.value:
    trees["@other"] = _dart_modules(_COMPARE_TREE.value)
  timed, darts = {}, {}
  for suffix, modules in trees.items():
    module = modules["_dart_throwing"]
    # (pi's last argument is the step: a tree whose pi takes the histogram first passes it too.)
    plans = {
        "vanilla_pds": module.DartPlan(point_radius, None, None, 0, max_darts),
        "easy_pds": module.DartPlan(np.where(values == 0, point_radius, 0.0), None, None, 0, max_darts),
        "dense_pds": module.DartPlan(point_radius, lambda *args: uniform_pi, values, neighbors + 1, max_darts),
        "anneal_pds": module.DartPlan(point_radius, lambda *args: _schedule.paper_schedule(histogram, args[-1]),
                                      values, neighbors + 1, max_darts),
    }
    for name, plan in plans.items():
      thrower = module.DartThrower(features, plan, k)
      timed[name + suffix] = (_timed_draws(thrower), thrower.steps_per_draw, modules, plan)
  rates = {name: [] for name in timed}
  draw_counts = {name: max(4, 16000 // (steps_per_draw * k)) for name, (_, steps_per_draw, _, _) in timed.items()}
  for round_number in range(_ROUNDS.value):
    for name, (draws, steps_per_draw, _, _) in timed.items():
      start = time.perf_counter()
      filled = int(draws(tf.constant(4000 + round_number * 100000, tf.int64), tf.constant(draw_counts[name])))
      rates[name].append(draw_counts[name] * steps_per_draw / (time.perf_counter() - start))
      if filled:
        print(f"  ({name}: the fill supplied {filled} points)")
  for name, (_, steps_per_draw, modules, plan) in timed.items():
    darts[name] = _darts_per_batch(modules, features, plan, k, 4000, draw_counts[name])
  print("| thrower | batches/s per round | darts per batch |\n|---|---|---|")
  for name, rate in rates.items():
    print(f"| {name} | {', '.join(f'{value:.0f}' for value in rate)} | "
          f"{'-' if darts[name] is None else f'{darts[name]:.0f}'} |")


if __name__ == "__main__":
  app.run(main)
