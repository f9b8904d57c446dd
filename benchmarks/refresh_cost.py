"""What refreshes of the model's features cost at N = 60,000, against uniform training's step.

  .venv/bin/python -m benchmarks.refresh_cost [--num_points=60000] [--steps=200]

Data: MNIST-like clipped clusters, N x 28 x 28 x 1 (`benchmarks/data.py`), 10 labels.
Model: the Deep-MNIST CNN (`examples.mnist_deep.train.deep_mnist_model`), Adam 1e-4, k = 50.
Measured, in this order: the seconds of a uniform training step (the second of two `fit` epochs
of `--steps` steps); one full computation of `GradientFeatures()` over all N (what every refresh
runs); each importance sampler's build on those features (what every refresh runs after it),
with the inclusion estimate for the unbiased one. A full refresh every R steps then costs
(features + build) / (R x step) of uniform's training time: the overhead the samplers pay per
step, against the 5% target.

Then the features from the training step (`ModelSpace(..., from_training_step=True)`): a custom
loop of `Importance()` on `GradientFeatures()` refreshed every 100 steps from the table the steps
update, without a directory and with one, and of `ImportancePDS()` (radius "auto") with one,
against `Uniform()` and `shuffle(N).batch(k)` in the same process (`_print_training_step_overhead`).
"""

import os
import tempfile
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
_STEPS = flags.DEFINE_integer("steps", 200, "Uniform training steps timed (after a warm-up epoch of the same).")
_ONLY_TRAINING_STEP = flags.DEFINE_boolean("only_training_step", False, "Measure the training step's features only.")
_BATCH_SIZE = 50
_REFRESH_INTERVALS = (100, 400, 1000)


def main(argv):
  del argv
  num_points = _NUM_POINTS.value
  x, y = mnist_like(num_points=num_points)
  x = x.reshape(num_points, 28, 28, 1)
  if _ONLY_TRAINING_STEP.value:
    _print_training_step_overhead(x, y)
    return
  keras.utils.set_random_seed(0)
  model = train.deep_mnist_model()
  model.compile(optimizer=keras.optimizers.Adam(1e-4),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  batcher = tf_repulsive.repulsive_batch(_BATCH_SIZE, tf_repulsive.Uniform(), seed=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  epoch_began = []
  timer = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: epoch_began.append(time.perf_counter()))
  model.fit(stream, steps_per_epoch=_STEPS.value, epochs=2, verbose=0,
            callbacks=[tf_repulsive.AnnealingCallback(batcher), timer])
  step = (time.perf_counter() - epoch_began[1]) / _STEPS.value
  began = time.perf_counter()
  features = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(), model, x, y, verbose=False)
  inference = time.perf_counter() - began
  print(f"N = {num_points}, 28 x 28 x 1, k = {_BATCH_SIZE}, Deep-MNIST CNN; GradientFeatures d = {features.shape[1]}")
  print(f"uniform training step: {1000 * step:.1f} ms")
  print(f"features over all N: {inference:.1f} s = {inference / step:.0f} uniform steps")
  header = " | ".join(f"overhead at R = {interval}" for interval in _REFRESH_INTERVALS)
  print(f"| sampler | build (s) | refresh (s) | {header} |")
  print("|---|---|---|" + "---|" * len(_REFRESH_INTERVALS))
  for name, sampler, weighted in (("Importance", tf_repulsive.Importance(), False),
                                  ("Importance, unbiased", tf_repulsive.Importance(), True),
                                  ('ImportancePDS "auto"', tf_repulsive.ImportancePDS(), False),
                                  ('VanillaPDS "auto"', tf_repulsive.VanillaPDS(radius="auto"), False)):
    context = tf_repulsive.SamplingContext(features=features, labels=None, batch_size=_BATCH_SIZE,
                                           distance_cache_bytes=2**28, max_steps_per_draw=1)
    sampler.build(context)  # the first build traces; a refresh reuses the trace
    began = time.perf_counter()
    drawer = sampler.build(context)
    if weighted:
      drawer.inclusion_probabilities(tf.constant([0, 1], tf.int64), False)
    build = time.perf_counter() - began
    refresh = inference + build
    overheads = " | ".join(f"{100 * refresh / (interval * step):.0f}%" for interval in _REFRESH_INTERVALS)
    print(f"| {name} | {build:.2f} | {refresh:.1f} | {overheads} |")
  _print_training_step_overhead(x, y)


_EPOCHS = 9


def _print_training_step_overhead(x, y):
  """Epoch times of Importance on features from the training step against uniform training, as a table.

  Four runs side by side, epochs of 100 steps in turn, the first of each left out:
  `shuffle(N).batch(k)`; `Uniform()`; `Importance()` without a directory; and with one (a
  resumable run: each refresh's table and each step's record are written). Each trains a model
  of its own (the tap reads every training call of its model), and reads its stream behind
  `.prefetch(2)`, which draws the next step while this one trains. Wall-clock, and the process's
  CPU time over all its threads: other jobs on the machine move the first much more than the
  second.
  """
  data = tf.data.Dataset.from_tensor_slices((x, y))
  names = ("shuffle + batch", "Uniform()", "Importance(), no directory", "Importance(), a directory",
           "ImportancePDS(), a directory")
  runs = []
  for name in names:
    model = train.deep_mnist_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if name == "shuffle + batch":
      runs.append((model, None, None, iter(data.shuffle(len(x), seed=1).repeat().batch(_BATCH_SIZE).prefetch(2))))
      continue
    space = None
    if name.startswith("Importance"):
      space = tf_repulsive.ModelSpace(model, tf_repulsive.GradientFeatures(), refresh_every=100,
                                      from_training_step=True, verbose=False, keep_last=2,
                                      directory=tempfile.mkdtemp() if name.endswith("a directory") else None)
    sampler = (tf_repulsive.Uniform() if space is None else tf_repulsive.ImportancePDS()
               if name.startswith("ImportancePDS") else tf_repulsive.Importance())
    batcher = tf_repulsive.repulsive_batch(_BATCH_SIZE, sampler, seed=1, start_step=0, features=space,
                                           options=tf_repulsive.BatcherOptions(verbose=False))
    iterator = iter(data.apply(batcher).prefetch(2))
    if space is not None:
      # The wrapper that records the training step's features, compiled as the model is.
      trainer = tf_repulsive.RecordingModel(model, batcher)
      trainer.compile(optimizer=model.optimizer, loss=model.loss)
      model = trainer
    runs.append((model, batcher, space, iterator))
  seconds, cpu_seconds = [[] for _ in runs], [[] for _ in runs]
  for epoch in range(_EPOCHS):
    for which, (model, batcher, space, iterator) in enumerate(runs):
      began, cpu_began = time.perf_counter(), time.process_time()
      for step in range(epoch * 100, (epoch + 1) * 100):
        if space is not None:
          batcher.refresh_features(step)
        model.train_on_batch(*next(iterator))
      if epoch:
        seconds[which].append(time.perf_counter() - began)
        cpu_seconds[which].append(time.process_time() - cpu_began)
  wall, cpu = np.median(seconds, axis=1), np.median(cpu_seconds, axis=1)
  print(f"Features from the training step, R = 100; medians of {_EPOCHS - 1} epochs of 100 steps each:")
  print("| pipeline | epoch (s) | vs Uniform | vs shuffle + batch | CPU (s) | vs Uniform "
        "| a refresh from the table (s) |")
  print("|---|---|---|---|---|---|---|")
  for name, (_, batcher, _, _), epoch_seconds, epoch_cpu in zip(names, runs, wall, cpu):
    stats = batcher.stats() if batcher is not None else None
    refresh = f"{stats.refresh_seconds / stats.refreshes:.3f}" if stats is not None and stats.refreshes else ""
    print(f"| {name} | {epoch_seconds:.2f} | {100 * (epoch_seconds / wall[1] - 1):+.1f}% | "
          f"{100 * (epoch_seconds / wall[0] - 1):+.1f}% | {epoch_cpu:.2f} | {100 * (epoch_cpu / cpu[1] - 1):+.1f}% | "
          f"{refresh} |")


if __name__ == "__main__":
  app.run(main)
