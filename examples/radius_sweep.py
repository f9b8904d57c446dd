r"""Which disk radius? `tf_repulsive.diagnostics.radius_sweep` on the Deep-MNIST CNN and the digits.

Calibrates `radius="auto"` (the largest radius at which the darts fill every batch) for
`--sampler`, then for each multiple `--scales` of it and for the default radius (half the median
distance) draws `--num_batches` batches and reports: the variance of the mini-batch mean gradient
against plain SGD with its Theorem-1 intensity / pair split and the bias, the batches' class mix
against the data's, and the fill rate. Measured at initialisation and, with `--train_steps`, again
after that many Adam steps on uniform batches: minutes instead of a training run per radius.

  python examples/radius_sweep.py --flagfile=configs/radius_sweep.flags

Writes into `--output_dir`: `sweep.txt` (what it prints) and `radius_sweep.png`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The sibling example modules (`common`, `mnist_deep`) when run as a script from anywhere.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from absl import flags  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import common  # noqa: E402
import mnist_deep  # noqa: E402
from tf_repulsive import diagnostics  # noqa: E402

_DISK_SAMPLERS = ("vanilla_pds", "easy_pds", "dense_pds", "anneal_pds")

FLAGS = flags.FlagValues()
_TRAIN_FRACTION = flags.DEFINE_float("train_fraction", 0.5, "Fraction of the digits training split used.",
                                     flag_values=FLAGS)
_SAMPLER = flags.DEFINE_enum("sampler", "vanilla_pds", list(_DISK_SAMPLERS), "Disk sampler whose radius is swept.",
                             flag_values=FLAGS)
_SCALES = flags.DEFINE_list("scales", ["0.25", "0.5", "0.75", "1", "1.25"],
                            "Multiples of the calibrated radius to measure.", flag_values=FLAGS)
_NEIGHBORS = flags.DEFINE_integer("neighbors", 5, "K of the mingling index.", flag_values=FLAGS)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 50, "Mini-batch size k.", flag_values=FLAGS)
_NUM_BATCHES = flags.DEFINE_integer("num_batches", 200, "Draws per radius and checkpoint (>= 3).", flag_values=FLAGS)
_TRAIN_STEPS = flags.DEFINE_integer("train_steps", 300,
                                     "Adam steps on uniform batches before the second look (0: none).",
                                     flag_values=FLAGS)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-4, "Adam learning rate.", flag_values=FLAGS)
_VARIABLES = flags.DEFINE_enum("variables", "all", ["all", "last_layer"],
                               "Parameters whose gradients are analysed.", flag_values=FLAGS)
_SKETCH_DIM = flags.DEFINE_integer("sketch_dim", 4096,
                                    "Count-sketch dimension of the gradients; 0 for exact.", flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the initialisation, training, draws and sketch.", flag_values=FLAGS)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/radius_sweep", "Where the table and plot go.", flag_values=FLAGS)


@dataclasses.dataclass(frozen=True)
class Config:
  """One sweep; the flags map onto it one to one."""

  train_fraction: float = 0.5
  sampler: str = "vanilla_pds"
  scales: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.25)
  neighbors: int = 5
  batch_size: int = 50
  num_batches: int = 200
  train_steps: int = 300
  learning_rate: float = 1e-4
  variables: str = "all"
  sketch_dim: int = 4096
  seed: int = 0
  output_dir: str = "runs/radius_sweep"

  def __post_init__(self):
    if not 0.0 < self.train_fraction <= 1.0:
      raise ValueError(f"--train_fraction must be in (0, 1]; got {self.train_fraction}.")
    if self.sampler not in _DISK_SAMPLERS:
      raise ValueError(f"--sampler must be one of {', '.join(_DISK_SAMPLERS)}; got {self.sampler!r}.")
    if not self.scales or any(scale <= 0 for scale in self.scales):
      raise ValueError(f"--scales must be positive; got {list(self.scales)}.")
    for name, least in (("batch_size", 2), ("num_batches", 3), ("train_steps", 0), ("sketch_dim", 0)):
      if getattr(self, name) < least:
        raise ValueError(f"--{name} must be >= {least}; got {getattr(self, name)}.")


def run(config: Config, log: Callable[[str], None] = print) -> dict[str, diagnostics.RadiusSweepResult]:
  """The sweep at initialisation and after training; writes the table and the plot.

  Args:
    config: the sweep.
    log: receives each printed block of text.

  Returns:
    Checkpoint label ("initialisation", "after N steps") -> the sweep there.
  """
  output_dir = pathlib.Path(config.output_dir)
  output_dir.mkdir(parents=True, exist_ok=True)
  x, y, _, _ = mnist_deep.load_digits_28x28(config.train_fraction)
  keras.utils.set_random_seed(config.seed)
  model = mnist_deep.deep_mnist_model()
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  model.compile(optimizer=keras.optimizers.Adam(config.learning_rate), loss=loss, metrics=["accuracy"])
  blocks = [f"{config.sampler} on {len(x)} digits (28x28), k = {config.batch_size}, {config.num_batches} draws "
            f"per radius; Deep-MNIST CNN gradients ({config.variables}, "
            + (f"count sketch to {config.sketch_dim} dims)." if config.sketch_dim else "exact).")]
  log(blocks[0])
  checkpoints = [("initialisation", 0)]
  if config.train_steps:
    checkpoints.append((f"after {config.train_steps} steps", config.train_steps))
  sweeps = {}
  for label, step in checkpoints:
    if step:
      train = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=config.seed)
               .batch(config.batch_size, drop_remainder=True).repeat())
      model.fit(train, steps_per_epoch=config.train_steps, epochs=1, verbose=0)
    sweeps[label] = diagnostics.radius_sweep(
        model, loss, x, y, config.batch_size,
        sampler=lambda radius: common.make_sampler(config.sampler, neighbors=config.neighbors, radius=radius),
        scales=config.scales, num_batches=config.num_batches, seed=config.seed, start_step=step,
        variables=config.variables, sketch_dim=config.sketch_dim or None)
    blocks.append(f"\n== {label}\n{sweeps[label].table()}")
    log(blocks[-1])
  (output_dir / "sweep.txt").write_text("\n".join(blocks) + "\n")
  _plot(sweeps, output_dir / "radius_sweep.png")
  return sweeps


def _plot(sweeps: dict[str, diagnostics.RadiusSweepResult], path: pathlib.Path) -> None:
  import matplotlib  # plotting is only needed here
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  figure, axes = plt.subplots(1, 4, figsize=(18, 4))
  for label, sweep in sweeps.items():
    radii = [report.radius for report in sweep.reports]
    reference = sweep.uniform_exact.total
    columns = (
        ("tr Cov / plain SGD", [report.variance.total / reference for report in sweep.reports]),
        ("pair term / plain SGD total", [report.variance.pair / reference for report in sweep.reports]),
        ("class-mix distance (TV)", [report.class_mix_distance for report in sweep.reports]),
        ("fill rate", [report.fill_rate for report in sweep.reports]))
    for axis, (title, values) in zip(axes, columns):
      axis.plot(radii, values, marker="o", label=label)
      axis.set(xlabel="disk radius", title=title)
  for report in next(iter(sweeps.values())).reports:
    if report.label in ("auto", "default"):
      for axis in axes:
        axis.axvline(report.radius, color="gray", ls="--" if report.label == "auto" else ":", lw=0.8)
  for axis in axes:
    axis.grid(alpha=0.3)
  axes[0].axhline(1.0, color="black", lw=0.8)
  axes[0].legend()
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def config_from_flags() -> Config:
  return Config(
      train_fraction=_TRAIN_FRACTION.value, sampler=_SAMPLER.value,
      scales=tuple(float(scale) for scale in _SCALES.value), neighbors=_NEIGHBORS.value,
      batch_size=_BATCH_SIZE.value, num_batches=_NUM_BATCHES.value, train_steps=_TRAIN_STEPS.value,
      learning_rate=_LEARNING_RATE.value, variables=_VARIABLES.value, sketch_dim=_SKETCH_DIM.value,
      seed=_SEED.value, output_dir=_OUTPUT_DIR.value)


def main(argv):
  del argv
  config = config_from_flags()
  run(config)
  print(f"\nwrote {config.output_dir}/sweep.txt and radius_sweep.png (dashed: auto, dotted: default)")


if __name__ == "__main__":
  common.run(main, FLAGS)
