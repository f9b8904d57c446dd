"""Deep MNIST for several samplers and seeds: mean ± std test-error table and mean curves.

The sweep's settings are the Deep-MNIST run's (`examples.mnist_deep.train.Config`, so its flagfiles
apply) plus the samplers, seeds and report steps; each run writes into
`<workdir>/<sampler>/seed_<seed>/`. A run whose `eval.csv` already reaches the configured steps is
read, not retrained, so an interrupted or extended sweep (more samplers, more seeds) resumes.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from examples import common
from examples import settings
from examples.mnist_deep import train


@dataclasses.dataclass(frozen=True)
class SweepConfig(train.Config):
  """The settings every run shares (a Deep-MNIST config; its sampler and seed are set per run) and the grid."""

  samplers: tuple[str, ...] = settings.setting(
      common.SAMPLER_NAMES, "Samplers to run (in place of --sampler).", choices=common.ALL_SAMPLER_NAMES)
  seeds: tuple[int, ...] = settings.setting((0, 1, 2, 3, 4), "Seeds to run for every sampler (in place of --seed).")
  report_steps: tuple[int, ...] = settings.setting((200, 500, 1000), "Steps reported besides the last.",
                                                   minimum=1)
  target_error: float = settings.setting(
      5.0, "Test error (%) whose first evaluation at or below it the summary reports, in steps and "
      "train seconds.", minimum=0.0)

  def run(self, sampler: str, seed: int) -> train.Config:
    """The config of the sweep's run of `sampler` with `seed`."""
    return run_config(self, sampler=sampler, seed=seed)


def run_config(config: train.Config, **changes) -> train.Config:
  """The Deep-MNIST run of `config` (a config deriving from it: its own fields are dropped), with `changes`."""
  shared = {field.name: getattr(config, field.name) for field in dataclasses.fields(train.Config)}
  return train.Config(**{**shared, **changes})


def run_or_read(config: train.Config, run_dir: pathlib.Path, label: str) -> list[dict[str, float]]:
  """The curve of `config`'s run in `run_dir`: read when a finished run is there, else trained now."""
  print(f"\n=== {label} ===")
  curve = finished_curve(run_dir, config.steps)
  if curve is None:
    return train.train_and_evaluate(config, run_dir, verbose=2)
  print(f"(finished earlier: {run_dir / 'eval.csv'})")
  return curve


def finished_curve(run_dir: pathlib.Path, steps: int) -> list[dict[str, float]] | None:
  """The test curve of a run in `run_dir` that reached `steps`, else None."""
  path = run_dir / "eval.csv"
  if not path.exists():
    return None
  rows = common.read_evaluations(path)
  # Curves written before the train seconds were recorded have none.
  rows = [{"train_seconds": float("nan"), **row} for row in rows]
  if not rows or rows[-1]["step"] != steps:
    return None
  return [common.with_errors({**row, "step": int(row["step"])}) for row in rows]


def first_at_target(run: list[dict[str, float]], target_error: float) -> dict[str, float] | None:
  """The first evaluation of `run` whose test error (%) is at most `target_error`, or None (`common.error_at_most`)."""
  return next((row for row in run if common.error_at_most(row, target_error)), None)


def summarize(curves: dict[str, list[list[dict[str, float]]]], report_steps: tuple[int, ...],
              target_error: float) -> str:
  """Markdown table: test error (%) mean ± std over seeds at the report steps and the last step.

  Then, per seed, the steps to the first evaluation at or below `target_error` ("—": never), and
  the train seconds to it (mean ± std over the seeds that reach it; they include the batcher's
  build and refreshes, not the evaluations). With "uniform" among the samplers, a last column
  pairs every other sampler's runs with uniform's in seed order: the difference in mean test
  error over the curve (percentage points; < 0 is better), mean ± std over seeds, and how many
  seeds are below uniform. Standard deviations are the seeds' spread (ddof=0).
  """
  last = curves[next(iter(curves))][0][-1]["step"]
  steps = [step for step in report_steps if step < last] + [last]
  paired = "uniform" in curves
  header = (["sampler", "seeds"] + [f"error @ {step}" for step in steps] + ["best-of-curve error"]
            + [f"steps to {target_error:g}% error, per seed", f"train seconds to {target_error:g}% (seeds)"]
            + ["paired Δ curve-mean error vs uniform (seeds below)"] * paired)

  def curve_means(runs):
    return np.array([100 * np.mean([row["test_error"] for row in run]) for run in runs])

  rows = []
  for sampler, runs in curves.items():
    cells = [sampler, str(len(runs))]
    for step in steps:
      errors = [100 * next(row["test_error"] for row in run if row["step"] == step) for run in runs]
      cells.append(common.mean_std_text(errors, digits=2, ddof=0))
    cells.append(common.mean_std_text([100 * min(row["test_error"] for row in run) for run in runs], digits=2, ddof=0))
    reached = [first_at_target(run, target_error) for run in runs]
    cells.append(", ".join("—" if row is None else str(int(row["step"])) for row in reached))
    seconds = [row["train_seconds"] for row in reached if row is not None]
    cells.append("—" if not seconds or np.isnan(seconds).any()
                 else f"{common.mean_std_text(seconds, digits=1, ddof=0)} ({len(seconds)}/{len(runs)})")
    if paired:
      if sampler == "uniform" or len(runs) != len(curves["uniform"]):
        cells.append("—")
      else:
        delta = curve_means(runs) - curve_means(curves["uniform"])
        mean, std = common.mean_std(delta, ddof=0)
        cells.append(f"{mean:+.2f} ± {std:.2f} ({int(np.sum(delta < 0))}/{len(delta)})")
    rows.append(cells)
  return common.markdown_table(header, rows)


def sweep(config: SweepConfig, workdir: str | pathlib.Path) -> str:
  """Every sampler with every seed; writes `summary.md` and `curves.png` into `workdir`.

  Returns:
    The summary table (markdown).
  """
  workdir = pathlib.Path(workdir)
  curves = {}
  for sampler in config.samplers:
    curves[sampler] = []
    for seed in config.seeds:
      curves[sampler].append(run_or_read(config.run(sampler, seed), workdir / sampler / f"seed_{seed}",
                                         f"{sampler}, seed {seed}"))
  table = summarize(curves, config.report_steps, config.target_error)
  (workdir / "summary.md").write_text(table + "\n")
  mean_curves = {}
  for sampler, runs in curves.items():
    errors = 100 * np.array([[row["test_error"] for row in run] for run in runs])
    mean_curves[sampler] = (np.array([row["step"] for row in runs[0]]), errors.mean(axis=0), errors.std(axis=0))
  common.plot_mean_curves(mean_curves, workdir / "curves.png", "test error (%)",
                          f"mean ± std over {len(config.seeds)} seeds", yscale="log")
  return table
