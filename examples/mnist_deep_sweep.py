r"""Deep MNIST for several samplers and seeds: mean ± std test-error table and mean curves.

Takes every flag of mnist_deep.py (so its flagfiles) plus --samplers and --seeds; each run writes
into `<output_dir>/<sampler>/seed_<seed>/`, and the summary goes to `<output_dir>/summary.md` and
`<output_dir>/curves.png`. A run whose `eval.csv` already reaches the configured steps is read,
not retrained, so an interrupted or extended sweep (more samplers, more seeds) resumes.

  python examples/mnist_deep_sweep.py --flagfile=configs/mnist_deep_digits.flags \
      --samplers=uniform,vanilla_pds,easy_pds,dense_pds,anneal_pds --seeds=0,1,2,3,4 \
      --output_dir=runs/mnist_deep_digits
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib

from absl import flags
import numpy as np

import common
import mnist_deep

# The sweep's flags join mnist_deep's, so its flagfiles apply unchanged.
_SAMPLERS = flags.DEFINE_list("samplers", list(common.SAMPLER_NAMES), "Samplers to run.",
                              flag_values=mnist_deep.FLAGS)
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2", "3", "4"], "Seeds to run for every sampler.",
                           flag_values=mnist_deep.FLAGS)
_REPORT_STEPS = flags.DEFINE_list("report_steps", ["200", "500", "1000"],
                                  "Steps reported besides the last.", flag_values=mnist_deep.FLAGS)


def finished_curve(run_dir: pathlib.Path, steps: int) -> list[dict[str, float]] | None:
  """The test curve of a run in `run_dir` that reached `steps`, else None."""
  path = run_dir / "eval.csv"
  if not path.exists():
    return None
  with path.open(newline="") as handle:
    rows = [{name: float(value) for name, value in row.items()} for row in csv.DictReader(handle)]
  if not rows or rows[-1]["step"] != steps:
    return None
  return [{**row, "step": int(row["step"]), "test_error": 1.0 - row["test_accuracy"]} for row in rows]


def summarize(curves: dict[str, list[list[dict[str, float]]]], report_steps: list[int]) -> str:
  """Markdown table: test error (%) mean ± std over seeds at the report steps and the last step.

  With "uniform" among the samplers, a last column pairs every other sampler's runs with uniform's
  in seed order: the difference in mean test error over the curve (percentage points; < 0 is
  better), mean ± std over seeds, and how many seeds are below uniform.
  """
  last = curves[next(iter(curves))][0][-1]["step"]
  steps = [step for step in report_steps if step < last] + [last]
  paired = "uniform" in curves
  lines = ["| sampler | seeds | " + " | ".join(f"error @ {step}" for step in steps) + " | best-of-curve error |"
           + (" paired Δ curve-mean error vs uniform (seeds below) |" if paired else ""),
           "|---" * (len(steps) + 3 + paired) + "|"]

  def curve_means(runs):
    return np.array([100 * np.mean([row["test_error"] for row in run]) for run in runs])

  for sampler, runs in curves.items():
    cells = []
    for step in steps:
      errors = [100 * next(row["test_error"] for row in run if row["step"] == step) for run in runs]
      cells.append(f"{np.mean(errors):.2f} ± {np.std(errors):.2f}")
    best = [100 * min(row["test_error"] for row in run) for run in runs]
    cells.append(f"{np.mean(best):.2f} ± {np.std(best):.2f}")
    if paired:
      if sampler == "uniform" or len(runs) != len(curves["uniform"]):
        cells.append("—")
      else:
        delta = curve_means(runs) - curve_means(curves["uniform"])
        cells.append(f"{np.mean(delta):+.2f} ± {np.std(delta):.2f} ({int(np.sum(delta < 0))}/{len(delta)})")
    lines.append(f"| {sampler} | {len(runs)} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def plot_mean_curves(curves: dict[str, list[list[dict[str, float]]]], path: pathlib.Path) -> None:
  import matplotlib
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  figure, axis = plt.subplots(figsize=(7, 4.5))
  for sampler, runs in curves.items():
    steps = np.array([row["step"] for row in runs[0]])
    errors = 100 * np.array([[row["test_error"] for row in run] for run in runs])
    mean, std = errors.mean(axis=0), errors.std(axis=0)
    axis.plot(steps, mean, label=sampler)
    axis.fill_between(steps, mean - std, mean + std, alpha=0.15)
  axis.set(xlabel="training step", ylabel="test error (%)", yscale="log",
           title=f"mean ± std over {len(next(iter(curves.values())))} seeds")
  axis.grid(True, which="both", alpha=0.3)
  axis.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  plt.close(figure)


def main(argv):
  del argv
  base = mnist_deep.config_from_flags()
  root = pathlib.Path(base.output_dir)
  curves = {}
  for sampler in _SAMPLERS.value:
    curves[sampler] = []
    for seed in (int(s) for s in _SEEDS.value):
      print(f"\n=== {sampler}, seed {seed} ===")
      run_dir = root / sampler / f"seed_{seed}"
      curve = finished_curve(run_dir, base.steps)
      if curve is None:
        config = dataclasses.replace(base, sampler=sampler, seed=seed, output_dir=str(run_dir))
        curve = mnist_deep.train_and_evaluate(config, verbose=2)
      else:
        print(f"(finished earlier: {run_dir / 'eval.csv'})")
      curves[sampler].append(curve)
  table = summarize(curves, [int(step) for step in _REPORT_STEPS.value])
  (root / "summary.md").write_text(table + "\n")
  plot_mean_curves(curves, root / "curves.png")
  print(table)


if __name__ == "__main__":
  common.run(main, mnist_deep.FLAGS)
