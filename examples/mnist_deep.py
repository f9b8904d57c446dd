r"""Deep MNIST (TensorFlow's "Deep MNIST for Experts") trained with repulsive mini-batches.

The paper's MNIST experiment: the tutorial's CNN (conv 5x5x32 - pool - conv 5x5x64 - pool - dense
1024 - dropout 0.5 - dense 10; truncated-normal(0.1) weights, 0.1 biases; Adam 1e-4; batch 50),
trained on half of the training data with mini-batches from `--sampler`, test error evaluated
along training. Mingling indices are computed on the pixels (K = 5).

`--dataset=digits` (default) runs anywhere: scikit-learn's bundled 8x8 handwritten digits,
upsampled to 28x28, with a fixed stratified held-out test split. `--dataset=mnist` reads MNIST
through tensorflow-datasets from `--data_dir` and never downloads.

  python examples/mnist_deep.py --flagfile=configs/mnist_deep_smoke.flags
  python examples/mnist_deep.py --flagfile=configs/mnist_deep_digits.flags --sampler=anneal_pds --seed=1

Writes into `--output_dir`: TensorBoard logs (loss, accuracy, learning rate, the sampler's pi and
mingling composition, test metrics), `eval.csv` (test error along training) and `eval.png`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn import datasets as sk_datasets  # noqa: E402
from sklearn import model_selection  # noqa: E402
import tensorflow as tf  # noqa: E402

import common  # noqa: E402
import tf_repulsive  # noqa: E402

FLAGS = flags.FlagValues()
_DATASET = flags.DEFINE_enum("dataset", "digits", ["digits", "mnist"], "Training data.", flag_values=FLAGS)
_DATA_DIR = flags.DEFINE_string("data_dir", None, "tensorflow-datasets data_dir for --dataset=mnist.",
                                flag_values=FLAGS)
_TRAIN_FRACTION = flags.DEFINE_float("train_fraction", 0.5, "Fraction of the training split used (paper: half).",
                                     flag_values=FLAGS)
_SAMPLER = flags.DEFINE_enum("sampler", "uniform", list(common.ALL_SAMPLER_NAMES), "Mini-batch sampler.",
                             flag_values=FLAGS)
_DENSE_PI = flags.DEFINE_list("dense_pi", None, "pi of dense_pds over mingling values 0..K (default uniform).",
                              flag_values=FLAGS)
_NEIGHBORS = flags.DEFINE_integer("neighbors", 5, "K of the mingling index.", flag_values=FLAGS)
_RADIUS = flags.DEFINE_string("radius", "default",
                              "Disk radius: default (half the median distance), auto, or a number.", flag_values=FLAGS)
_STEPS = flags.DEFINE_integer("steps", 20000, "Training steps.", flag_values=FLAGS)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 50, "Mini-batch size.", flag_values=FLAGS)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-4, "Adam learning rate.", flag_values=FLAGS)
_EVAL_EVERY = flags.DEFINE_integer("eval_every", 100, "Evaluate the test error every this many steps.",
                                   flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the initialisation, dropout and the batch draws.", flag_values=FLAGS)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/mnist_deep", "Where logs, CSV and plot go.", flag_values=FLAGS)


@dataclasses.dataclass(frozen=True)
class Config:
  """One Deep-MNIST run; the flags map onto it one to one."""

  dataset: str = "digits"
  data_dir: str | None = None
  train_fraction: float = 0.5
  sampler: str = "uniform"
  dense_pi: tuple[float, ...] | None = None
  neighbors: int = 5
  radius: float | str | None = None
  steps: int = 20000
  batch_size: int = 50
  learning_rate: float = 1e-4
  eval_every: int = 100
  seed: int = 0
  output_dir: str = "runs/mnist_deep"

  def __post_init__(self):
    if not 0.0 < self.train_fraction <= 1.0:
      raise ValueError(f"--train_fraction must be in (0, 1]; got {self.train_fraction}.")
    for name in ("steps", "batch_size", "eval_every"):
      if getattr(self, name) < 1:
        raise ValueError(f"--{name} must be >= 1; got {getattr(self, name)}.")


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


def train_and_evaluate(config: Config, verbose: int = 1) -> list[dict[str, float]]:
  """Trains the CNN with the configured sampler.

  Args:
    config: the run.
    verbose: Keras progress-bar verbosity.

  Returns:
    The test curve: dicts with "step", "test_loss", "test_accuracy", "test_error".
  """
  if config.dataset == "digits":
    x_train, y_train, x_test, y_test = load_digits_28x28(config.train_fraction)
  else:
    x_train, y_train, x_test, y_test = load_mnist(config.data_dir, config.train_fraction)
  output_dir = pathlib.Path(config.output_dir)
  keras.utils.set_random_seed(config.seed)
  model = deep_mnist_model()
  model.compile(optimizer=keras.optimizers.Adam(config.learning_rate),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
  sampler = common.make_sampler(config.sampler, neighbors=config.neighbors, radius=config.radius,
                                dense_pi=config.dense_pi)
  batcher = tf_repulsive.repulsive_batch(config.batch_size, sampler, seed=config.seed)
  train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).apply(batcher)
  test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(500)
  evaluation = common.PeriodicEvaluation(test, config.eval_every, output_dir / "eval.csv",
                                         log_dir=output_dir / "tensorboard" / "test")
  # One Keras "epoch" per evaluation interval: a progress bar per interval, epoch logs for TensorBoard.
  model.fit(train, steps_per_epoch=config.eval_every, epochs=math.ceil(config.steps / config.eval_every),
            verbose=verbose,
            callbacks=[*common.sampler_callbacks(batcher), evaluation,
                       keras.callbacks.TensorBoard(str(output_dir / "tensorboard"))])
  curve = [{**row, "test_error": 1.0 - row["test_accuracy"]} for row in evaluation.history]
  plot_curve(curve, output_dir / "eval.png", f"{config.dataset}, {config.sampler}, seed {config.seed}")
  return curve


def plot_curve(curve: list[dict[str, float]], path: pathlib.Path, title: str) -> None:
  import matplotlib  # plotting is only needed here
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  figure, axis = plt.subplots(figsize=(6, 4))
  axis.plot([row["step"] for row in curve], [row["test_error"] for row in curve])
  axis.set(xlabel="training step", ylabel="test error", title=title, yscale="log")
  axis.grid(True, which="both", alpha=0.3)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def config_from_flags() -> Config:
  return Config(
      dataset=_DATASET.value, data_dir=_DATA_DIR.value, train_fraction=_TRAIN_FRACTION.value,
      sampler=_SAMPLER.value,
      dense_pi=None if _DENSE_PI.value is None else tuple(float(p) for p in _DENSE_PI.value),
      neighbors=_NEIGHBORS.value, radius=common.parse_radius(_RADIUS.value), steps=_STEPS.value,
      batch_size=_BATCH_SIZE.value,
      learning_rate=_LEARNING_RATE.value, eval_every=_EVAL_EVERY.value, seed=_SEED.value,
      output_dir=_OUTPUT_DIR.value)


def main(argv):
  del argv
  curve = train_and_evaluate(config_from_flags())
  print(f"final test error {curve[-1]['test_error']:.4f} after {curve[-1]['step']} steps")


if __name__ == "__main__":
  common.run(main, FLAGS)
