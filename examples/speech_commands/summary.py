"""The speech experiment's runs summarised: accuracy per sampler over seeds, and the mean curves.

`summarize` reads `<runs_dir>/*_seed<seed>/results.json` (written by train.py) and writes
`<runs_dir>/summary.md` (the table), `summary_curves.csv` and `summary.png` (mean validation
accuracy per evaluation step, shaded +- one standard deviation over seeds, as the paper's figure).

Standard deviations are over seeds (ddof=1). Runs of one seed share the model initialisation,
dropout and augmentation randomness across samplers, so "paired" columns give the mean +- std of
the per-seed difference to uniform, which removes that shared variation.
"""

from __future__ import annotations

import collections
import csv
import json
import pathlib

import numpy as np

from examples import common

# Reached by uniform within the 300-step schedule on every seed, past the curve's early rise.
DEFAULT_TARGET_ACCURACY = 0.25


def _in_sampler_order(names) -> list[str]:
  """`names` with the known samplers first, in `common.ALL_SAMPLER_NAMES` order, then the rest sorted."""
  known = [name for name in common.ALL_SAMPLER_NAMES if name in names]
  return known + sorted(set(names) - set(known))


def load_runs(runs_dir: pathlib.Path) -> dict[str, dict[int, dict]]:
  """results.json of every `*_seed<seed>` directory, by sampler and seed.

  Runs with a --radius other than the default count as their own sampler, `<sampler>@<radius>`,
  and runs in the model's space (--space) as `<sampler>@<space>@R<refresh_every>` (radius first).
  """
  runs: dict[str, dict[int, dict]] = collections.defaultdict(dict)
  for path in sorted(runs_dir.glob("*_seed*/results.json")):
    result = json.loads(path.read_text())
    config = result["config"]
    name = config["sampler"] if config.get("radius") is None else f"{config['sampler']}@{config['radius']}"
    if config.get("space", "input") != "input":
      name += f"@{config['space']}@R{config['refresh_every']}"
    runs[name][config["seed"]] = result
  return runs


def first_at_target(curve: list[dict], target_accuracy: float) -> dict | None:
  """The first evaluation of `curve` whose validation accuracy is at least `target_accuracy`, or None.

  Compared as counts of mistakes (`common.error_at_most`): an accuracy exactly at the target reaches it.
  """
  return next((row for row in curve if common.error_at_most(common.with_errors(row), 100 * (1 - target_accuracy),
                                                             prefix="validation")), None)


def summary_table(runs: dict[str, dict[int, dict]], target_accuracy: float) -> str:
  """The markdown table per sampler: accuracies, curve mean, steps and seconds to `target_accuracy`, wall time.

  The steps to the target are those of the first evaluation at or above it, per seed ("—":
  never); the train seconds to it (mean ± std over the seeds that reach it) include the batcher's
  build and refreshes, not the evaluations ("—" for runs that did not record them).
  """
  uniform = runs.get("uniform", {})
  lines = [
      "| sampler | seeds | steps | final validation acc | test acc | mean validation acc over the curve "
      "| paired Δ test vs uniform | paired Δ curve mean vs uniform "
      f"| steps to validation acc {target_accuracy:g}, per seed | train seconds to it (seeds) "
      "| wall time per run (min) |",
      "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for sampler in _in_sampler_order(runs):
    by_seed = runs[sampler]
    seeds = sorted(by_seed)
    curve_means = {seed: float(np.mean([row["validation_accuracy"] for row in by_seed[seed]["curve"]]))
                   for seed in seeds}
    paired = [seed for seed in seeds if seed in uniform and sampler != "uniform"]
    uniform_curve = {seed: float(np.mean([row["validation_accuracy"] for row in uniform[seed]["curve"]]))
                     for seed in paired}
    minutes = [by_seed[seed]["seconds"] / 60 for seed in seeds]
    steps = sorted({by_seed[seed]["steps"] for seed in seeds})
    test_delta = (common.mean_std_text([by_seed[s]["test_accuracy"] - uniform[s]["test_accuracy"] for s in paired])
                  if paired else "—")
    reached = [first_at_target(by_seed[seed]["curve"], target_accuracy) for seed in seeds]
    seconds = [row.get("train_seconds", float("nan")) for row in reached if row is not None]
    seconds_text = ("—" if not seconds or np.isnan(seconds).any()
                    else f"{common.mean_std_text(seconds, digits=1)} ({len(seconds)}/{len(seeds)})")
    lines.append(
        f"| {sampler} | {len(seeds)} ({','.join(map(str, seeds))}) | {'/'.join(map(str, steps))} "
        f"| {common.mean_std_text([by_seed[seed]['validation_accuracy'] for seed in seeds])} "
        f"| {common.mean_std_text([by_seed[seed]['test_accuracy'] for seed in seeds])} "
        f"| {common.mean_std_text(list(curve_means.values()))} "
        f"| {test_delta} "
        f"| {common.mean_std_text([curve_means[s] - uniform_curve[s] for s in paired]) if paired else '—'} "
        f"| {', '.join('—' if row is None else str(int(row['step'])) for row in reached)} | {seconds_text} "
        f"| {np.mean(minutes):.1f} ({min(minutes):.1f}–{max(minutes):.1f}) |")
  return "\n".join(lines)


def mean_curves(runs: dict[str, dict[int, dict]]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """Per sampler: evaluation steps, mean and std of validation accuracy over seeds."""
  curves = {}
  for sampler, by_seed in runs.items():
    steps = [row["step"] for row in next(iter(by_seed.values()))["curve"]]
    mismatched = [seed for seed, result in by_seed.items() if [row["step"] for row in result["curve"]] != steps]
    if mismatched:
      raise ValueError(f"{sampler}: the runs of seeds {mismatched} were evaluated at other steps than seed "
                       f"{next(iter(by_seed))}'s; keep runs of one config in one --runs_dir.")
    accuracies = np.array([[row["validation_accuracy"] for row in result["curve"]] for result in by_seed.values()])
    std = accuracies.std(axis=0, ddof=1) if len(accuracies) > 1 else np.zeros(len(steps))
    curves[sampler] = (np.asarray(steps), accuracies.mean(axis=0), std)
  return curves


def summarize(runs_dir: str | pathlib.Path, target_accuracy: float = DEFAULT_TARGET_ACCURACY) -> str:
  """Writes `summary.md`, `summary_curves.csv` and `summary.png` into `runs_dir`.

  Args:
    runs_dir: the directory of the run directories.
    target_accuracy: the validation accuracy whose first crossing the table reports.

  Returns:
    The summary (markdown: a header line and the table).

  Raises:
    FileNotFoundError: when `runs_dir` holds no runs.
  """
  runs_dir = pathlib.Path(runs_dir)
  runs = load_runs(runs_dir)
  if not runs:
    raise FileNotFoundError(f"no <sampler>_seed<seed>/results.json under {runs_dir}")
  example = next(iter(next(iter(runs.values())).values()))
  summary = (f"Speech commands, {example['steps']} steps, partition sizes {example['partition_sizes']}, "
             f"mingling histogram of the training set (values 0..K) "
             f"{[round(share, 3) for share in example['mingling_histogram']]}.\n\n"
             f"{summary_table(runs, target_accuracy)}")
  (runs_dir / "summary.md").write_text(summary + "\n")
  curves = mean_curves(runs)
  with (runs_dir / "summary_curves.csv").open("w", newline="") as handle:
    writer = csv.writer(handle)
    writer.writerow(["sampler", "step", "validation_accuracy_mean", "validation_accuracy_std", "seeds"])
    for sampler, (steps, mean, std) in curves.items():
      for row in zip(steps, mean, std):
        writer.writerow([sampler, int(row[0]), f"{row[1]:.5f}", f"{row[2]:.5f}", len(runs[sampler])])
  common.plot_mean_curves({f"{sampler} ({len(runs[sampler])} seeds)": curves[sampler]
                           for sampler in _in_sampler_order(curves)},
                          runs_dir / "summary.png", "validation accuracy",
                          "Speech commands (generated data), mean ± std over seeds")
  return summary
