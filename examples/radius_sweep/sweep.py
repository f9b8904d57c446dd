r"""Which disk radius? `tf_repulsive.diagnostics.radius_sweep` on the Deep-MNIST CNN and the digits.

Calibrates `radius="auto"` (the largest radius at which the darts fill every batch) for `sampler`,
then for each multiple `scales` of it and for the default radius (half the median distance) draws
`num_batches` batches and reports: the variance of the mini-batch mean gradient against plain SGD
with its Theorem-1 intensity / pair split and the bias, the batches' class mix against the data's,
and the fill rate. Measured at each of `checkpoint_steps` (0: initialisation; else after that many
Adam steps on uniform batches): minutes instead of a training run per radius.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable

from examples import common
from examples import settings
from examples.mnist_deep import measurement
from tf_repulsive import diagnostics

_DISK_SAMPLERS = ("vanilla_pds", "easy_pds", "dense_pds", "anneal_pds")


@dataclasses.dataclass(frozen=True)
class Config(measurement.MeasurementConfig):
  """One sweep."""

  sampler: str = settings.setting("vanilla_pds", "Disk sampler whose radius is swept.", choices=_DISK_SAMPLERS)
  scales: tuple[float, ...] = settings.setting((0.25, 0.5, 0.75, 1.0, 1.25),
                                               "Multiples of the calibrated radius to measure.", greater_than=0.0)
  num_batches: int = settings.setting(200, "Draws per radius and checkpoint.", minimum=3)


def sweep(config: Config, workdir: str | pathlib.Path,
          log: Callable[[str], None] = print) -> dict[str, diagnostics.RadiusSweepResult]:
  """The sweep at initialisation and after training; writes the table and the plot.

  Args:
    config: the sweep.
    workdir: where `sweep.txt` (what is logged) and `radius_sweep.png` go.
    log: receives each printed block of text.

  Returns:
    Checkpoint label ("initialisation", "after N steps") -> the sweep there.
  """
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  measured = measurement.subject(config)
  blocks = [f"{config.sampler} on {len(measured.x)} digits (28x28), k = {config.batch_size}, "
            f"{config.num_batches} draws per radius; Deep-MNIST CNN gradients ({config.variables}, "
            + (f"count sketch to {config.sketch_dim} dims)." if config.sketch_dim else "exact).")]
  log(blocks[0])
  sweeps = {}
  for label, step in measurement.checkpoints(config, measured):
    sweeps[label] = diagnostics.radius_sweep(
        measured.model, measured.loss, measured.x, measured.y, config.batch_size,
        sampler=lambda radius: common.make_sampler(config.sampler, neighbors=config.neighbors, radius=radius),
        scales=config.scales, num_batches=config.num_batches, seed=config.seed, start_step=step,
        variables=config.variables, sketch_dim=config.sketch_dim or None)
    blocks.append(f"\n== {label}\n{sweeps[label].table()}")
    log(blocks[-1])
  (workdir / "sweep.txt").write_text("\n".join(blocks) + "\n")
  _plot(sweeps, workdir / "radius_sweep.png")
  log(f"\nwrote {workdir}/sweep.txt and radius_sweep.png (dashed: auto, dotted: default)")
  return sweeps


def _plot(sweeps: dict[str, diagnostics.RadiusSweepResult], path: pathlib.Path) -> None:
  plt = common.pyplot()

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
