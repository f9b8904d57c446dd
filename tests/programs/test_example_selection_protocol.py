"""examples/selection_protocol: arms, tuning on validation, paired statistics, resume from finished runs."""

import csv
import pathlib

from absl import flags
import numpy as np
import pytest

from examples import settings
from examples.selection_protocol import curves
from examples.selection_protocol import protocol

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


def test_arms_are_parsed_from_their_names():
  arms = protocol.parse_arms("vanilla_pds@gradient, uniform, easy_pds@loss+weighted")
  assert [arm.name for arm in arms] == ["vanilla_pds@gradient", "uniform", "easy_pds@loss+weighted"]
  assert [protocol.arm_changes(arm) for arm in arms][2] == {"sampler": "easy_pds", "space": "loss",
                                                            "inclusion_weights": "self_normalized"}
  assert [arm.refreshes for arm in arms] == [True, False, True]
  assert protocol.parse_arms("") is None
  with pytest.raises(ValueError, match="unknown sampler 'bogus'"):
    protocol.parse_arms("bogus@gradient")
  with pytest.raises(ValueError, match="unknown space 'pixels'"):
    protocol.parse_arms("vanilla_pds@pixels")
  with pytest.raises(ValueError, match="named twice"):
    protocol.parse_arms("uniform,uniform")


def test_bad_protocols():
  with pytest.raises(ValueError, match="validation_size"):
    protocol.ProtocolConfig()
  with pytest.raises(ValueError, match="must not share a seed"):
    protocol.ProtocolConfig(validation_size=10, tuning_seeds=(1, 2), seeds=(2, 3))
  with pytest.raises(ValueError, match="repeats a baseline"):
    protocol.ProtocolConfig(validation_size=10, arms=protocol.parse_arms("uniform"))


def test_round_robin_rotates_the_order_by_seed():
  assert [protocol.rotated("abc", by) for by in range(4)] == [
      list("abc"), list("bca"), list("cab"), list("abc")]


def _write_run(run_dir, validation, test, seconds_per_step=0.1, steps=(0, 20, 40, 60)):
  """A finished run's eval.csv: validation and test errors per evaluation."""
  run_dir.mkdir(parents=True)
  with (run_dir / "eval.csv").open("w", newline="") as handle:
    writer = csv.writer(handle)
    writer.writerow(["step", "train_seconds", "test_loss", "test_accuracy", "validation_loss", "validation_accuracy"])
    for step, v, t in zip(steps, validation, test):
      writer.writerow([step, seconds_per_step * step + 1.0, 0.5, 1.0 - t, 0.5, 1.0 - v])


def test_tuning_chooses_on_validation_and_finished_runs_are_read(example_main, tmp_path, capsys):
  # lr=0.001 has the lower validation error, lr=0.0001 the lower test error: validation decides.
  tuning = {"lr=0.0001,constant": ([0.9, 0.5, 0.4, 0.3], [0.9, 0.2, 0.1, 0.05]),
            "lr=0.001,constant": ([0.9, 0.3, 0.2, 0.1], [0.9, 0.5, 0.4, 0.3])}
  for baseline in ("uniform", "epoch_shuffle"):
    for label, (validation, test) in tuning.items():
      for seed in (100, 101):
        _write_run(tmp_path / "tuning" / baseline / label / f"seed_{seed}", validation, test)
  # R=20 of the arm has the lower validation error.
  for interval, validation in ((20, [0.9, 0.2, 0.1, 0.05]), (40, [0.9, 0.5, 0.4, 0.3])):
    for seed in (100, 101):
      _write_run(tmp_path / "refresh" / "vanilla_pds@gradient" / f"R={interval}" / f"seed_{seed}",
                 validation, validation)
  # Evaluation: the arm reaches 20% test error at step 20 on both seeds, uniform at 40, epoch
  # shuffling never; the arm's steps cost twice as much.
  evaluation = {"uniform/lr=0.001,constant": ([0.9, 0.3, 0.15, 0.1], 0.1),
                "epoch_shuffle/lr=0.001,constant": ([0.9, 0.5, 0.4, 0.3], 0.1),
                "vanilla_pds@gradient/lr=0.001,constant,R=20": ([0.9, 0.15, 0.1, 0.05], 0.2)}
  for directory, (test, seconds_per_step) in evaluation.items():
    for seed in (0, 1):
      _write_run(tmp_path / "evaluation" / directory / f"seed_{seed}", test, test, seconds_per_step)
  program = example_main("examples.selection_protocol.main",
                         f"--flagfile={CONFIGS / 'selection_protocol_smoke.flags'}", "--refresh_intervals=20,40",
                         "--target_errors=50,20",
                         f"--workdir={tmp_path}")
  program.main(["main"])
  out = capsys.readouterr().out
  # 2 baselines x 2 configs x 2 seeds, 2 intervals x 2 seeds, 3 x 2 evaluations: nothing trained.
  assert out.count("(finished earlier") == 8 + 4 + 6
  summary = (tmp_path / "summary.md").read_text()
  assert "| uniform | lr=0.001,constant (chosen) | 37.50 | 10.00 |" in summary
  assert "| uniform | lr=0.0001,constant | 52.50 | 30.00 |" in summary
  assert "| vanilla_pds@gradient | R=20 (chosen) |" in summary
  assert "The arms run at uniform's learning rate and schedule: lr=0.001,constant." in summary
  # Steps and seconds to 20%: uniform at step 40 (5.0 s), the arm at 20 (5.0 s), epoch shuffling
  # never: censored at one interval past its end, 80 steps and 7.0 x 80 / 60 s.
  assert "| uniform | 2 | 20 (2/2) | 3.0 | 40 (2/2) | 5.0 | 10.00 ± 0.00 |" in summary
  assert "| epoch_shuffle | 2 | 20 (2/2) | 3.0 | 80 (0/2) | 9.3 |" in summary
  assert "| vanilla_pds@gradient | 2 | 20 (2/2) | 5.0 | 20 (2/2) | 5.0 |" in summary
  # Paired against uniform (the fastest baseline) at 20%: no seconds gained, 20 steps fewer.
  assert ("| vanilla_pds@gradient | uniform (best) | 20% | +0.0 [+0.0, +0.0] | 0/0, p = 1.000 | -20 [-20, -20] "
          "| no difference shown |") in summary
  assert "| vanilla_pds@gradient | epoch_shuffle | 20% | -4.3 [-4.3, -4.3] | 2/2, p = 0.500 |" in summary
  # Final test errors: the arm 5%, uniform 10%, epoch shuffling 30%.
  assert "| vanilla_pds@gradient | uniform | -5.00 [-5.00, -5.00] | -5.00 | 0/2 |" in summary
  assert "| epoch_shuffle | uniform | +20.00 [+20.00, +20.00] | +20.00 | 2/2 |" in summary

  # Packed into one CSV and unpacked elsewhere, the runs come back byte for byte and give the same
  # summary without training; a run still training is not packed.
  _write_run(tmp_path / "evaluation" / "uniform/lr=0.001,constant" / "seed_2", [0.9, 0.5], [0.9, 0.5], steps=(0, 20))
  text, runs = curves.pack(tmp_path, 60)
  assert runs == 18
  copy = tmp_path.parent / "unpacked"
  assert curves.unpack(text, copy) == 18 and curves.unpack(text, copy) == 0
  for path in tmp_path.rglob("eval.csv"):
    twin = copy / path.relative_to(tmp_path)
    assert twin.exists() == (path.parent.name != "seed_2")
    assert not twin.exists() or twin.read_bytes() == path.read_bytes()
  flags.FLAGS.workdir = str(copy)
  program.main(["main"])
  assert capsys.readouterr().out.count("(finished earlier") == 8 + 4 + 6
  assert (copy / "summary.md").read_text() == summary
  with pytest.raises(ValueError, match="first column must be `run`"):
    curves.unpack("step,test_accuracy\n0,0.1\n", copy)
  with pytest.raises(ValueError, match="not a directory inside the workdir"):
    curves.unpack("run,step\n../elsewhere,0\n", copy)


def test_paired_statistics():
  differences = np.array([-3.0, -2.0, -1.0, -4.0, -5.0, -2.0, -3.0, -1.0, -2.0, 1.0])
  assert protocol.sign_test(differences)[:2] == (9, 10)
  assert protocol.sign_test(differences)[2] == pytest.approx(22 / 1024)
  low, high = protocol.bootstrap_median_interval(differences, 2000)
  assert low <= np.median(differences) <= high < 0
  assert protocol.verdict((low, high)) == "faster"
  assert protocol.verdict((-1.0, 2.0)) == "no difference shown" and protocol.verdict((0.5, 2.0)) == "slower"
  run = [{"step": 0, "train_seconds": 1.0, "test_error": 0.9}, {"step": 20, "train_seconds": 3.0, "test_error": 0.4},
         {"step": 40, "train_seconds": 5.0, "test_error": 0.3}]
  assert protocol.to_target(run, 40.0, 20) == (20.0, 3.0, True)
  assert protocol.to_target(run, 10.0, 20) == (60.0, 7.5, False)
  assert protocol.error_within_seconds(run, 4.0) == pytest.approx(40.0)
  assert protocol.error_within_seconds(run, 0.5) == pytest.approx(90.0)


@pytest.mark.parametrize("name", ["selection_protocol_smoke", "selection_protocol_mnist", "selection_protocol_mnist1d"])
def test_flagfiles_parse(example_main, name):
  example_main("examples.selection_protocol.main", f"--flagfile={CONFIGS / name}.flags")
  config = settings.config_from_flags(protocol.ProtocolConfig)
  assert config.validation_size > 0 and config.radius == "auto"
  assert not set(config.tuning_seeds) & set(config.seeds)
  if name != "selection_protocol_smoke":
    assert len(config.seeds) >= 10 and len(config.tuning_seeds) == 3 and len(protocol.grid(config)) == 8
