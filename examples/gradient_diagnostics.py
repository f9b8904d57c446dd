r"""Theorem-1 diagnostics of the Deep-MNIST CNN: does each sampler reduce the gradient variance?

For every `--samplers` entry, at initialisation and again after `--train_steps` steps of Adam on
uniform batches: tr Cov of the mini-batch mean gradient over `--num_batches` draws, split into the
intensity part (independent sampling with the same inclusion probabilities) and the pair part (the
repulsion's contribution, negative when it helps), the bias of the expected step, and the ratio to
plain SGD's variance in closed form. Then the pair-correlation function g(r) of each sampler's
batches in pixel space, in units of the disk radius.

The CNN has ~3.3M parameters, so per-example gradients are count-sketched to `--sketch_dim`
dimensions by default (unbiased for every figure, ~2% noise at 4096; `--sketch_dim=0` for exact)
or restricted to the last layer (`--variables=last_layer`, exact and cheap, but only part of the
gradient). Data: scikit-learn's digits upsampled to 28x28, the `--train_fraction` of the training
split `mnist_deep.py` trains on.

  python examples/gradient_diagnostics.py --flagfile=configs/gradient_diagnostics.flags

Writes into `--output_dir`: `variance.txt` (what it prints), `variance_split.png` (bars of the
split relative to plain SGD) and `pair_correlation.png` (g(r) per sampler).
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
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import common  # noqa: E402
import mnist_deep  # noqa: E402
from tf_repulsive import diagnostics  # noqa: E402

FLAGS = flags.FlagValues()
_TRAIN_FRACTION = flags.DEFINE_float("train_fraction", 0.5, "Fraction of the digits training split used.",
                                     flag_values=FLAGS)
_SAMPLERS = flags.DEFINE_list("samplers", list(common.SAMPLER_NAMES), "Samplers to diagnose.", flag_values=FLAGS)
_NEIGHBORS = flags.DEFINE_integer("neighbors", 5, "K of the mingling index.", flag_values=FLAGS)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 50, "Mini-batch size k.", flag_values=FLAGS)
_NUM_BATCHES = flags.DEFINE_integer("num_batches", 400, "Draws per sampler and checkpoint (>= 3).", flag_values=FLAGS)
_TRAIN_STEPS = flags.DEFINE_integer("train_steps", 300,
                                     "Adam steps on uniform batches before the second look (0: none).",
                                     flag_values=FLAGS)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-4, "Adam learning rate.", flag_values=FLAGS)
_VARIABLES = flags.DEFINE_enum("variables", "all", ["all", "last_layer"],
                               "Parameters whose gradients are analysed.", flag_values=FLAGS)
_SKETCH_DIM = flags.DEFINE_integer("sketch_dim", 4096,
                                    "Count-sketch dimension of the gradients; 0 for exact.", flag_values=FLAGS)
_R_MAX = flags.DEFINE_float("r_max", 4.0, "g(r) is shown for r up to this many disk radii.", flag_values=FLAGS)
_R_BINS = flags.DEFINE_integer("r_bins", 40, "Bins of g(r).", flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the initialisation, training, draws and sketch.", flag_values=FLAGS)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/gradient_diagnostics",
                                   "Where the table and plots go.", flag_values=FLAGS)


@dataclasses.dataclass(frozen=True)
class Config:
  """One diagnostics run; the flags map onto it one to one."""

  train_fraction: float = 0.5
  samplers: tuple[str, ...] = common.SAMPLER_NAMES
  neighbors: int = 5
  batch_size: int = 50
  num_batches: int = 400
  train_steps: int = 300
  learning_rate: float = 1e-4
  variables: str = "all"
  sketch_dim: int = 4096
  r_max: float = 4.0
  r_bins: int = 40
  seed: int = 0
  output_dir: str = "runs/gradient_diagnostics"

  def __post_init__(self):
    if not 0.0 < self.train_fraction <= 1.0:
      raise ValueError(f"--train_fraction must be in (0, 1]; got {self.train_fraction}.")
    unknown = sorted(set(self.samplers) - set(common.ALL_SAMPLER_NAMES))
    if not self.samplers or unknown:
      raise ValueError(
          f"--samplers must name some of {', '.join(common.ALL_SAMPLER_NAMES)}; got {list(self.samplers)}.")
    for name, least in (("batch_size", 2), ("num_batches", 3), ("train_steps", 0), ("sketch_dim", 0),
                        ("r_bins", 1)):
      if getattr(self, name) < least:
        raise ValueError(f"--{name} must be >= {least}; got {getattr(self, name)}.")
    if self.r_max <= 0:
      raise ValueError(f"--r_max must be > 0; got {self.r_max}.")


@dataclasses.dataclass(frozen=True)
class Outcome:
  """What `run` measured.

  Attributes:
    variance: checkpoint label ("initialisation", "after N steps") -> the variance reports.
    pair_correlation: sampler name -> reference ("uniform", "marginal") -> g(r) of the draws of the
      last checkpoint.
  """

  variance: dict[str, diagnostics.GradientVarianceResult]
  pair_correlation: dict[str, dict[str, diagnostics.PairCorrelation]]


def run(config: Config, log: Callable[[str], None] = print) -> Outcome:
  """Both diagnostics at initialisation and after training; writes the table and the plots.

  Args:
    config: the run.
    log: receives each printed block of text.

  Returns:
    The variance reports per checkpoint and g(r) per sampler.
  """
  output_dir = pathlib.Path(config.output_dir)
  output_dir.mkdir(parents=True, exist_ok=True)
  x, y, _, _ = mnist_deep.load_digits_28x28(config.train_fraction)
  keras.utils.set_random_seed(config.seed)
  model = mnist_deep.deep_mnist_model()
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  model.compile(optimizer=keras.optimizers.Adam(config.learning_rate), loss=loss, metrics=["accuracy"])
  samplers = {name: common.make_sampler(name, neighbors=config.neighbors) for name in config.samplers}
  blocks = []

  def emit(text: str) -> None:
    blocks.append(text)
    log(text)

  emit(f"Deep-MNIST CNN ({model.count_params():,} parameters) on {len(x)} digits (28x28), "
       f"k = {config.batch_size}, {config.num_batches} draws per sampler and checkpoint.\n"
       + ("Gradients are count-sketched (all parameters, unbiased, about "
          f"{100 * np.sqrt(2 / config.sketch_dim):.1f}% noise on each figure, the same sketch for "
          "every sampler) because exact per-example gradients of all parameters would take "
          f"N x P = {len(x) * model.count_params() * 4 / 2**30:.1f} GiB."
          if config.sketch_dim else "Gradients are exact.")
       + (" Only the last layer's parameters are analysed." if config.variables == "last_layer" else ""))

  checkpoints = [("initialisation", 0)]
  if config.train_steps:
    checkpoints.append((f"after {config.train_steps} steps", config.train_steps))
  variance = {}
  for label, step in checkpoints:
    if step:
      train = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=config.seed)
               .batch(config.batch_size, drop_remainder=True).repeat())
      model.fit(train, steps_per_epoch=config.train_steps, epochs=1, verbose=0)
    metrics = model.evaluate(x, y, batch_size=256, verbose=0, return_dict=True)
    # start_step = the training step: where Anneal PDS's schedule is at this checkpoint.
    result = diagnostics.gradient_variance(
        model, loss, x, y, samplers, config.batch_size, num_batches=config.num_batches,
        seed=config.seed, start_step=step, variables=config.variables,
        sketch_dim=config.sketch_dim or None)
    variance[label] = result
    emit(f"\n== {label}: training loss {metrics['loss']:.4f}, accuracy {metrics['accuracy']:.4f} "
         f"(dropout off)\n{result.table()}")

  last = variance[checkpoints[-1][0]]
  radius = next((report.radius for report in last.reports.values() if report.radius), None)
  bins = config.r_bins if radius is None else radius * np.linspace(0.0, config.r_max, config.r_bins + 1)
  features = x.reshape(len(x), -1)
  correlation = {
      name: {reference: diagnostics.pair_correlation(features, draws, bins, reference=reference,
                                                     seed=config.seed)
             for reference in ("uniform", "marginal")}
      for name, draws in last.batches.items()}
  if radius is not None:
    emit(_close_pairs_summary(correlation, radius, checkpoints[-1][0]))
  (output_dir / "variance.txt").write_text("\n".join(blocks) + "\n")
  _plot_pair_correlation(correlation, radius, output_dir / "pair_correlation.png")
  _plot_variance_split(variance, output_dir / "variance_split.png")
  return Outcome(variance=variance, pair_correlation=correlation)


def _close_pairs_summary(correlation: dict[str, dict[str, diagnostics.PairCorrelation]], radius: float,
                         label: str) -> str:
  """Within-batch pairs closer than the radius, against uniformly random pairs: g averaged over r < r0."""
  lines = [f"\nPairs closer than the disk radius r0 = {radius:.3g} (pixel space, draws {label}):",
           f"{'sampler':<12} {'batch pairs':>11} {'random pairs':>12} {'g(r<r0)':>8} "
           f"{'g(r<r0) marginal':>16}"]
  for name, by_reference in correlation.items():
    against_random, against_marginal = by_reference["uniform"], by_reference["marginal"]
    # The edges are multiples of r0, so the bins ending at or below r0 cover exactly r < r0.
    below = against_random.bin_edges[1:] <= radius * (1 + 1e-9)
    batch_fraction = against_random.counts[below].sum() / against_random.num_pairs
    reference = against_random.reference_fraction[below].sum()
    marginal_reference = against_marginal.reference_fraction[below].sum()
    lines.append(f"{name:<12} {batch_fraction:11.4f} {reference:12.4f} "
                 f"{batch_fraction / reference if reference else float('nan'):8.3f} "
                 f"{batch_fraction / marginal_reference if marginal_reference else float('nan'):16.3f}")
  return "\n".join(lines)


def _plot_pair_correlation(correlation: dict[str, dict[str, diagnostics.PairCorrelation]],
                           radius: float | None, path: pathlib.Path) -> None:
  import matplotlib  # plotting is only needed here
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
  scale = radius or 1.0
  for axis, reference in zip(axes, ("uniform", "marginal")):
    for name, by_reference in correlation.items():
      result = by_reference[reference]
      # Bins where fewer than 20 pairs are expected only show noise.
      g = np.where(result.reference_fraction * result.num_pairs >= 20, result.g, np.nan)
      axis.plot(result.bin_centres / scale, g, marker=".", label=name)
    axis.axhline(1.0, color="gray", lw=0.8)
    if radius is not None:
      axis.axvline(1.0, color="black", ls="--", lw=0.8)
    axis.set(xlabel="pair distance / disk radius" if radius else "pair distance",
             title=f"g(r), reference: {reference} pairs")
    axis.grid(alpha=0.3)
  axes[0].set_ylabel("g(r)")
  axes[0].legend()
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def _plot_variance_split(variance: dict[str, diagnostics.GradientVarianceResult],
                         path: pathlib.Path) -> None:
  import matplotlib  # plotting is only needed here
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  figure, axes = plt.subplots(1, len(variance), figsize=(6 * len(variance), 4), squeeze=False)
  for axis, (label, result) in zip(axes[0], variance.items()):
    reports = [result.uniform_exact, *result.reports.values()]
    scale = result.uniform_exact.total
    positions = np.arange(len(reports))
    for offset, field in ((-0.27, "total"), (0.0, "intensity"), (0.27, "pair")):
      axis.bar(positions + offset, [getattr(r, field) / scale for r in reports], width=0.27,
               yerr=[getattr(r, field + "_se") / scale for r in reports], label=field, capsize=2)
    axis.axhline(1.0, color="gray", lw=0.8)
    axis.axhline(0.0, color="black", lw=0.8)
    axis.set_xticks(positions, [r.name for r in reports], rotation=30, ha="right")
    axis.set(ylabel="/ plain SGD total (closed form)", title=label)
    axis.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def config_from_flags() -> Config:
  return Config(
      train_fraction=_TRAIN_FRACTION.value, samplers=tuple(_SAMPLERS.value), neighbors=_NEIGHBORS.value,
      batch_size=_BATCH_SIZE.value, num_batches=_NUM_BATCHES.value, train_steps=_TRAIN_STEPS.value,
      learning_rate=_LEARNING_RATE.value, variables=_VARIABLES.value, sketch_dim=_SKETCH_DIM.value,
      r_max=_R_MAX.value, r_bins=_R_BINS.value, seed=_SEED.value, output_dir=_OUTPUT_DIR.value)


def main(argv):
  del argv
  config = config_from_flags()
  run(config)
  print(f"\nwrote {config.output_dir}/variance.txt, variance_split.png, pair_correlation.png")


if __name__ == "__main__":
  common.run(main, FLAGS)
