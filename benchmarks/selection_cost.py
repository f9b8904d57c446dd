"""What the selection methods that need no extra pass cost per training step, against their baselines.

  .venv/bin/python -m benchmarks.selection_cost [--num_points=60000] [--rounds=8]

Data: MNIST-like clipped clusters, N x 28 x 28 x 1 (`benchmarks/data.py`), 10 labels.
Model: the Deep-MNIST CNN (`examples.mnist_deep.train.deep_mnist_model`), Adam 1e-4, k = 50.

Each arm trains a model of its own through `train_on_batch` (the step `fit` runs, XLA as Keras
chooses), one iterator each, kept open. The arms take turns, `--steps` steps a round; the first
round of each (traces, the first batch) is left out, and the table holds each arm's median round,
wall-clock and the process's CPU time, and its ratio to its baseline's median in the same run:

* `EpochShuffle()` on the model itself: the baseline of the pass samplers.
* `EpochPruning()` and `RandomPruning()` through `RecordingModel` (their passes shorten after
  the first 1,200 steps: the rounds cross pass boundaries, whose set-up is in the time), and
  `RS2(fraction=0.5)` on the model itself.
* `Uniform()` of k on the model itself: the baseline of the online importance sampler.
* `OnlineImportance` on `Uniform()` presamples of B = 3k: with the switch off (tau below its
  threshold all along: what it costs while importance would not pay) and on (every step scores
  the presample and draws by importance).

Also printed: the seconds of one pass set-up at this N (what a pass's first step adds).
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from examples.mnist_deep import train  # noqa: E402
from benchmarks.data import mnist_like  # noqa: E402
import tf_repulsive  # noqa: E402

_NUM_POINTS = flags.DEFINE_integer("num_points", 60000, "N.")
_ROUNDS = flags.DEFINE_integer("rounds", 8, "Rounds per arm (the first is left out).")
_STEPS = flags.DEFINE_integer("steps", 300, "Training steps per round.")
_BATCH_SIZE = 50
_PRESAMPLE = 3


def _model(wrap=None):
  keras.utils.set_random_seed(0)
  model = train.deep_mnist_model()
  trainer = model if wrap is None else wrap(model)
  trainer.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return trainer


def _arms(data):
  """name -> (baseline name, trainer, iterator, batcher)."""
  steps = _ROUNDS.value * _STEPS.value
  options = tf_repulsive.BatcherOptions(verbose=False)

  def batcher(sampler, batch_size=_BATCH_SIZE):
    built = tf_repulsive.repulsive_batch(batch_size, sampler, seed=1, start_step=0, options=options)
    return built, iter(data.apply(built))

  arms = {}
  shuffle, stream = batcher(tf_repulsive.EpochShuffle())
  arms["EpochShuffle()"] = (None, _model(), stream, shuffle)
  for sampler in (tf_repulsive.EpochPruning(total_steps=steps), tf_repulsive.RandomPruning(total_steps=steps)):
    pruning, stream = batcher(sampler)
    arms[f"{type(sampler).__name__}()"] = ("EpochShuffle()", _model(
        lambda model, pruning=pruning: tf_repulsive.RecordingModel(model, pruning)), stream, pruning)
  rs2, stream = batcher(tf_repulsive.RS2(fraction=0.5))
  arms["RS2(0.5)"] = ("EpochShuffle()", _model(), stream, rs2)
  uniform, stream = batcher(tf_repulsive.Uniform())
  arms["Uniform()"] = (None, _model(), stream, uniform)
  for name, threshold in (("OnlineImportance, off", 1e9), ("OnlineImportance, on", 1.0)):
    presamples, stream = batcher(tf_repulsive.Uniform(), _PRESAMPLE * _BATCH_SIZE)
    trainer = _model(lambda model, threshold=threshold: tf_repulsive.OnlineImportance(
        model, batch_size=_BATCH_SIZE, tau_threshold=threshold, smoothing=0.0))
    if threshold == 1.0:
      trainer.tau.assign(100.0)  # on from the first step
    arms[name] = ("Uniform()", trainer, stream, presamples)
  return arms


def _set_up_seconds(data):
  """The median seconds of a pass set-up at this N, on recorded losses."""
  batcher = tf_repulsive.repulsive_batch(_BATCH_SIZE, tf_repulsive.EpochPruning(total_steps=10**6), seed=1,
                                         start_step=0, options=tf_repulsive.BatcherOptions(verbose=False))
  data.apply(batcher)
  state = batcher.sampler_state
  state.losses.assign(np.random.default_rng(0).exponential(size=_NUM_POINTS.value).astype(np.float32))
  set_up = tf.function(lambda index: batcher.drawer._set_up(  # pylint: disable=protected-access
      tf.constant([1, 0x5EED], tf.int64), index, tf.constant(0, tf.int64)))
  seconds = []
  for index in range(1, 12):
    began = time.perf_counter()
    set_up(tf.constant(index, tf.int64))
    state.pass_size.numpy()
    seconds.append(time.perf_counter() - began)
  return float(np.median(seconds[1:]))


def main(argv):
  del argv
  num_points = _NUM_POINTS.value
  x, y = mnist_like(num_points=num_points)
  data = tf.data.Dataset.from_tensor_slices((x.reshape(num_points, 28, 28, 1), y))
  arms = _arms(data)
  wall = {name: [] for name in arms}
  cpu = {name: [] for name in arms}
  step = 0
  for round_index in range(_ROUNDS.value):
    for name, (_, trainer, iterator, _) in arms.items():
      began, cpu_began = time.perf_counter(), time.process_time()
      for _ in range(_STEPS.value):
        trainer.train_on_batch(*next(iterator))
      if round_index:
        wall[name].append((time.perf_counter() - began) / _STEPS.value)
        cpu[name].append((time.process_time() - cpu_began) / _STEPS.value)
    step += _STEPS.value
    print(f"round {round_index + 1} of {_ROUNDS.value} done", flush=True)
  print(f"N = {num_points}, 28 x 28 x 1, k = {_BATCH_SIZE}, Deep-MNIST CNN, Adam 1e-4; medians of "
        f"{_ROUNDS.value - 1} rounds of {_STEPS.value} steps (after one left out); {os.cpu_count()} cores")
  print("| arm | ms per step | vs baseline | CPU ms per step | vs baseline | passes | last pass share |")
  print("|---|---|---|---|---|---|---|")
  for name, (baseline, _, _, batcher) in arms.items():
    median, median_cpu = 1e3 * np.median(wall[name]), 1e3 * np.median(cpu[name])
    ratio = "" if baseline is None else f"{median / (1e3 * np.median(wall[baseline])):.3f}"
    cpu_ratio = "" if baseline is None else f"{median_cpu / (1e3 * np.median(cpu[baseline])):.3f}"
    state = batcher.sampler_state
    passes = share = ""
    if isinstance(state, tf_repulsive.PassState):
      passes = str(int(state.pass_index.numpy()) + 1)
      share = f"{int(state.pass_size.numpy()) / num_points:.2f}"
    print(f"| {name} | {median:.2f} | {ratio} | {median_cpu:.2f} | {cpu_ratio} | {passes} | {share} |")
  print(f"A pass set-up at N = {num_points}: {1e3 * _set_up_seconds(data):.1f} ms (once per pass).")


if __name__ == "__main__":
  app.run(main)
