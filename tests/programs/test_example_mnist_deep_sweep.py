"""examples/mnist_deep_sweep: the mean ± std table, and a sweep that resumes from finished runs."""

import csv
import pathlib

import numpy as np
import pytest

from examples import common
from examples import settings
from examples.mnist_deep_sweep import sweep

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


def _curve(errors, seconds_per_step=0.1):
  return [{"step": step, "train_seconds": seconds_per_step * step, "test_error": error}
          for step, error in zip((0, 100, 200), errors)]


def test_an_error_exactly_at_the_target_reaches_it_as_a_count_of_mistakes():
  # An accuracy of exactly 95% in float32, as Keras reports it: 1 - it is above 0.05 in float64.
  accuracy = float(np.float32(0.95))
  assert 100 * (1 - accuracy) > 5.0
  at_target = common.with_errors({"step": 100, "test_accuracy": accuracy, "test_examples": 10_000})
  assert common.error_at_most(at_target, 5.0)
  assert sweep.first_at_target([at_target], 5.0) is at_target
  # One mistake more does not reach it; one fewer does.
  for mistakes, reached in ((501, False), (499, True)):
    row = common.with_errors({"step": 100, "test_accuracy": float(np.float32(1 - mistakes / 10_000)),
                              "test_examples": 10_000})
    assert common.error_at_most(row, 5.0) is reached, mistakes
  # A curve recorded without the count: the same boundary, within float32's rounding.
  without_count = common.with_errors({"step": 100, "test_accuracy": accuracy})
  assert common.error_at_most(without_count, 5.0)
  assert not common.error_at_most(common.with_errors({"test_accuracy": float(np.float32(0.9499))}), 5.0)
  # A target computed in floats counts as the number it stands for.
  ninety = common.with_errors({"test_accuracy": 0.9, "test_examples": 1000})
  assert common.error_at_most(ninety, 100 * (1 - 0.9))


def test_summary_reports_mean_and_std_per_sampler_and_the_steps_and_seconds_to_the_target():
  table = sweep.summarize(
      {"uniform": [_curve([0.9, 0.2, 0.1]), _curve([0.9, 0.4, 0.3])],
       "vanilla_pds": [_curve([0.9, 0.1, 0.05], 0.3), _curve([0.9, 0.15, 0.05], 0.2)]}, (100,), target_error=15.0)
  lines = table.splitlines()
  assert lines[0] == ("| sampler | seeds | error @ 100 | error @ 200 | best-of-curve error | steps to 15% error, "
                      "per seed | train seconds to 15% (seeds) | paired Δ curve-mean error vs uniform (seeds below) |")
  assert lines[2] == "| uniform | 2 | 30.00 ± 10.00 | 20.00 ± 10.00 | 20.00 ± 10.00 | 200, — | 20.0 ± 0.0 (1/2) | — |"
  # Curve means: uniform 40.00 and 53.33, vanilla 35.00 and 36.67: differences -5.00 and -16.67.
  assert lines[3] == ("| vanilla_pds | 2 | 12.50 ± 2.50 | 5.00 ± 0.00 | 5.00 ± 0.00 | 100, 100 | 25.0 ± 5.0 (2/2) | "
                      "-10.83 ± 5.83 (2/2) |")


def test_the_sweep_takes_the_runs_flagfile_and_its_grid(example_main):
  example_main("examples.mnist_deep_sweep.main", f"--flagfile={CONFIGS / 'mnist_deep_digits.flags'}",
               "--samplers=uniform,anneal_pds", "--seeds=3,4", "--report_steps=500")
  config = settings.config_from_flags(sweep.SweepConfig)
  assert (config.samplers, config.seeds, config.report_steps, config.steps) == (
      ("uniform", "anneal_pds"), (3, 4), (500,), 1500)
  run = config.run("anneal_pds", 4)
  assert (run.sampler, run.seed, run.steps, run.eval_every) == ("anneal_pds", 4, 1500, 50)


def test_finished_runs_are_read_not_retrained(example_main, tmp_path, capsys):
  # eval.csv files as finished runs of the flagfile's 1500 steps leave nothing to train.
  for sampler, accuracy in (("uniform", 0.9), ("vanilla_pds", 0.95)):
    for seed in (0, 1):
      run_dir = tmp_path / sampler / f"seed_{seed}"
      run_dir.mkdir(parents=True)
      with (run_dir / "eval.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "test_loss", "test_accuracy"])
        writer.writerows([step, 0.5, accuracy + 0.01 * seed] for step in range(0, 1501, 50))
  program = example_main("examples.mnist_deep_sweep.main", f"--flagfile={CONFIGS / 'mnist_deep_digits.flags'}",
                         "--samplers=uniform,vanilla_pds", "--seeds=0,1", f"--workdir={tmp_path}")
  program.main(["main"])
  assert capsys.readouterr().out.count("(finished earlier") == 4
  lines = (tmp_path / "summary.md").read_text().splitlines()
  # Curves without train seconds (written before they were recorded) have no seconds to the target.
  assert lines[2].startswith("| uniform | 2 | " + "9.50 ± 0.50 | " * 5 + "—, — | — |")
  assert lines[3].endswith("| -5.00 ± 0.00 (2/2) |")
  assert (tmp_path / "curves.png").stat().st_size > 0


def test_bad_grid():
  with pytest.raises(ValueError, match="--samplers: 'bogus' is not one of"):
    sweep.SweepConfig(samplers=("uniform", "bogus"))
