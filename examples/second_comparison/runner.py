"""The protocol of docs/results/second_comparison_protocol.md: selection that needs no extra pass.

On the Deep-MNIST runs of examples/mnist_deep (its `train.Config` fields are the shared settings,
so its flagfiles apply), per condition:

1. Baselines. Uniform and epoch shuffling are tuned over learning rate x schedule with the
   tuning seeds (`tune`). The comparator is the one with the lower tuning score, and the targets
   T50 and T90 come from its tuning curves (`decision.comparator`, `decision.targets`).
2. Irreducible loss. The comparator's tuned config trains on the held-out split, seed
   `irreducible_seed`, for the step budget B; its loss on each training element corrects the
   reducible arm's scores (`train.irreducible_loss`). It trains only when a run needs it.
3. Matched baseline and arms. Each is tuned on the same grid and seeds; the pruning arms and the
   matched baseline (the comparator's sampler) train for S = `short_share` x B steps, rounded
   down to an evaluation step, so that a cosine schedule decays fully at S.
4. Evaluation. Every tuned config runs with every evaluation seed; the runs of a seed run one
   after another, in an order rotated by one from seed to seed.
5. Summary. Per arm, paired seconds to each target against the comparator (and, for the arms of
   budget S, against the matched baseline), with the symmetric rule of `decision.verdict`; and a
   figure of the validation and test error against train seconds (`plot_errors`).

A grid in which the best learning rate of any schedule is at an end grows by one step of the 1-3-10
ladder beyond that end and is scored again, at most `grid_extensions` times. The choices, comparator
and targets are written to `choices.md` before any evaluation run. A finished run is read, not rerun
(so the protocol resumes and recomputes from unpacked curves). A run beside other work is moved
aside to `<run>.loaded` and run once more, and the second run stands: beside other work means the
rest of the machine (other processes and the hypervisor's steal) used more than `other_cpu_ceiling`
cores on average over the run's train seconds. `curves pack` publishes every run's curve; the
irreducible-loss model's one-time cost is in `irreducible/cost.json`, published beside them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import shutil
import time
from typing import Mapping, Sequence

import numpy as np

from examples import common
from examples import settings
from examples.mnist_deep import train
from examples.mnist_deep_sweep import sweep
from examples.selection_protocol import decision
from examples.selection_protocol import protocol

Curve = list[dict[str, float]]

BASELINES = ("uniform", "epoch_shuffle")
MATCHED = "matched"


@dataclasses.dataclass(frozen=True)
class Arm:
  """A method compared with the baselines.

  Attributes:
    changes: the fields of the shared config it sets (a sampler of examples/common.py and its space).
    short: whether it trains for the shorter budget S (it takes fewer steps per pass).
    reducible: whether its scores are corrected by the irreducible-loss model's losses.
  """

  changes: Mapping[str, object]
  short: bool = False
  reducible: bool = False


ARMS = {
    "epoch_pruning": Arm({"sampler": "epoch_pruning"}, short=True),
    "random_pruning": Arm({"sampler": "random_pruning"}, short=True),
    "rs2": Arm({"sampler": "rs2"}, short=True),
    "importance@loss_step": Arm({"sampler": "importance", "space": "loss_step"}),
    "importance@loss_step+reducible": Arm({"sampler": "importance", "space": "loss_step"}, reducible=True),
    "importance@gradient_step": Arm({"sampler": "importance", "space": "gradient_step"}),
    common.ONLINE_IMPORTANCE: Arm({"sampler": common.ONLINE_IMPORTANCE}),
}


@dataclasses.dataclass(frozen=True)
class ComparisonConfig(train.Config):
  """The settings every run shares (a Deep-MNIST config) and the protocol's grid, seeds and budgets."""

  learning_rates: tuple[float, ...] = settings.setting(
      (3e-4, 1e-3, 3e-3, 1e-2), "Learning rates of the tuning grid, ascending.", greater_than=0.0)
  lr_schedules: tuple[str, ...] = settings.setting(("constant", "cosine"), "Schedules of the tuning grid.",
                                                   choices=train.LR_SCHEDULES)
  grid_extensions: int = settings.setting(
      3, "How many times a grid in which a schedule's best learning rate is at an end grows beyond it.",
      minimum=0)
  tuning_seeds: tuple[int, ...] = settings.setting((100, 101), "Seeds of the tuning runs (none an evaluation seed).")
  seeds: tuple[int, ...] = settings.setting(tuple(range(10)), "Evaluation seeds, paired across arms.")
  arms: tuple[str, ...] = settings.setting(tuple(ARMS), "Arms compared with the baselines.", choices=tuple(ARMS))
  short_share: float = settings.setting(
      0.7, "The pruning arms' and the matched baseline's step budget S, as a share of --steps (rounded down to "
      "an evaluation step).", greater_than=0.0, maximum=1.0)
  irreducible_seed: int = settings.setting(200, "Seed of the irreducible-loss model.")
  other_cpu_ceiling: float = settings.setting(
      0.1, "A run beside other processes that used more than this many cores on average over its train "
      "seconds runs once more.", greater_than=0.0)
  resamples: int = settings.setting(10000, "Bootstrap resamples of the paired medians' intervals.", minimum=100)

  def __post_init__(self):
    super().__post_init__()
    if not self.validation_size:
      raise ValueError("The protocol tunes on a validation set: set --validation_size > 0.")
    if set(self.tuning_seeds) & set(self.seeds):
      raise ValueError("--tuning_seeds and --seeds must not share a seed.")
    if list(self.learning_rates) != sorted(set(self.learning_rates)):
      raise ValueError(f"--learning_rates must ascend without repeats, got {self.learning_rates}.")
    if self.short_steps < self.eval_every:
      raise ValueError(f"--short_share={self.short_share} of --steps={self.steps} is under one evaluation "
                       f"interval (--eval_every={self.eval_every}): raise either.")
    if any(ARMS[name].reducible for name in self.arms) and not self.held_out_size:
      raise ValueError("a reducible arm needs the irreducible-loss model's held-out split: set --held_out_size > 0.")

  @property
  def short_steps(self) -> int:
    """S: `short_share` of the step budget, rounded down to an evaluation step."""
    return int(self.short_share * self.steps) // self.eval_every * self.eval_every


def other_cores(curve: Curve) -> float:
  """The cores the rest of the machine used on average over a run's train seconds; 0.0 for a run without the column."""
  last = curve[-1]
  if "other_cpu_seconds" not in last or last["train_seconds"] <= 0.0:
    return 0.0
  return last["other_cpu_seconds"] / last["train_seconds"]


def next_rate(rate: float, direction: int) -> float:
  """The learning rate one step of the 1-3-10 ladder above (`direction` 1) or below (-1) `rate`.

  Off the ladder, a factor of 3.
  """
  exponent = math.floor(math.log10(rate))
  mantissa = rate / 10**exponent
  if math.isclose(mantissa, 1.0, rel_tol=1e-6):
    return float(f"{3 * 10**exponent:.1g}") if direction > 0 else float(f"{3 * 10**(exponent - 1):.1g}")
  if math.isclose(mantissa, 3.0, rel_tol=1e-6):
    return float(f"{10**(exponent + 1):.1g}") if direction > 0 else float(f"{10**exponent:.1g}")
  return rate * 3 if direction > 0 else rate / 3


def grid_label(rate: float, schedule: str) -> str:
  """A config of the grid as its runs' directory names it: `lr=<rate>,<schedule>`."""
  return f"lr={rate:g},{schedule}"


@dataclasses.dataclass(frozen=True)
class Tuned:
  """A sampler's tuning: its chosen config and every config's tuning runs.

  Attributes:
    name: the baseline or arm.
    steps: its step budget.
    label: the chosen config's `grid_label`.
    changes: the fields of the shared config its runs set, the chosen learning rate and schedule included.
    curves: every config's tuning runs (label -> one curve per tuning seed), in the grid's order.
    at_end: whether the best learning rate of some schedule is still at an end of the grid after
      its extensions.
  """

  name: str
  steps: int
  label: str
  changes: Mapping[str, object]
  curves: Mapping[str, list[Curve]]
  at_end: bool

  @property
  def runs(self) -> list[Curve]:
    """The chosen config's tuning runs."""
    return self.curves[self.label]


class ConditionProtocol:
  """One condition's protocol: tuning, the irreducible-loss model, evaluation and summary, in `workdir`."""

  def __init__(self, config: ComparisonConfig, workdir: str | pathlib.Path):
    """Args:
      config: the condition.
      workdir: where every run and the summaries go.
    """
    self.config = config
    self.workdir = pathlib.Path(workdir)
    self.irreducible_file = self.workdir / "irreducible" / "losses.npy"
    # The irreducible-loss model's run: the comparator's tuned config, known once the baselines are tuned.
    self._irreducible_config: train.Config | None = None

  def run_checked(self, config: train.Config, run_dir: pathlib.Path, label: str) -> Curve:
    """A run with the rerun rule: beside other work, moved to `<run>.loaded` and run once more."""
    # Only a run that trains needs the losses: finished runs recompute without the model.
    if (config.irreducible_loss_file is not None and not self.irreducible_file.exists()
        and sweep.finished_curve(run_dir, config.steps) is None):
      self.train_irreducible()
    curve = sweep.run_or_read(config, run_dir, label)
    second = run_dir.with_name(run_dir.name + ".loaded").exists()
    if second or other_cores(curve) <= self.config.other_cpu_ceiling:
      return curve
    shutil.move(run_dir, run_dir.with_name(run_dir.name + ".loaded"))
    return sweep.run_or_read(config, run_dir, f"{label} (once more: other work ran beside it)")

  def train_irreducible(self) -> None:
    """Trains the irreducible-loss model with the comparator's config and writes its cost beside its losses."""
    if self._irreducible_config is None:
      raise RuntimeError("the irreducible-loss model needs the comparator: tune the baselines first (`choose`).")
    run = self._irreducible_config
    began = time.perf_counter()
    train.irreducible_loss(run, self.irreducible_file)
    cost = {"train_seconds": time.perf_counter() - began, "steps": run.steps, "seed": run.seed,
            "learning_rate": run.learning_rate, "lr_schedule": run.lr_schedule}
    (self.irreducible_file.parent / "cost.json").write_text(json.dumps(cost, indent=1) + "\n")

  def run_all(self, jobs: Mapping[str, Mapping[str, object]], seeds: Sequence[int], directory: pathlib.Path
              ) -> dict[str, list[Curve]]:
    """Every job (label -> changes of the shared config) with every seed, in rotated round-robin order."""
    curves: dict[str, list[Curve]] = {label: [] for label in jobs}
    for index, seed in enumerate(seeds):
      for label in protocol.rotated(list(jobs), index):
        config = sweep.run_config(self.config, **jobs[label], seed=seed)
        curves[label].append(self.run_checked(config, directory / label / f"seed_{seed}", f"{label}, seed {seed}"))
    return curves

  def tune(self, name: str, changes: Mapping[str, object], steps: int) -> Tuned:
    """`name`'s best config of the grid on validation (`decision.score`).

    The grid grows while the best learning rate of any schedule is at an end: the chosen config
    may then come from a schedule whose optimum lay beyond the grid.
    """
    rates = list(self.config.learning_rates)
    for extension in range(self.config.grid_extensions + 1):
      jobs = {grid_label(rate, schedule): {**changes, "steps": steps, "learning_rate": rate, "lr_schedule": schedule}
              for rate in rates for schedule in self.config.lr_schedules}
      curves = self.run_all(jobs, self.config.tuning_seeds, self.workdir / "tuning" / name)
      def score(label: str) -> tuple[float, float]:
        return decision.score(curves[label])

      label = min(jobs, key=score)
      best_rates = {jobs[min((label for label in jobs if jobs[label]["lr_schedule"] == schedule), key=score)]
                    ["learning_rate"] for schedule in self.config.lr_schedules}
      ends = best_rates & {rates[0], rates[-1]}
      if not ends or extension == self.config.grid_extensions:
        return Tuned(name, steps, label, jobs[label], curves, bool(ends))
      if rates[0] in ends:
        rates.insert(0, next_rate(rates[0], -1))
      if rates[-1] in ends:
        rates.append(next_rate(rates[-1], 1))
    raise AssertionError("unreachable: the last extension returns")

  def arm_changes(self, name: str) -> dict[str, object]:
    """The fields of the shared config an arm's runs set."""
    arm = ARMS[name]
    return {"space": "input", **arm.changes,
            "irreducible_loss_file": str(self.irreducible_file) if arm.reducible else None}

  def choose(self) -> tuple[dict[str, Tuned], str, tuple[int, ...]]:
    """Steps 1 to 3: every sampler's tuning, the comparator and the targets."""
    config = self.config
    tuned = {name: self.tune(name, {"sampler": name, "space": "input"}, config.steps) for name in BASELINES}
    comparator = decision.comparator({name: tuned[name].runs for name in BASELINES})
    targets = decision.targets(tuned[comparator].runs, config.steps)
    self._irreducible_config = sweep.run_config(config, **tuned[comparator].changes, seed=config.irreducible_seed)
    tuned[MATCHED] = self.tune(MATCHED, {"sampler": comparator, "space": "input"}, config.short_steps)
    for name in config.arms:
      tuned[name] = self.tune(name, self.arm_changes(name),
                              config.short_steps if ARMS[name].short else config.steps)
    return tuned, comparator, targets

  def run(self) -> str:
    """Tunes, names the comparator and targets, evaluates and summarises.

    Writes `choices.md` before the evaluation runs, then `summary.md` and `errors.png` (`plot_errors`).

    Returns:
      The summary (markdown).
    """
    tuned, comparator, targets = self.choose()
    self.workdir.mkdir(parents=True, exist_ok=True)
    choices = choices_text(self.config, tuned, comparator, targets)
    (self.workdir / "choices.md").write_text(choices + "\n")
    # A run's directory names its config, so that a changed choice is run anew, not read back.
    jobs = {f"{name}/{t.label}": t.changes for name, t in tuned.items()}
    ran = self.run_all(jobs, self.config.seeds, self.workdir / "evaluation")
    curves = {name: ran[f"{name}/{t.label}"] for name, t in tuned.items()}
    summary = "\n\n".join([choices, evaluation_text(self.config, tuned, curves, comparator, targets),
                           irreducible_text(self.irreducible_file.parent / "cost.json")]) + "\n"
    (self.workdir / "summary.md").write_text(summary)
    plot_errors(curves, targets, self.workdir / "errors.png")
    return summary


def choices_text(config: ComparisonConfig, tuned: Mapping[str, Tuned], comparator: str,
                 targets: Sequence[int]) -> str:
  """Markdown: every config's tuning score, the choices, the comparator and the targets."""
  rows = []
  for name, t in tuned.items():
    for label, runs in t.curves.items():
      mean, last = decision.score(runs)
      mark = (" (chosen" + (", a schedule's best rate at an end of the grid" if t.at_end else "") + ")"
              if label == t.label else "")
      rows.append([name, str(t.steps), label + mark, f"{mean:.1f}", f"{last:.1f}"])
  examples = int(tuned[comparator].runs[0][-1]["validation_examples"])
  return "\n\n".join([
      "## Tuning (validation)",
      common.markdown_table(["sampler", "steps", "config", "mean validation mistakes", "last validation mistakes"],
                            rows),
      f"Comparator: **{comparator}**, {tuned[comparator].label}. Targets of {examples} validation examples: "
      f"T50 = {targets[0]} mistakes (step {config.steps // 2}), T90 = {targets[1]} mistakes "
      f"(step {int(0.9 * config.steps)}). Budget S = {config.short_steps} steps."])


def _median_seconds_at(runs: Sequence[Curve], step: float) -> float:
  """The median over runs of the train seconds at the last evaluation at or before `step`."""
  return float(np.median([[row for row in run if row["step"] <= step][-1]["train_seconds"] for run in runs]))


def _test_mistakes_within(run: Curve, seconds: float) -> int:
  """The test mistakes of the last evaluation within `seconds` of training (the first if none is)."""
  within = [row for row in run if row["train_seconds"] <= seconds] or run[:1]
  return decision.mistakes(within[-1], "test")


def evaluation_text(config: ComparisonConfig, tuned: Mapping[str, Tuned], curves: Mapping[str, list[Curve]],
                    comparator: str, targets: Sequence[int]) -> str:
  """Markdown: per sampler, steps and seconds to each target and test mistakes at two budgets; the verdicts."""
  budgets = [_median_seconds_at(curves[comparator], share * config.steps) for share in (0.5, 1.0)]
  censored_at = decision.censored([run for runs in curves.values() for run in runs], config.eval_every, config.steps)
  header = ["sampler", "seeds"]
  for name, target in zip(("T50", "T90"), targets):
    header += [f"steps to {name}, median (reached)", f"seconds to {name}, median"]
  header += [f"test mistakes @ {seconds:.0f} s, median" for seconds in budgets] + ["train seconds, all steps"]
  rows = []
  for name, runs in curves.items():
    cells = [name, str(len(runs))]
    for target in targets:
      reached = [decision.seconds_to(run, target, censored_at) for run in runs]
      cells += [f"{np.median([r[0] for r in reached]):.0f} ({sum(r[2] for r in reached)}/{len(runs)})",
                f"{np.median([r[1] for r in reached]):.1f}"]
    cells += [f"{np.median([_test_mistakes_within(run, seconds) for run in runs]):.0f}" for seconds in budgets]
    cells.append(common.mean_std_text([run[-1]["train_seconds"] for run in runs], digits=1))
    rows.append(cells)

  pairs = [(name, comparator) for name in curves if name != comparator]
  pairs += [(name, MATCHED) for name in curves if name in ARMS and ARMS[name].short and MATCHED in curves]
  verdict_rows = []
  for name, against in pairs:
    result = decision.compare(name, curves[name], against, curves[against], targets, censored_at, config.resamples)
    cells = [name, against]
    for median, (low, high) in zip(result.median_seconds, result.intervals):
      cells.append(f"{median:+.1f} [{low:+.1f}, {high:+.1f}]")
    cells += [" / ".join(f"{count}/{len(curves[name])}" for count in result.reached),
              result.verdict if name in ARMS else f"({result.verdict}: a baseline)"]
    verdict_rows.append(cells)
  return "\n\n".join([
      "## Evaluation", common.markdown_table(header, rows),
      f"Test mistakes at {budgets[0]:.0f} s and {budgets[1]:.0f} s: the comparator's median train seconds at "
      "50% and 100% of the step budget. Reported, not decisive. A run that misses a target counts at "
      f"{censored_at[1]:.1f} s ({censored_at[0]:.0f} steps): one interval past the budget, at the slowest run's "
      "seconds per step.",
      "## Verdicts (seconds to the targets, arm minus baseline, paired by seed)",
      common.markdown_table(["sampler", "vs", "Δ seconds to T50, median [95% CI]",
                             "Δ seconds to T90, median [95% CI]", "reached T50 / T90", "verdict"], verdict_rows)])


def _median_curve(runs: Sequence[Curve], prefix: str) -> tuple[np.ndarray, np.ndarray]:
  """Per evaluation step, the median over runs of the train seconds and of the `prefix` error in percent."""
  seconds = np.median([[row["train_seconds"] for row in run] for run in runs], axis=0)
  errors = np.median([[100 * decision.mistakes(row, prefix) / row[f"{prefix}_examples"] for row in run]
                      for run in runs], axis=0)
  return seconds, errors


def plot_errors(curves: Mapping[str, list[Curve]], targets: Sequence[int], path: pathlib.Path) -> None:
  """Validation and test error against train seconds, the median over seeds per sampler, as a PNG.

  The validation panel draws the targets T50 and T90 as dotted lines (one line when they are equal).
  """
  plt = common.pyplot()
  figure, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
  examples = next(iter(curves.values()))[0][-1]["validation_examples"]
  for axis, prefix in zip(axes, ("validation", "test")):
    for index, (name, runs) in enumerate(curves.items()):
      seconds, errors = _median_curve(runs, prefix)
      # The baselines draw solid, the arms dashed, so that a colour reused by the cycle stays readable.
      axis.plot(seconds, errors, label=name, linestyle="-" if name in (*BASELINES, MATCHED) else "--",
                color=f"C{index % 10}")
    # A log scale: the error falls by an order of magnitude, and the targets lie near its floor.
    axis.set(xlabel="train seconds (median over seeds)", ylabel=f"{prefix} error, % (median over seeds)",
             title=prefix, yscale="log")
    axis.grid(True, which="both", alpha=0.3)
  for target in sorted(set(targets)):
    label = " = ".join(name for name, value in zip(("T50", "T90"), targets) if value == target)
    axes[0].axhline(100 * target / examples, color="black", linestyle=":", linewidth=1)
    axes[0].annotate(label, (axes[0].get_xlim()[1], 100 * target / examples), ha="right", va="bottom", fontsize=8)
  axes[1].legend(fontsize=8, frameon=False)
  figure.tight_layout()
  # No software name in the file, so that the same curves give the same bytes.
  figure.savefig(path, dpi=100, metadata={"Software": None})
  plt.close(figure)


def irreducible_text(cost_file: pathlib.Path) -> str:
  """The irreducible-loss model's one-time cost, if this workdir trained it."""
  if not cost_file.exists():
    return "The irreducible-loss model was not trained in this workdir: no reducible arm needed it."
  cost = json.loads(cost_file.read_text())
  settings_text = f"{cost['steps']} steps, seed {cost['seed']}, lr={cost['learning_rate']:g}, {cost['lr_schedule']}"
  return (f"The irreducible-loss model ({settings_text}) took {cost['train_seconds']:.1f} s once, beside the "
          "reducible arm's per-run seconds.")
