"""Adaptive batch selection against tuned baselines: tuning on validation, paired seeds, seconds to a target.

The protocol of docs/results/adaptive_density.md, on the Deep-MNIST runs of examples/mnist_deep
(its `train.Config` fields are the shared settings, so its flagfiles apply):

1. Tuning. Each baseline sampler (`baselines`) runs every learning rate x schedule of the grid
   with the tuning seeds. The config with the lowest mean validation error over the curve (mean
   over the tuning seeds; ties to the lower last validation error, then the grid's order) is that
   baseline's. The test set plays no part.
2. Refresh interval. Each arm that draws in a model space runs every R of `refresh_intervals`
   with the tuning seeds, at the learning rate and schedule of the best tuned baseline; R is
   chosen by the same validation score.
3. Evaluation. The tuned baselines and the arms run with every evaluation seed. Per seed, all of
   them run one after another in one process, in an order rotated by one from seed to seed, so
   that the machine's load falls on all alike.
4. Summary. Per arm: steps and train seconds to each target test error, the test error at the
   step budget and at a budget of seconds, and per-seed paired differences against each tuned
   baseline: the median, its 95% bootstrap interval and a two-sided sign test. The test error
   at the step budget is paired the same way, as a report beside the decision rule.

Every run writes into its own directory under the workdir (`tuning/`, `refresh/`, `evaluation/`);
a run whose `eval.csv` reached the step budget is read, not rerun, so the protocol resumes.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Sequence

import numpy as np
from scipy import stats

from examples import common
from examples import settings
from examples.mnist_deep import train
from examples.mnist_deep_sweep import sweep

Curve = list[dict[str, float]]


@dataclasses.dataclass(frozen=True)
class Arm:
  """A way of drawing batches: a sampler of examples/common.py, the space it draws in, weighted or not."""

  sampler: str
  space: str = "input"
  weighted: bool = False

  @property
  def name(self) -> str:
    """The arm as written in --arms: `sampler[@space][+weighted]`."""
    return self.sampler + (f"@{self.space}" if self.space != "input" else "") + ("+weighted" * self.weighted)

  @property
  def refreshes(self) -> bool:
    """Whether the arm draws in a model space, refreshed every R steps."""
    return self.space != "input"


def parse_arms(text: str) -> tuple[Arm, ...] | None:
  """--arms: comma-separated `sampler[@space][+weighted]`, e.g. `importance@gradient+weighted`; None if empty.

  The sampler is a name of `common.TRAINING_SAMPLER_NAMES`, the space one of `common.SPACES`
  (default "input"), and "+weighted" weights each element by 1 / its inclusion probability, scaled
  to average 1 per batch (`inclusion_weights="self_normalized"`).
  """
  arms = []
  for item in filter(None, (part.strip() for part in text.split(","))):
    body, weighted = (item[:-len("+weighted")], True) if item.endswith("+weighted") else (item, False)
    sampler, _, space = body.partition("@")
    space = space or "input"
    if sampler not in common.TRAINING_SAMPLER_NAMES:
      raise ValueError(f"--arms: unknown sampler {sampler!r} in {item!r}; choose from "
                       f"{', '.join(common.TRAINING_SAMPLER_NAMES)}.")
    if space not in common.SPACES:
      raise ValueError(f"--arms: unknown space {space!r} in {item!r}; choose from {', '.join(common.SPACES)}.")
    arms.append(Arm(sampler, space, weighted))
  if len({arm.name for arm in arms}) != len(arms):
    raise ValueError(f"--arms: an arm is named twice in {text!r}.")
  return tuple(arms) or None


@dataclasses.dataclass(frozen=True)
class ProtocolConfig(train.Config):
  """The settings every run shares (a Deep-MNIST config) and the protocol's grids, seeds and targets."""

  baselines: tuple[str, ...] = settings.setting(
      ("uniform", "epoch_shuffle"), "Baseline samplers, each tuned over --learning_rates x --lr_schedules.",
      choices=common.TRAINING_SAMPLER_NAMES)
  learning_rates: tuple[float, ...] = settings.setting((3e-5, 1e-4, 3e-4, 1e-3), "Learning rates of the tuning grid.",
                                                       greater_than=0.0)
  lr_schedules: tuple[str, ...] = settings.setting(("constant", "cosine"), "Schedules of the tuning grid.",
                                                   choices=train.LR_SCHEDULES)
  tuning_seeds: tuple[int, ...] = settings.setting((100, 101, 102),
                                                   "Seeds of the tuning runs (none an evaluation seed).")
  arms: tuple[Arm, ...] | None = settings.setting(
      "", "Arms compared with the tuned baselines, `sampler[@space][+weighted]`, comma-separated; they run at "
      "the best tuned baseline's learning rate and schedule.", parse=parse_arms)
  refresh_intervals: tuple[int, ...] = settings.setting(
      (100, 400), "Candidate refresh intervals R of the arms in a model space, chosen on validation.", minimum=1)
  seeds: tuple[int, ...] = settings.setting(tuple(range(10)), "Evaluation seeds, paired across arms.")
  target_errors: tuple[float, ...] = settings.setting((5.0, 4.0), "Target test errors (%).", greater_than=0.0)
  budget_seconds: float = settings.setting(
      0.0, "Budget of train seconds at which the test error is reported; 0: the median over the evaluation "
      "seeds of the best tuned baseline's train seconds at the step budget.", minimum=0.0)
  resamples: int = settings.setting(10000, "Bootstrap resamples of the paired medians' intervals.", minimum=100)

  def __post_init__(self):
    super().__post_init__()
    if not self.validation_size:
      raise ValueError("The protocol tunes on a validation set: set --validation_size > 0.")
    if set(self.tuning_seeds) & set(self.seeds):
      raise ValueError("--tuning_seeds and --seeds must not share a seed.")
    if {arm.name for arm in self.arms or ()} & set(self.baselines):
      raise ValueError("--arms repeats a baseline; the baselines are always evaluated.")


@dataclasses.dataclass(frozen=True)
class Choice:
  """A tuned or chosen config: its label, the changes to the shared config, its validation score."""

  label: str
  changes: dict
  score: float


def validation_score(runs: Sequence[Curve]) -> tuple[float, float]:
  """(mean over runs of the curve-mean validation error, mean last validation error): lower is better."""
  return (float(np.mean([np.mean([row["validation_error"] for row in run]) for run in runs])),
          float(np.mean([run[-1]["validation_error"] for run in runs])))


def best(candidates: dict[str, Sequence[Curve]]) -> str:
  """The candidate whose runs have the lowest `validation_score`; the first such in order on ties."""
  return min(candidates, key=lambda name: validation_score(candidates[name]))


def grid(config: ProtocolConfig) -> dict[str, dict]:
  """The tuning grid: label `lr=<rate>,<schedule>` -> its changes to the shared config."""
  return {f"lr={rate:g},{schedule}": {"learning_rate": rate, "lr_schedule": schedule}
          for rate in config.learning_rates for schedule in config.lr_schedules}


def arm_changes(arm: Arm) -> dict:
  """The shared config's fields an arm sets."""
  return {"sampler": arm.sampler, "space": arm.space,
          "inclusion_weights": "self_normalized" if arm.weighted else None}


def rotated(items: Sequence, by: int) -> list:
  """`items` started at index `by` (mod its length): the round-robin order of a seed."""
  by %= len(items)
  return [*items[by:], *items[:by]]


def run_all(config: ProtocolConfig, jobs: dict[str, dict], seeds: Sequence[int],
            workdir: pathlib.Path) -> dict[str, list[Curve]]:
  """Every job (label -> changes of the shared config) with every seed, in rotated round-robin order.

  A job's runs go to `workdir/<label>/seed_<seed>/`; finished ones are read back.
  """
  curves: dict[str, list[Curve]] = {label: [] for label in jobs}
  for index, seed in enumerate(seeds):
    for label in rotated(list(jobs), index):
      run = sweep.run_config(config, **jobs[label], seed=seed)
      curves[label].append(sweep.run_or_read(run, workdir / label / f"seed_{seed}", f"{label}, seed {seed}"))
  return curves


def tune(config: ProtocolConfig, workdir: pathlib.Path) -> tuple[dict[str, Choice], dict[str, dict[str, Curve]]]:
  """Step 1: each baseline's best grid config on validation. Returns the choices and every tuning curve."""
  jobs = {f"{baseline}/{label}": {"sampler": baseline, **changes}
          for baseline in config.baselines for label, changes in grid(config).items()}
  curves = run_all(config, jobs, config.tuning_seeds, workdir / "tuning")
  choices, by_baseline = {}, {}
  for baseline in config.baselines:
    by_baseline[baseline] = {label: curves[f"{baseline}/{label}"] for label in grid(config)}
    chosen = best(by_baseline[baseline])
    choices[baseline] = Choice(chosen, {"sampler": baseline, **grid(config)[chosen]},
                               validation_score(by_baseline[baseline][chosen])[0])
  return choices, by_baseline


def choose_refresh(config: ProtocolConfig, reference: dict, workdir: pathlib.Path
                   ) -> tuple[dict[str, Choice], dict[str, dict[str, Curve]]]:
  """Step 2: each refreshing arm's R on validation, at the `reference` learning rate and schedule."""
  refreshing = [arm for arm in config.arms or () if arm.refreshes]
  jobs = {f"{arm.name}/R={interval}": {**reference, **arm_changes(arm), "refresh_every": interval}
          for arm in refreshing for interval in config.refresh_intervals}
  # With one candidate there is nothing to choose: no tuning runs.
  curves = run_all(config, jobs, config.tuning_seeds, workdir / "refresh") if len(config.refresh_intervals) > 1 else {}
  choices, by_arm = {}, {}
  for arm in config.arms or ():
    if not arm.refreshes:
      choices[arm.name] = Choice("—", {**reference, **arm_changes(arm)}, float("nan"))
      continue
    chosen, score = f"R={config.refresh_intervals[0]}", float("nan")
    if curves:
      by_arm[arm.name] = {f"R={interval}": curves[f"{arm.name}/R={interval}"] for interval in config.refresh_intervals}
      chosen = best(by_arm[arm.name])
      score = validation_score(by_arm[arm.name][chosen])[0]
    interval = int(chosen.removeprefix("R="))
    choices[arm.name] = Choice(chosen, {**reference, **arm_changes(arm), "refresh_every": interval}, score)
  return choices, by_arm


def censored(run: Curve, eval_every: int) -> tuple[float, float]:
  """The (steps, train seconds) a run that never reached a target is counted at: one interval past its end."""
  last = run[-1]
  return float(last["step"] + eval_every), last["train_seconds"] * (last["step"] + eval_every) / max(last["step"], 1)


def to_target(run: Curve, target_error: float, eval_every: int) -> tuple[float, float, bool]:
  """(steps, train seconds, reached) at the first evaluation at or below `target_error` (%), else `censored`."""
  row = sweep.first_at_target(run, target_error)
  if row is None:
    return (*censored(run, eval_every), False)
  return float(row["step"]), row["train_seconds"], True


def error_within_seconds(run: Curve, seconds: float) -> float:
  """The test error (%) of the last evaluation within `seconds` of training (the first if none is)."""
  within = [row for row in run if row["train_seconds"] <= seconds] or run[:1]
  return 100 * within[-1]["test_error"]


def sign_test(differences: np.ndarray) -> tuple[int, int, float]:
  """(count below 0, count not 0, two-sided exact sign-test p) of paired differences."""
  below, nonzero = int(np.sum(differences < 0)), int(np.sum(differences != 0))
  p = stats.binomtest(below, nonzero, 0.5).pvalue if nonzero else 1.0
  return below, nonzero, float(p)


def bootstrap_median_interval(differences: np.ndarray, resamples: int, seed: int = 0) -> tuple[float, float]:
  """The 95% percentile bootstrap interval of the median of paired differences (resampling seeds)."""
  rng = np.random.default_rng(seed)
  medians = np.median(rng.choice(differences, size=(resamples, len(differences)), replace=True), axis=1)
  return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def verdict(interval: tuple[float, float]) -> str:
  """The decision rule on the interval of a difference (arm - baseline; < 0 is faster)."""
  if interval[1] < 0:
    return "faster"
  return "slower" if interval[0] > 0 else "no difference shown"


def _paired(curves: dict[str, list[Curve]], baselines: Sequence[str]) -> list[tuple[str, str]]:
  """(label, baseline) for every evaluated label against every other tuned baseline with as many seeds."""
  return [(label, baseline) for label in curves for baseline in baselines
          if label != baseline and len(curves[label]) == len(curves[baseline])]


def summarize(config: ProtocolConfig, curves: dict[str, list[Curve]], baselines: Sequence[str]) -> str:
  """The evaluation's tables (markdown): per arm, paired against each tuned baseline per target, and
  the test error at the step budget paired against each tuned baseline.

  `curves` maps each evaluated label (the baselines first) to its runs in the order of `config.seeds`.
  """
  last_seconds = {label: np.median([run[-1]["train_seconds"] for run in runs]) for label, runs in curves.items()}
  best_baseline = min(baselines, key=lambda label: last_seconds[label])
  budget = config.budget_seconds or float(last_seconds[best_baseline])
  header = ["arm", "seeds"]
  for target in config.target_errors:
    header += [f"steps to {target:g}%, median (reached)", f"seconds to {target:g}%, median"]
  header += [f"test error @ {config.steps} steps", f"test error @ {budget:.0f} s", "train seconds, all steps"]
  rows = []
  for label, runs in curves.items():
    cells = [label, str(len(runs))]
    for target in config.target_errors:
      reached = [to_target(run, target, config.eval_every) for run in runs]
      cells += [f"{np.median([r[0] for r in reached]):.0f} ({sum(r[2] for r in reached)}/{len(runs)})",
                f"{np.median([r[1] for r in reached]):.1f}"]
    cells += [common.mean_std_text([100 * run[-1]["test_error"] for run in runs], digits=2),
              common.mean_std_text([error_within_seconds(run, budget) for run in runs], digits=2),
              common.mean_std_text([run[-1]["train_seconds"] for run in runs], digits=1)]
    rows.append(cells)
  tables = [common.markdown_table(header, rows)]

  paired_header = ["arm", "vs", "target", "Δ seconds, median [95% CI]", "faster seeds, sign-test p",
                   "Δ steps, median [95% CI]", "verdict on seconds"]
  paired_rows = []
  for target in config.target_errors:
    # The best tuned baseline at this target: the lowest median seconds to it.
    seconds = {label: np.array([to_target(run, target, config.eval_every)[1] for run in runs])
               for label, runs in curves.items()}
    steps = {label: np.array([to_target(run, target, config.eval_every)[0] for run in runs])
             for label, runs in curves.items()}
    fastest = min(baselines, key=lambda label: np.median(seconds[label]))
    for label, baseline in _paired(curves, baselines):
      d_seconds, d_steps = seconds[label] - seconds[baseline], steps[label] - steps[baseline]
      ci_seconds = bootstrap_median_interval(d_seconds, config.resamples)
      ci_steps = bootstrap_median_interval(d_steps, config.resamples)
      below, nonzero, p = sign_test(d_seconds)
      best_mark = " (best)" if baseline == fastest else ""
      paired_rows.append([
          label, baseline + best_mark, f"{target:g}%",
          f"{np.median(d_seconds):+.1f} [{ci_seconds[0]:+.1f}, {ci_seconds[1]:+.1f}]",
          f"{below}/{nonzero}, p = {p:.3f}",
          f"{np.median(d_steps):+.0f} [{ci_steps[0]:+.0f}, {ci_steps[1]:+.0f}]",
          verdict(ci_seconds) if baseline == fastest else ""])
  if paired_rows:
    tables.append(common.markdown_table(paired_header, paired_rows))

  # Reported, not decided on: the test error each seed ends with, against each baseline's.
  error_rows = []
  for label, baseline in _paired(curves, baselines):
    d_error = np.array([100 * (run[-1]["test_error"] - base[-1]["test_error"])
                        for run, base in zip(curves[label], curves[baseline], strict=True)])
    ci_error = bootstrap_median_interval(d_error, config.resamples)
    error_rows.append([label, baseline, f"{np.median(d_error):+.2f} [{ci_error[0]:+.2f}, {ci_error[1]:+.2f}]",
                       f"{np.mean(d_error):+.2f}", f"{int(np.sum(d_error > 0))}/{len(d_error)}"])
  if error_rows:
    tables.append(f"Test error at {config.steps} steps, paired per seed (reported; the decision rule is on seconds):")
    tables.append(common.markdown_table(
        ["arm", "vs", "Δ test error (points), median [95% CI]", "Δ mean", "seeds with a higher error"], error_rows))
  return "\n\n".join(tables)


def choice_table(kind: str, choices: dict[str, Choice], candidates: dict[str, dict[str, list[Curve]]]) -> str:
  """Markdown: every candidate's validation score (mean curve-mean validation error, %), the chosen marked."""
  rows = []
  for name, by_label in candidates.items():
    for label, runs in by_label.items():
      mark = " (chosen)" if choices[name].label == label else ""
      curve_mean, last = validation_score(runs)
      rows.append([name, label + mark, f"{100 * curve_mean:.2f}", f"{100 * last:.2f}"])
  return common.markdown_table([kind, "config", "curve-mean validation error (%)", "last validation error (%)"], rows)


def run_protocol(config: ProtocolConfig, workdir: str | pathlib.Path) -> str:
  """Tunes, chooses R, evaluates and summarises; writes `summary.md` into `workdir`.

  Returns:
    The summary (markdown).
  """
  workdir = pathlib.Path(workdir)
  tuned, tuning_curves = tune(config, workdir)
  best_baseline = min(tuned, key=lambda name: tuned[name].score)
  reference = {key: tuned[best_baseline].changes[key] for key in ("learning_rate", "lr_schedule")}
  arms, refresh_curves = choose_refresh(config, reference, workdir)
  # A run's directory names its config, so that a changed choice is run anew, not read back.
  chosen = {**tuned, **arms}
  directories = {name: f"{name}/{choice.label}" for name, choice in tuned.items()}
  directories.update({name: f"{name}/{tuned[best_baseline].label}" + ("" if choice.label == "—" else f",{choice.label}")
                      for name, choice in arms.items()})
  ran = run_all(config, {directories[name]: choice.changes for name, choice in chosen.items()}, config.seeds,
                workdir / "evaluation")
  curves = {name: ran[directories[name]] for name in chosen}
  parts = [
      "## Tuned baselines (validation)", choice_table("baseline", tuned, tuning_curves),
      f"The arms run at {best_baseline}'s learning rate and schedule: {tuned[best_baseline].label}.",
  ]
  if refresh_curves:
    parts += ["## Refresh interval (validation)", choice_table("arm", arms, refresh_curves)]
  parts += ["## Evaluation (test)", summarize(config, curves, list(tuned))]
  summary = "\n\n".join(parts) + "\n"
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / "summary.md").write_text(summary)
  return summary
