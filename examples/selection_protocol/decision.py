"""The decision rule of docs/results/second_comparison_protocol.md, on finished curves: no training.

A curve is a run's evaluation rows (`common.PeriodicEvaluation`'s `eval.csv`, read by
`sweep.read_curve`), each with "step", "train_seconds", "validation_error" and, where recorded,
"validation_examples". Errors are compared as counts of mistakes.

1. The comparator is the baseline with the lower tuning score (`score`).
2. The targets T50 and T90 are the comparator's validation mistakes at 50% and 90% of the step
   budget: the median over its tuning seeds of the mistakes at the last evaluation at or before
   those steps (`targets`).
3. An arm's seconds to a target are the train seconds to the first evaluation whose validation
   mistakes are at most the target. A run that never reaches it counts at the condition's
   censoring point (`censored`): one evaluation interval past the step budget B, at the slowest
   run's seconds per step, so a miss is slower than every run that reaches the target and two
   misses tie (`seconds_to`).
4. Per arm, the paired per-seed differences in seconds (arm minus comparator) at each target,
   their median and its 95% bootstrap interval. The arm helps when the interval lies below zero
   at both targets, hurts when it lies above zero at both, and otherwise no difference is shown
   (`verdict`).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

Curve = list[dict[str, float]]

TARGET_SHARES = (0.5, 0.9)


def mistakes(row: Mapping[str, float], prefix: str = "validation") -> int:
  """The `prefix` ("validation" or "test") mistakes of an evaluation row: round(error × examples), an integer.

  Raises:
    ValueError: for a row without "<prefix>_examples" (a curve recorded without the count
      cannot be compared as counts).
  """
  examples = row.get(f"{prefix}_examples")
  if examples is None or not np.isfinite(examples):
    raise ValueError(f"an evaluation row without {prefix}_examples (step {row.get('step')}): the rule compares "
                     "counts of mistakes; rerun with a PeriodicEvaluation that records them.")
  return round(row[f"{prefix}_error"] * examples)


def score(runs: Sequence[Curve]) -> tuple[float, float]:
  """A config's tuning score: (mean over runs of the curve-mean mistakes, mean last mistakes); lower is better."""
  if not runs:
    raise ValueError("a config without tuning runs has no score.")
  return (float(np.mean([np.mean([mistakes(row) for row in run]) for run in runs])),
          float(np.mean([mistakes(run[-1]) for run in runs])))


def comparator(tuned: Mapping[str, Sequence[Curve]]) -> str:
  """Of the tuned baselines (name -> the tuning runs of its chosen config), the one with the lower `score`.

  Ties go to the first in order.
  """
  if not tuned:
    raise ValueError("no tuned baseline to name as the comparator.")
  return min(tuned, key=lambda name: score(tuned[name]))


def mistakes_at(run: Curve, step: float) -> int:
  """The validation mistakes at the last evaluation at or before `step`."""
  rows = [row for row in run if row["step"] <= step]
  if not rows:
    raise ValueError(f"a run has no evaluation at or before step {step:g}.")
  return mistakes(rows[-1])


def targets(comparator_runs: Sequence[Curve], budget_steps: int) -> tuple[int, ...]:
  """T50 and T90: the median over the comparator's tuning runs of its mistakes at 50% and 90% of the budget.

  A median of an even number of runs between two counts is rounded down (the stricter target).
  """
  if not comparator_runs:
    raise ValueError("the comparator has no tuning runs to set the targets from.")
  return tuple(int(np.floor(np.median([mistakes_at(run, share * budget_steps) for run in comparator_runs])))
               for share in TARGET_SHARES)


def censored(runs: Sequence[Curve], eval_every: int, budget_steps: int) -> tuple[float, float]:
  """The (steps, train seconds) at which a run that never reaches a target counts.

  One evaluation interval past the step budget B, at the slowest seconds per step of `runs`
  (every evaluation run of the condition): the largest of their train seconds at their end,
  scaled to B plus one interval. Every run that reaches a target does so within its own end, so
  a miss counts slower than any reach, whatever the budgets (a run of budget S < B included).
  """
  if not runs:
    raise ValueError("no runs to set the censoring point from.")
  steps = float(budget_steps + eval_every)
  return steps, max(float(run[-1]["train_seconds"]) * steps / max(float(run[-1]["step"]), 1.0) for run in runs)


def seconds_to(run: Curve, target: int, censored_at: tuple[float, float]) -> tuple[float, float, bool]:
  """(steps, train seconds, reached) at the first evaluation with at most `target` mistakes, else `censored_at`."""
  for row in run:
    if mistakes(row) <= target:
      return float(row["step"]), float(row["train_seconds"]), True
  return (*censored_at, False)


def bootstrap_median_interval(differences: np.ndarray, resamples: int, seed: int = 0) -> tuple[float, float]:
  """The 95% percentile bootstrap interval of the median of paired differences (resampling seeds)."""
  rng = np.random.default_rng(seed)
  medians = np.median(rng.choice(differences, size=(resamples, len(differences)), replace=True), axis=1)
  return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def verdict(intervals: Sequence[tuple[float, float]]) -> str:
  """"helps" if every interval (one per target) lies below zero, "hurts" if every one lies above, else no difference."""
  if all(high < 0 for _, high in intervals):
    return "helps"
  if all(low > 0 for low, _ in intervals):
    return "hurts"
  return "no difference shown"


@dataclasses.dataclass(frozen=True)
class Comparison:
  """An arm against the comparator at both targets.

  Attributes:
    arm: the arm's name.
    against: the baseline it is paired with.
    median_seconds: per target, the median of the paired differences in seconds (arm minus it).
    intervals: per target, the 95% bootstrap interval of that median.
    reached: per target, how many of the arm's runs reached it.
    verdict: "helps", "hurts" or "no difference shown".
  """

  arm: str
  against: str
  median_seconds: tuple[float, ...]
  intervals: tuple[tuple[float, float], ...]
  reached: tuple[int, ...]
  verdict: str


def compare(arm: str, runs: Sequence[Curve], against: str, baseline_runs: Sequence[Curve],
            target_mistakes: Sequence[int], censored_at: tuple[float, float], resamples: int = 10000) -> Comparison:
  """The paired comparison of `runs` (one per evaluation seed) with `baseline_runs` (the same seeds, in order).

  `censored_at` is the condition's `censored` point, over every evaluation run.
  """
  if len(runs) != len(baseline_runs) or not runs:
    raise ValueError(f"{arm} has {len(runs)} runs and {against} {len(baseline_runs)}: pairing needs one run of "
                     "each per evaluation seed.")
  medians, intervals, reached = [], [], []
  for target in target_mistakes:
    arm_seconds = [seconds_to(run, target, censored_at) for run in runs]
    baseline_seconds = np.array([seconds_to(run, target, censored_at)[1] for run in baseline_runs])
    differences = np.array([seconds for _, seconds, _ in arm_seconds]) - baseline_seconds
    medians.append(float(np.median(differences)))
    intervals.append(bootstrap_median_interval(differences, resamples))
    reached.append(sum(hit for _, _, hit in arm_seconds))
  return Comparison(arm, against, tuple(medians), tuple(intervals), tuple(reached), verdict(intervals))
