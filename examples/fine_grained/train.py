r"""The paper's fine-grained classification experiment (Oxford Flowers), on an offline stand-in.

The paper (after Zhang et al. 2017) trains a softmax classifier by SGD on fixed off-the-shelf image
features and samples mini-batches in the space of those features concatenated with the one-hot
label, weighted w for the label part and 1 - w for the image part (w = 0.7); it reports test
accuracy after each epoch: Vanilla PDS matches k-DPP and both beat uniform sampling. Oxford Flowers
cannot be fetched here, so the stand-in is scikit-learn's bundled digits: a softmax classifier on
fixed unit-norm pixel features, the same sampling space (unit-norm pixels weighted 1 - w, one-hot
label weighted w), epochs of N / k steps, test accuracy after each epoch.
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib

import keras
import numpy as np
from sklearn import datasets as sk_datasets
from sklearn import model_selection
import tensorflow as tf

from examples import common
from examples import settings
import tf_repulsive

NUM_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class Config(settings.Settings):
  """One run of the experiment."""

  samplers: tuple[str, ...] = settings.setting(("uniform", "epoch_shuffle", "vanilla_pds", "kdpp", "fast_kdpp"),
                                               "Samplers to compare.", choices=common.ALL_SAMPLER_NAMES)
  batch_sizes: tuple[int, ...] = settings.setting((80, 150), "Mini-batch sizes k.", minimum=1)
  seeds: int = settings.setting(
      10, "Runs per sampler and batch size; run s uses seed s for initialisation and batches.", minimum=1)
  epochs: int = settings.setting(10, "Epochs of N / k steps.", minimum=1)
  label_weight: float = settings.setting(
      0.7, "w: weight of the one-hot label in the sampling space (the image part has 1 - w).",
      minimum=0.0, maximum=1.0)
  radius: float | str | None = common.radius_setting(
      "default",
      "Disk radius of Vanilla PDS: 'default' (half the median distance, the paper's; with w = 0.7 the "
      "label part dominates it and about one disk fits per class), 'auto', or a number.")
  learning_rate: float = settings.setting(0.5, "SGD learning rate.", greater_than=0.0)
  report_epochs: tuple[int, ...] = settings.setting((1, 2, 3, 5, 10), "Epochs shown in results.md.", minimum=1)

  def __post_init__(self):
    super().__post_init__()
    if max(self.report_epochs) > self.epochs:
      raise ValueError(f"--report_epochs must lie in [1, --epochs]; got {list(self.report_epochs)}.")


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Unit-norm digit pixels [N, 64] and labels, the fixed stratified 30% test split."""
  digits = sk_datasets.load_digits()
  pixels = digits.data.astype(np.float32)
  pixels /= np.linalg.norm(pixels, axis=1, keepdims=True)
  x_train, x_test, y_train, y_test = model_selection.train_test_split(
      pixels, digits.target.astype(np.int64), test_size=0.3, random_state=0, stratify=digits.target)
  return x_train, y_train, x_test, y_test


def sampling_features(label_weight: float):
  """The `features` function of the sampling space: (1 - w) * image features ++ w * one-hot label."""

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
                                         features=sampling_features(config.label_weight),
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  batches = tf.data.Dataset.from_tensor_slices((x_train, y_train)).apply(batcher)
  history = model.fit(batches, epochs=config.epochs, steps_per_epoch=len(y_train) // batch_size,
                      validation_data=(x_test, y_test), callbacks=common.sampler_callbacks(batcher), shuffle=False,
                      verbose=0)
  return [float(accuracy) for accuracy in history.history["val_accuracy"]]


def summary(rows: list[dict[str, float]], config: Config) -> str:
  """Markdown: test accuracy at the report epochs and over all epochs, paired differences to uniform."""
  def curves(sampler: str, batch_size: int) -> np.ndarray:  # [seeds, epochs]
    chosen = [row for row in rows if row["sampler"] == sampler and row["batch_size"] == batch_size]
    result = np.zeros((config.seeds, config.epochs))
    for row in chosen:
      result[int(row["seed"]), int(row["epoch"]) - 1] = row["test_accuracy"]
    return result

  header = (["k", "sampler"] + [f"epoch {epoch}" for epoch in config.report_epochs]
            + ["mean over epochs", "paired Δ mean over epochs vs uniform (seeds > 0)"])
  table_rows = []
  for batch_size in config.batch_sizes:
    reference = curves("uniform", batch_size).mean(axis=1) if "uniform" in config.samplers else None
    for sampler in config.samplers:
      values = curves(sampler, batch_size)
      over_epochs = values.mean(axis=1)
      cells = ([str(batch_size), sampler]
               + [common.mean_std_text(values[:, epoch - 1]) for epoch in config.report_epochs]
               + [common.mean_std_text(over_epochs)])
      if reference is None or sampler == "uniform":
        cells.append("—")
      else:
        delta = over_epochs - reference
        mean, std = common.mean_std(delta)
        cells.append(f"{mean:+.4f} ± {std:.4f} ({int(np.sum(delta > 0))}/{config.seeds})")
      table_rows.append(cells)
  return common.markdown_table(header, table_rows) + "\n"


def train_and_evaluate(config: Config, workdir: str | pathlib.Path) -> list[dict[str, float]]:
  """Every sampler, batch size and seed; returns the rows of test accuracy per epoch.

  Writes into `workdir`: `results.csv` (test accuracy per sampler, batch size, seed and epoch)
  and `results.md` (mean ± std over seeds at the report epochs, and the paired difference to
  uniform).
  """
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  data = load_data()
  rows = []
  for batch_size in config.batch_sizes:
    for sampler in config.samplers:
      for seed in range(config.seeds):
        accuracies = test_accuracy_per_epoch(data, sampler, batch_size, seed, config)
        rows += [{"sampler": sampler, "batch_size": batch_size, "seed": seed, "epoch": epoch + 1,
                  "test_accuracy": accuracy} for epoch, accuracy in enumerate(accuracies)]
      print(f"k = {batch_size}, {sampler}: done", flush=True)
  with open(workdir / "results.csv", "w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  (workdir / "results.md").write_text(summary(rows, config))
  return rows
