r"""The paper's fine-grained classification experiment (Oxford Flowers), on an offline stand-in.

The paper (after Zhang et al. 2017) trains a softmax classifier by SGD on fixed off-the-shelf image
features and samples mini-batches in the space of those features concatenated with the one-hot
label, weighted w for the label part and 1 - w for the image part (w = 0.7); it reports test
accuracy after each epoch: Vanilla PDS matches k-DPP and both beat uniform sampling. Oxford Flowers
cannot be fetched here, so the stand-in is scikit-learn's bundled digits: a softmax classifier on
fixed unit-norm pixel features, the same sampling space (unit-norm pixels weighted 1 - w, one-hot
label weighted w), epochs of N / k steps, test accuracy after each epoch.

  python examples/fine_grained.py --flagfile=configs/fine_grained.flags
  python examples/fine_grained.py --flagfile=configs/fine_grained.flags --samplers=uniform,vanilla_pds \
      --radius=auto --output_dir=runs/fine_grained_auto

Writes into `--output_dir`: `results.csv` (test accuracy per sampler, batch size, seed and epoch)
and `results.md` (mean ± std over seeds at chosen epochs, and the paired difference to uniform).
"""

from __future__ import annotations

import csv
import dataclasses
import os
import pathlib
from typing import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn import datasets as sk_datasets  # noqa: E402
from sklearn import model_selection  # noqa: E402
import tensorflow as tf  # noqa: E402

import common  # noqa: E402
import tf_repulsive  # noqa: E402

NUM_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class Config:
  """One run of the experiment; the flags map onto it one to one."""

  output_dir: str = "runs/fine_grained"
  samplers: tuple[str, ...] = ("uniform", "epoch_shuffle", "vanilla_pds", "kdpp", "fast_kdpp")
  batch_sizes: tuple[int, ...] = (80, 150)
  seeds: int = 10
  epochs: int = 10
  label_weight: float = 0.7
  radius: float | str | None = None  # the paper's: half the median distance
  learning_rate: float = 0.5
  report_epochs: tuple[int, ...] = (1, 2, 3, 5, 10)

  def __post_init__(self):
    unknown = sorted(set(self.samplers) - set(common.ALL_SAMPLER_NAMES))
    if unknown or not self.samplers:
      raise ValueError(
          f"--samplers: got {list(self.samplers)}; choose from {', '.join(common.ALL_SAMPLER_NAMES)}.")
    if not self.batch_sizes or min(self.batch_sizes) < 1:
      raise ValueError(f"--batch_sizes must be >= 1; got {list(self.batch_sizes)}.")
    for name in ("seeds", "epochs"):
      if getattr(self, name) < 1:
        raise ValueError(f"--{name} must be >= 1; got {getattr(self, name)}.")
    if not 0.0 <= self.label_weight <= 1.0:
      raise ValueError(f"--label_weight must be in [0, 1]; got {self.label_weight}.")
    if self.learning_rate <= 0:
      raise ValueError(f"--learning_rate must be > 0; got {self.learning_rate}.")
    if not self.report_epochs or not all(1 <= epoch <= self.epochs for epoch in self.report_epochs):
      raise ValueError(f"--report_epochs must lie in [1, --epochs]; got {list(self.report_epochs)}.")


# The flags live in this module's own registry (see `common.run`), one per `Config` field.
FLAGS = flags.FlagValues()
_DEFAULTS = Config()
flags.DEFINE_string("output_dir", _DEFAULTS.output_dir, "Where the tables go.", flag_values=FLAGS)
flags.DEFINE_list("samplers", list(_DEFAULTS.samplers),
                  f"Samplers to compare: {', '.join(common.ALL_SAMPLER_NAMES)}.", flag_values=FLAGS)
flags.DEFINE_list("batch_sizes", [str(size) for size in _DEFAULTS.batch_sizes], "Mini-batch sizes k.",
                  flag_values=FLAGS)
flags.DEFINE_integer("seeds", _DEFAULTS.seeds,
                     "Runs per sampler and batch size; run s uses seed s for initialisation and batches.",
                     flag_values=FLAGS)
flags.DEFINE_integer("epochs", _DEFAULTS.epochs, "Epochs of N / k steps.", flag_values=FLAGS)
flags.DEFINE_float("label_weight", _DEFAULTS.label_weight,
                   "w: weight of the one-hot label in the sampling space (the image part has 1 - w).",
                   flag_values=FLAGS)
flags.DEFINE_string(
    "radius", "default",
    "Disk radius of Vanilla PDS: 'default' (half the median distance, the paper's; with w = 0.7 the "
    "label part dominates it and about one disk fits per class), 'auto', or a number.",
    flag_values=FLAGS)
flags.DEFINE_float("learning_rate", _DEFAULTS.learning_rate, "SGD learning rate.", flag_values=FLAGS)
flags.DEFINE_list("report_epochs", [str(epoch) for epoch in _DEFAULTS.report_epochs],
                  "Epochs shown in results.md.", flag_values=FLAGS)


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Unit-norm digit pixels [N, 64] and labels, the fixed stratified 30% test split."""
  digits = sk_datasets.load_digits()
  pixels = digits.data.astype(np.float32)
  pixels /= np.linalg.norm(pixels, axis=1, keepdims=True)
  x_train, x_test, y_train, y_test = model_selection.train_test_split(
      pixels, digits.target.astype(np.int64), test_size=0.3, random_state=0, stratify=digits.target)
  return x_train, y_train, x_test, y_test


def sampling_features(label_weight: float):
  """The feature_fn of the sampling space: (1 - w) * image features ++ w * one-hot label."""

  def features(image: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
    return tf.concat([(1.0 - label_weight) * image, label_weight * tf.one_hot(label, NUM_CLASSES)], axis=-1)

  return features


def test_accuracy_per_epoch(data: tuple[np.ndarray, ...], sampler_name: str, batch_size: int, seed: int,
                            config: Config) -> list[float]:
  """Trains the softmax classifier with batches of `sampler_name`; test accuracy after each epoch."""
  x_train, y_train, x_test, y_test = data
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((x_train.shape[1],)), keras.layers.Dense(NUM_CLASSES)])
  model.compile(optimizer=keras.optimizers.SGD(config.learning_rate),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
  batcher = tf_repulsive.repulsive_batch(batch_size, common.make_sampler(sampler_name, radius=config.radius), seed=seed,
                                         feature_fn=sampling_features(config.label_weight), verbose=False)
  batches = tf.data.Dataset.from_tensor_slices((x_train, y_train)).apply(batcher)
  history = model.fit(batches, epochs=config.epochs, steps_per_epoch=len(y_train) // batch_size,
                      validation_data=(x_test, y_test), callbacks=common.sampler_callbacks(batcher), verbose=0)
  return [float(accuracy) for accuracy in history.history["val_accuracy"]]


def _mean_std(values: np.ndarray) -> str:
  return f"{values.mean():.4f} ± {values.std(ddof=1) if len(values) > 1 else 0.0:.4f}"


def summary(rows: list[dict[str, float]], config: Config) -> str:
  """Markdown: test accuracy at the report epochs and over all epochs, paired differences to uniform."""
  def curves(sampler: str, batch_size: int) -> np.ndarray:  # [seeds, epochs]
    chosen = [row for row in rows if row["sampler"] == sampler and row["batch_size"] == batch_size]
    result = np.zeros((config.seeds, config.epochs))
    for row in chosen:
      result[int(row["seed"]), int(row["epoch"]) - 1] = row["test_accuracy"]
    return result

  epochs = [epoch - 1 for epoch in config.report_epochs]
  header = (["k", "sampler"] + [f"epoch {epoch}" for epoch in config.report_epochs]
            + ["mean over epochs", "paired Δ mean over epochs vs uniform (seeds > 0)"])
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for batch_size in config.batch_sizes:
    reference = curves("uniform", batch_size).mean(axis=1) if "uniform" in config.samplers else None
    for sampler in config.samplers:
      values = curves(sampler, batch_size)
      cells = [str(batch_size), sampler] + [_mean_std(values[:, epoch]) for epoch in epochs]
      over_epochs = values.mean(axis=1)
      cells.append(_mean_std(over_epochs))
      if reference is None or sampler == "uniform":
        cells.append("—")
      else:
        delta = over_epochs - reference
        spread = delta.std(ddof=1) if config.seeds > 1 else 0.0
        cells.append(f"{delta.mean():+.4f} ± {spread:.4f} ({int(np.sum(delta > 0))}/{config.seeds})")
      lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def train_and_evaluate(config: Config) -> list[dict[str, float]]:
  """Every sampler, batch size and seed; writes results.csv and results.md; returns the rows."""
  output_dir = pathlib.Path(config.output_dir)
  output_dir.mkdir(parents=True, exist_ok=True)
  data = load_data()
  rows = []
  for batch_size in config.batch_sizes:
    for sampler in config.samplers:
      for seed in range(config.seeds):
        accuracies = test_accuracy_per_epoch(data, sampler, batch_size, seed, config)
        rows += [{"sampler": sampler, "batch_size": batch_size, "seed": seed, "epoch": epoch + 1,
                  "test_accuracy": accuracy} for epoch, accuracy in enumerate(accuracies)]
      print(f"k = {batch_size}, {sampler}: done", flush=True)
  with open(output_dir / "results.csv", "w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  (output_dir / "results.md").write_text(summary(rows, config))
  return rows


def config_from_flags() -> Config:
  values = {field.name: FLAGS[field.name].value for field in dataclasses.fields(Config)}
  values["samplers"] = tuple(values["samplers"])
  values["batch_sizes"] = tuple(int(size) for size in values["batch_sizes"])
  values["report_epochs"] = tuple(int(epoch) for epoch in values["report_epochs"])
  values["radius"] = common.parse_radius(values["radius"])
  return Config(**values)


def main(argv: Sequence[str]) -> None:
  del argv
  config = config_from_flags()
  train_and_evaluate(config)
  print((pathlib.Path(config.output_dir) / "results.md").read_text())


if __name__ == "__main__":
  common.run(main, FLAGS)
