r"""Theorem-1 diagnostics of the Deep-MNIST CNN: does each sampler reduce the gradient variance?

For every sampler of `samplers`, at each of `checkpoint_steps` (steps of Adam on uniform batches;
0 is the initialisation): tr Cov of the mini-batch mean gradient over `num_batches` draws, split into the
intensity part (independent sampling with the same inclusion probabilities) and the pair part (the
repulsion's contribution, negative when it helps), the bias of the expected step, and the ratio to
plain SGD's variance in closed form. Then the pair-correlation function g(r) of each sampler's
batches in pixel space, in units of the disk radius.

The CNN has ~3.3M parameters, so per-example gradients are count-sketched to `sketch_dim`
dimensions by default (unbiased for every figure, ~2% noise at 4096; `sketch_dim=0` for exact)
or restricted to the last layer (`variables="last_layer"`, exact and cheap, but only part of the
gradient). Data: scikit-learn's digits upsampled to 28x28, the `train_fraction` of the training
split that examples.mnist_deep trains on.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable

import numpy as np

from examples import common
from examples import settings
from examples.mnist_deep import measurement
from tf_repulsive import diagnostics


@dataclasses.dataclass(frozen=True)
class Config(measurement.MeasurementConfig):
  """One diagnostics run."""

  samplers: tuple[str, ...] = settings.setting(common.SAMPLER_NAMES, "Samplers to diagnose.",
                                               choices=common.ALL_SAMPLER_NAMES)
  num_batches: int = settings.setting(400, "Draws per sampler and checkpoint.", minimum=3)
  r_max: float = settings.setting(4.0, "g(r) is shown for r up to this many disk radii.", greater_than=0.0)
  r_bins: int = settings.setting(40, "Bins of g(r).", minimum=1)


@dataclasses.dataclass(frozen=True)
class Outcome:
  """What `diagnose` measured.

  Attributes:
    variance: checkpoint label ("initialisation", "after N steps") -> the variance reports.
    pair_correlation: sampler name -> reference ("uniform", "marginal") -> g(r) of the draws of the
      last checkpoint.
  """

  variance: dict[str, diagnostics.GradientVarianceResult]
  pair_correlation: dict[str, dict[str, diagnostics.PairCorrelation]]


def diagnose(config: Config, workdir: str | pathlib.Path, log: Callable[[str], None] = print) -> Outcome:
  """Both diagnostics at initialisation and after training; writes the table and the plots.

  Args:
    config: the run.
    workdir: where `variance.txt` (what is logged), `variance_split.png` (bars of the split
      relative to plain SGD) and `pair_correlation.png` (g(r) per sampler) go.
    log: receives each printed block of text.

  Returns:
    The variance reports per checkpoint and g(r) per sampler.
  """
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  measured = measurement.subject(config)
  x, y, model = measured.x, measured.y, measured.model
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

  variance = {}
  for label, step in measurement.checkpoints(config, measured):
    metrics = model.evaluate(x, y, batch_size=256, verbose=0, return_dict=True)
    # start_step = the training step: where Anneal PDS's schedule is at this checkpoint.
    result = diagnostics.gradient_variance(
        model, measured.loss, x, y, samplers, config.batch_size, num_batches=config.num_batches,
        seed=config.seed, start_step=step, variables=config.variables,
        sketch_dim=config.sketch_dim or None)
    variance[label] = result
    emit(f"\n== {label}: training loss {metrics['loss']:.4f}, accuracy {metrics['accuracy']:.4f} "
         f"(dropout off)\n{result.table()}")

  last = variance[label]  # the last checkpoint's
  radius = next((report.radius for report in last.reports.values() if report.radius), None)
  bins = config.r_bins if radius is None else radius * np.linspace(0.0, config.r_max, config.r_bins + 1)
  features = x.reshape(len(x), -1)
  correlation = {
      name: {reference: diagnostics.pair_correlation(features, draws, bins, reference=reference,
                                                     seed=config.seed)
             for reference in ("uniform", "marginal")}
      for name, draws in last.batches.items()}
  if radius is not None:
    emit(_close_pairs_summary(correlation, radius, label))
  (workdir / "variance.txt").write_text("\n".join(blocks) + "\n")
  _plot_pair_correlation(correlation, radius, workdir / "pair_correlation.png")
  _plot_variance_split(variance, workdir / "variance_split.png")
  log(f"\nwrote {workdir}/variance.txt, variance_split.png, pair_correlation.png")
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
  plt = common.pyplot()

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
  plt = common.pyplot()

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
