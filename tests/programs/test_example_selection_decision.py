"""The second comparison's decision rule: comparator and targets on validation, counts, a symmetric verdict."""

import numpy as np
import pytest

from examples.selection_protocol import decision

EXAMPLES = 500


def _run(mistakes, seconds_per_step=0.1, eval_every=100):
  """A curve evaluated every `eval_every` steps from step 0, with these validation mistakes."""
  return [{"step": step, "train_seconds": seconds_per_step * step, "validation_examples": EXAMPLES,
           # float32 makes 25 of 500 mistakes 0.04999999888241291, not 0.05.
           "validation_error": float(np.float32(count / EXAMPLES))}
          for step, count in zip(range(0, eval_every * len(mistakes), eval_every), mistakes)]


def test_mistakes_are_exact_counts_even_where_float32_rounds_the_error():
  for count in range(EXAMPLES + 1):
    assert decision.mistakes(_run([count])[0]) == count
  with pytest.raises(ValueError, match="validation_examples"):
    decision.mistakes({"step": 0, "validation_error": 0.1})


def test_an_evaluation_exactly_at_the_target_reaches_it():
  run = _run([100, 40, 25, 20])
  assert decision.seconds_to(run, 25, (400.0, 40.0)) == (200.0, 20.0, True)
  assert decision.seconds_to(run, 24, (400.0, 40.0)) == (300.0, 30.0, True)
  assert decision.seconds_to(run, 10, (400.0, 40.0)) == (400.0, 40.0, False)


def test_a_run_that_misses_a_target_counts_slower_than_every_run_that_reaches_it():
  # B = 500 steps. The comparator reaches 25 mistakes at step 400 (40 s). A run of budget S = 300
  # at half the seconds per step never does: counted at the slowest run's 0.1 s a step, at 600 steps.
  short = _run([100, 60, 40, 30], seconds_per_step=0.05)
  comparator = [_run([100, 60, 40, 30, 25, 20]) for _ in range(10)]
  censored_at = decision.censored([short, *comparator], eval_every=100, budget_steps=500)
  assert censored_at == (600.0, pytest.approx(60.0))
  result = decision.compare("short", [short] * 10, "uniform", comparator, (40, 25), censored_at, resamples=1000)
  assert result.median_seconds == (-10.0, pytest.approx(20.0)) and result.reached == (10, 0)
  assert result.verdict == "no difference shown"
  # Two misses tie.
  assert decision.compare("short", [short] * 10, "short", [short] * 10, (25, 25), censored_at,
                          resamples=1000).median_seconds == (0.0, 0.0)


def test_the_comparator_is_the_baseline_with_the_lower_validation_score():
  tuned = {"uniform": [_run([100, 50, 40]), _run([100, 52, 38])],
           "epoch_shuffle": [_run([100, 45, 30]), _run([100, 47, 33])]}
  assert decision.comparator(tuned) == "epoch_shuffle"
  # A tie in the curve mean goes to the lower last mistakes, then to the order.
  assert decision.comparator({"a": [_run([60, 40])], "b": [_run([70, 30])]}) == "b"
  assert decision.comparator({"a": [_run([60, 40])], "b": [_run([60, 40])]}) == "a"


def test_targets_are_the_comparators_median_mistakes_at_half_and_nine_tenths_of_the_budget():
  # Budget 1,000 steps: 50% is step 500, 90% step 900 (the last evaluation at or before: 900).
  runs = [_run([200, 90, 70, 60, 50, 40, 35, 30, 28, 26, 25]),
          _run([200, 95, 75, 62, 52, 45, 36, 31, 29, 27, 24]),
          _run([200, 99, 80, 70, 54, 47, 40, 33, 30, 28, 23])]
  assert decision.targets(runs, 1000) == (45, 27)
  # An even number of runs: the median between two counts rounds down, the stricter target.
  assert decision.targets(runs[:2], 1000) == (42, 26)
  # Evaluated every 300 steps: the last evaluation at or before step 500 is step 300's.
  sparse = [[row for row in run if row["step"] % 300 == 0] for run in runs]
  assert decision.targets(sparse, 1000) == (62, 27)


def test_the_verdict_is_symmetric_and_needs_both_targets():
  assert decision.verdict([(-5.0, -1.0), (-3.0, -0.5)]) == "helps"
  assert decision.verdict([(1.0, 5.0), (0.5, 3.0)]) == "hurts"
  assert decision.verdict([(-5.0, -1.0), (-3.0, 0.5)]) == "no difference shown"
  assert decision.verdict([(1.0, 5.0), (-0.5, 3.0)]) == "no difference shown"
  assert decision.verdict([(-5.0, -1.0), (1.0, 3.0)]) == "no difference shown"


def test_an_arm_that_reaches_both_targets_sooner_on_every_seed_helps():
  # Ten paired seeds: the arm reaches 40 and 25 mistakes one evaluation earlier, at equal seconds per step.
  comparator = [_run([100, 60, 40, 30, 25, 20]) for _ in range(10)]
  arm = [_run([100, 40, 30, 25, 20, 18]) for _ in range(10)]
  censored_at = decision.censored([*arm, *comparator], eval_every=100, budget_steps=500)
  result = decision.compare("arm", arm, "uniform", comparator, (40, 25), censored_at, resamples=1000)
  assert result.median_seconds == (-10.0, -10.0) and result.reached == (10, 10)
  assert result.verdict == "helps"
  # Twice as slow per step: as soon at T50, 20 s later at T90. Hurting, as helping, needs both targets.
  slow = [_run([100, 40, 30, 25, 20, 18], seconds_per_step=0.2) for _ in range(10)]
  result = decision.compare("slow", slow, "uniform", comparator, (40, 25), censored_at, resamples=1000)
  assert result.median_seconds == (0.0, 20.0) and result.verdict == "no difference shown"
  with pytest.raises(ValueError, match="pairing needs one run of each"):
    decision.compare("arm", arm[:9], "uniform", comparator, (40, 25), censored_at)
