r"""Summarises speech experiment runs: accuracy per sampler over seeds, and the mean curves.

Reads `<runs_dir>/*_seed<seed>/results.json` (written by train.py) and writes
`<runs_dir>/summary.md` (the table), `summary_curves.csv` and `summary.png` (mean validation
accuracy per evaluation step, shaded +- one standard deviation over seeds, as the paper's figure).

  python examples/speech_commands/summarize.py --runs_dir=runs/speech_commands

Standard deviations are over seeds (ddof=1). Runs of one seed share the model initialisation,
dropout and augmentation randomness across samplers, so "paired" columns give the mean +- std of
the per-seed difference to uniform, which removes that shared variation.
"""

from __future__ import annotations

import collections
import csv
import json
import pathlib
import sys
from typing import Sequence

if __package__ in (None, ""):
  # Run as a script: make `examples/` importable (for `common`).
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import common  # noqa: E402

FLAGS = flags.FlagValues()
_RUNS_DIR = flags.DEFINE_string("runs_dir", "runs/speech_commands", "Directory of the run directories.",
                                flag_values=FLAGS)


def _in_sampler_order(names) -> list[str]:
  """`names` with the known samplers first, in `common.ALL_SAMPLER_NAMES` order, then the rest sorted."""
  known = [name for name in common.ALL_SAMPLER_NAMES if name in names]
  return known + sorted(set(names) - set(known))


def _mean_std(values: Sequence[float]) -> str:
  values = np.asarray(values, dtype=np.float64)
  if values.size == 0:
    return "n/a"
  std = values.std(ddof=1) if values.size > 1 else float("nan")
  return f"{values.mean():.4f} ± {std:.4f}"


def load_runs(runs_dir: pathlib.Path) -> dict[str, dict[int, dict]]:
  """results.json of every `*_seed<seed>` directory, by sampler and seed.

  Runs with a --radius other than the default count as their own sampler, `<sampler>@<radius>`.
  """
  runs: dict[str, dict[int, dict]] = collections.defaultdict(dict)
  for path in sorted(runs_dir.glob("*_seed*/results.json")):
    result = json.loads(path.read_text())
    config = result["config"]
    name = config["sampler"] if config.get("radius") is None else f"{config['sampler']}@{config['radius']}"
    runs[name][config["seed"]] = result
  return runs


def summary_table(runs: dict[str, dict[int, dict]]) -> str:
  """The markdown table of final validation / test accuracy, curve mean and wall time per sampler."""
  uniform = runs.get("uniform", {})
  lines = [
      "| sampler | seeds | steps | final validation acc | test acc | mean validation acc over the curve "
      "| paired Δ test vs uniform | paired Δ curve mean vs uniform | wall time per run (min) |",
      "|---|---|---|---|---|---|---|---|---|",
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
    test_delta = (_mean_std([by_seed[s]["test_accuracy"] - uniform[s]["test_accuracy"] for s in paired])
                  if paired else "—")
    lines.append(
        f"| {sampler} | {len(seeds)} ({','.join(map(str, seeds))}) | {'/'.join(map(str, steps))} "
        f"| {_mean_std([by_seed[seed]['validation_accuracy'] for seed in seeds])} "
        f"| {_mean_std([by_seed[seed]['test_accuracy'] for seed in seeds])} "
        f"| {_mean_std(list(curve_means.values()))} "
        f"| {test_delta} "
        f"| {_mean_std([curve_means[s] - uniform_curve[s] for s in paired]) if paired else '—'} "
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


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  runs_dir = pathlib.Path(_RUNS_DIR.value)
  runs = load_runs(runs_dir)
  if not runs:
    sys.exit(f"no <sampler>_seed<seed>/results.json under {runs_dir}")
  table = summary_table(runs)
  example = next(iter(next(iter(runs.values())).values()))
  header = (f"Speech commands, {example['steps']} steps, partition sizes {example['partition_sizes']}, "
            f"mingling histogram of the training set (values 0..K) "
            f"{[round(share, 3) for share in example['mingling_histogram']]}.\n\n")
  (runs_dir / "summary.md").write_text(header + table + "\n")
  print(header + table)

  curves = mean_curves(runs)
  with (runs_dir / "summary_curves.csv").open("w", newline="") as handle:
    writer = csv.writer(handle)
    writer.writerow(["sampler", "step", "validation_accuracy_mean", "validation_accuracy_std", "seeds"])
    for sampler, (steps, mean, std) in curves.items():
      for row in zip(steps, mean, std):
        writer.writerow([sampler, int(row[0]), f"{row[1]:.5f}", f"{row[2]:.5f}", len(runs[sampler])])
  figure, axes = plt.subplots(figsize=(7, 4.5))
  for sampler in _in_sampler_order(curves):
    steps, mean, std = curves[sampler]
    axes.plot(steps, mean, label=f"{sampler} ({len(runs[sampler])} seeds)")
    axes.fill_between(steps, mean - std, mean + std, alpha=0.15)
  axes.set_xlabel("training step")
  axes.set_ylabel("validation accuracy")
  axes.set_title("Speech commands (generated data), mean ± std over seeds")
  axes.grid(alpha=0.3)
  axes.legend()
  figure.tight_layout()
  figure.savefig(runs_dir / "summary.png", dpi=120)
  print(f"Wrote {runs_dir / 'summary.md'}, summary_curves.csv and summary.png")


if __name__ == "__main__":
  common.run(main, FLAGS)
