"""examples/second_comparison: grids that grow to an interior choice, the comparator by validation, matched
baselines, the irreducible-loss model, the load rule, verdicts, and recomputation from packed curves.

The runs are fakes of `train.train_and_evaluate` that write the `eval.csv` a real run writes, with
mistakes that fall linearly at a speed the test sets per sampler and learning rate: the protocol's
bookkeeping runs for real, no model trains. `train.train_and_evaluate` itself is tested in
test_example_mnist_deep.py.
"""

import csv
import math
import pathlib

import numpy as np
import pytest

from examples import common
from examples import settings
from examples.mnist_deep import train
from examples.second_comparison import runner
from examples.selection_protocol import curves as packed_curves

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
EXAMPLES = 100


def _config(**changes):
  settings = dict(dataset="digits", validation_size=100, held_out_size=100, steps=40, eval_every=10,
                  learning_rates=(1e-4, 1e-3, 1e-2), lr_schedules=("constant",), tuning_seeds=(100,),
                  seeds=(0, 1, 2), arms=("rs2", "importance@loss_step+reducible"), resamples=200)
  return runner.ComparisonConfig(**{**settings, **changes})


class FakeTraining:
  """Stands in for train.train_and_evaluate and train.irreducible_loss; records what they were asked."""

  def __init__(self, speed, test_speed=None, other_cores=lambda config, run_dir: 0.05):
    self.speed, self.test_speed, self.other_cores = speed, test_speed or speed, other_cores
    self.trained: list[tuple[train.Config, pathlib.Path]] = []
    self.irreducible: list[train.Config] = []

  def train_and_evaluate(self, config, workdir, verbose=1):
    workdir = pathlib.Path(workdir)
    self.trained.append((config, workdir))
    rows = []
    for step in range(0, config.steps + 1, config.eval_every):
      validation = max(0, round(90 - self.speed(config) * step))
      test = max(0, round(90 - self.test_speed(config) * step))
      seconds = 1.0 + 0.1 * step
      rows.append({"step": step, "train_seconds": seconds, "cpu_seconds": 0.1 * step,
                   "other_cpu_seconds": self.other_cores(config, workdir) * seconds, "load_average": 1.5,
                   "commit": "abc",
                   "test_loss": 0.5, "test_accuracy": 1 - test / EXAMPLES, "test_examples": EXAMPLES,
                   "validation_loss": 0.5, "validation_accuracy": 1 - validation / EXAMPLES,
                   "validation_examples": EXAMPLES})
    workdir.mkdir(parents=True, exist_ok=True)
    with (workdir / "eval.csv").open("w", newline="") as handle:
      writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
      writer.writeheader()
      writer.writerows(rows)
    return [common.with_errors(row) for row in rows]

  def irreducible_loss(self, config, path):
    self.irreducible.append(config)
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.zeros(10))

  def install(self, monkeypatch):
    monkeypatch.setattr(train, "train_and_evaluate", self.train_and_evaluate)
    monkeypatch.setattr(train, "irreducible_loss", self.irreducible_loss)
    return self


def _peaked_at(best_rate):
  """A speed that falls with the distance (in decades) of the learning rate from `best_rate`."""
  return lambda config: 1.0 / (1.0 + abs(math.log10(config.learning_rate / best_rate)))


def test_the_rate_ladder_steps_by_about_3():
  assert [runner.next_rate(rate, 1) for rate in (1e-4, 3e-4, 1e-2, 3e-2)] == [3e-4, 1e-3, 3e-2, 1e-1]
  assert [runner.next_rate(rate, -1) for rate in (1e-4, 3e-4, 1e-2)] == [3e-5, 1e-4, 3e-3]
  assert runner.next_rate(2e-3, 1) == pytest.approx(6e-3)


def test_a_grid_grows_until_its_choice_is_interior(monkeypatch, tmp_path):
  training = FakeTraining(_peaked_at(3e-2)).install(monkeypatch)
  tuned = runner.ConditionProtocol(_config(), tmp_path).tune("uniform", {"sampler": "uniform"}, 40)
  # 1e-2 wins at the top end; 3e-2 is added and wins at the end again; 1e-1 is added and loses.
  assert tuned.label == "lr=0.03,constant" and not tuned.at_end
  assert list(tuned.curves) == [f"lr={rate:g},constant" for rate in (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)]
  # Every config ran once: a grown grid reads its earlier runs back.
  assert sorted(config.learning_rate for config, _ in training.trained) == [1e-4, 1e-3, 1e-2, 3e-2, 1e-1]


def test_a_grid_grows_until_every_schedules_best_rate_is_interior(monkeypatch, tmp_path):
  # Cosine peaks inside the first grid and leads it; constant peaks beyond its top end and, once
  # the grid reaches its peak, wins.
  def speed(config):
    if config.lr_schedule == "cosine":
      return _peaked_at(1e-3)(config)
    return 1.2 * _peaked_at(3e-2)(config)

  FakeTraining(speed).install(monkeypatch)
  tuned = runner.ConditionProtocol(_config(lr_schedules=("constant", "cosine")), tmp_path).tune(
      "uniform", {"sampler": "uniform"}, 40)
  assert [label for label in tuned.curves if label.endswith("cosine")] == [
      f"lr={rate:g},cosine" for rate in (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)]
  assert tuned.label == "lr=0.03,constant" and not tuned.at_end


def test_a_grid_stops_growing_after_its_extensions_and_says_so(monkeypatch, tmp_path):
  # The higher the learning rate, the faster: the top end always wins.
  FakeTraining(lambda config: 1 + math.log10(config.learning_rate / 1e-6) / 10).install(monkeypatch)
  tuned = runner.ConditionProtocol(_config(grid_extensions=2), tmp_path).tune("uniform", {"sampler": "uniform"}, 40)
  assert tuned.label == "lr=0.1,constant" and tuned.at_end
  assert len(tuned.curves) == 5


def test_the_protocol_names_its_comparator_by_validation_and_rules_symmetrically(monkeypatch, tmp_path):
  base = {"uniform": 1.0, "epoch_shuffle": 1.5, "rs2": 3.0, "importance": 0.5}
  # Uniform has the better test curve, epoch shuffling the better validation curve: validation decides.
  test_base = {**base, "uniform": 2.0, "epoch_shuffle": 1.0}
  rate_factor = lambda config: 1.0 if config.learning_rate == 1e-3 else 0.5  # noqa: E731
  workdir = tmp_path / "condition"

  def other_cores(config, run_dir):
    # The first evaluation run of rs2, seed 1, ran beside other work; its second run too. Uniform's
    # runs used just under the ceiling: they stand.
    if run_dir.parts[-4:-2] == ("evaluation", "rs2") and run_dir.name == "seed_1":
      return 0.3
    return 0.09 if config.sampler == "uniform" else 0.0

  training = FakeTraining(lambda config: base[config.sampler] * rate_factor(config),
                          lambda config: test_base[config.sampler] * rate_factor(config),
                          other_cores).install(monkeypatch)
  summary = runner.ConditionProtocol(_config(), workdir).run()
  assert (workdir / "summary.md").read_text() == summary
  assert (workdir / "errors.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert "Comparator: **epoch_shuffle**, lr=0.001,constant." in summary
  # T50: epoch shuffling's mistakes at step 20 (90 - 1.5 x 20); T90: at step 30, the last evaluation by step 36.
  assert "T50 = 60 mistakes (step 20), T90 = 45 mistakes (step 36). Budget S = 20 steps." in summary
  assert "| rs2 | 20 | lr=0.001,constant (chosen) |" in summary
  assert "| matched | 20 | lr=0.001,constant (chosen) |" in summary

  by_dir = {tuple(run_dir.relative_to(workdir).parts[:3]): config for config, run_dir in training.trained}
  matched = by_dir[("evaluation", "matched", "lr=0.001,constant")]
  assert (matched.sampler, matched.steps) == ("epoch_shuffle", 20)
  reducible = by_dir[("evaluation", "importance@loss_step+reducible", "lr=0.001,constant")]
  assert (reducible.sampler, reducible.space) == ("importance", "loss_step")
  assert reducible.irreducible_loss_file == str(workdir / "irreducible" / "losses.npy")
  # The irreducible-loss model trained once, on the comparator's tuned config, with its own seed.
  [irreducible] = training.irreducible
  assert (irreducible.learning_rate, irreducible.steps, irreducible.seed) == (1e-3, 40, 200)
  assert "The irreducible-loss model (40 steps, seed 200, lr=0.001, constant)" in summary

  # rs2 reaches T50 at step 10 and T90 at 20, epoch shuffling at 20 and 30, at 0.1 s a step.
  assert "| rs2 | epoch_shuffle | -1.0 [-1.0, -1.0] | -1.0 [-1.0, -1.0] | 3/3 / 3/3 | helps |" in summary
  # A miss counts one interval past the budget (50 steps) at the slowest seconds per step: the
  # short runs' 3.0 s at step 20, so 7.5 s. The matched baseline misses T90 within its 20 steps.
  assert "A run that misses a target counts at 7.5 s (50 steps)" in summary
  assert "| rs2 | matched | -1.0 [-1.0, -1.0] | -4.5 [-4.5, -4.5] | 3/3 / 3/3 | helps |" in summary
  # The reducible arm misses both; uniform misses T90.
  assert ("| importance@loss_step+reducible | epoch_shuffle | +4.5 [+4.5, +4.5] | +3.5 [+3.5, +3.5] | 0/3 / 0/3 "
          "| hurts |") in summary
  assert ("| uniform | epoch_shuffle | +1.0 [+1.0, +1.0] | +3.5 [+3.5, +3.5] | 3/3 / 0/3 | (hurts: a baseline) |"
          in summary)
  # At the comparator's median seconds at 50% and 100% of the budget: test mistakes, reported.
  assert "| rs2 | 3 | 10 (3/3) | 2.0 | 20 (3/3) | 3.0 | 30 | 30 | 3.0 ± 0.0 |" in summary
  assert not any(line.startswith("| importance@loss_step+reducible | matched") for line in summary.splitlines())

  # The run beside other work was moved aside and ran once more; the second run stands though
  # beside other work too. No other run ran twice.
  loaded = workdir / "evaluation" / "rs2" / "lr=0.001,constant"
  assert (loaded / "seed_1.loaded" / "eval.csv").exists() and (loaded / "seed_1" / "eval.csv").exists()
  assert sum(run_dir == loaded / "seed_1" for _, run_dir in training.trained) == 2
  assert [path.parent for path in workdir.rglob("*.loaded/eval.csv")] == [loaded / "seed_1.loaded"]

  # The choices were written before the first evaluation run.
  assert (workdir / "choices.md").read_text() in summary

  # Packed and unpacked elsewhere, the curves give the same tables with no training.
  # Both budgets: the short runs end at S.
  text, runs = packed_curves.pack(workdir, (40, 20))
  assert runs == len(training.trained) == len(list(workdir.rglob("eval.csv")))
  copy = tmp_path / "unpacked"
  assert packed_curves.unpack(text, copy) == runs
  (copy / "irreducible").mkdir()
  (copy / "irreducible" / "cost.json").write_text((workdir / "irreducible" / "cost.json").read_text())
  trained = len(training.trained)
  assert runner.ConditionProtocol(_config(), copy).run() == summary
  assert len(training.trained) == trained and len(training.irreducible) == 1


def _drop_column(path, name):
  with path.open(newline="") as handle:
    rows = list(csv.DictReader(handle))
  with path.open("w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=[column for column in rows[0] if column != name])
    writer.writeheader()
    writer.writerows({column: value for column, value in row.items() if column != name} for row in rows)


def test_runs_without_a_newer_column_pack_beside_runs_with_it(tmp_path):
  training = FakeTraining(lambda config: 1.0)
  older, newer = tmp_path / "tuning" / "older", tmp_path / "tuning" / "newer"
  for run_dir in (older, newer):
    training.train_and_evaluate(_config(), run_dir)
  _drop_column(older / "eval.csv", "other_cpu_seconds")
  text, runs = packed_curves.pack(tmp_path, 40)
  assert runs == 2 and text.splitlines()[0].split(",")[:5] == [
      "run", "step", "train_seconds", "cpu_seconds", "other_cpu_seconds"]
  copy = tmp_path.parent / "unpacked"
  assert packed_curves.unpack(text, copy) == 2
  for run_dir in (older, newer):
    twin = copy / run_dir.relative_to(tmp_path) / "eval.csv"
    assert twin.read_bytes() == (run_dir / "eval.csv").read_bytes()
  # A run without the column counts as beside no other work; one with it, by its mean cores.
  assert runner.other_cores(common.read_evaluations(older / "eval.csv")) == 0.0
  assert runner.other_cores(common.read_evaluations(newer / "eval.csv")) == pytest.approx(0.05)

  # Columns in another order are not one table.
  with (older / "eval.csv").open() as handle:
    lines = handle.read().splitlines()
  (older / "eval.csv").write_text("\n".join(",".join(reversed(line.split(","))) for line in lines) + "\n")
  with pytest.raises(ValueError, match="not, in order, among the other runs'"):
    packed_curves.pack(tmp_path, 40)


def test_bad_protocols():
  with pytest.raises(ValueError, match="validation_size"):
    _config(validation_size=0)
  with pytest.raises(ValueError, match="must not share a seed"):
    _config(tuning_seeds=(1,), seeds=(1, 2))
  with pytest.raises(ValueError, match="ascend"):
    _config(learning_rates=(1e-3, 1e-4))
  with pytest.raises(ValueError, match="under one evaluation interval"):
    _config(short_share=0.1)
  with pytest.raises(ValueError, match="held_out_size"):
    _config(held_out_size=0)
  assert _config(held_out_size=0, arms=("rs2",)).short_steps == 20


@pytest.mark.parametrize("name", ["mnist1d", "mnist1d_40k", "mnist", "smoke"])
def test_flagfiles_parse_into_the_protocol(example_main, name):
  example_main("examples.second_comparison.main", f"--flagfile={CONFIGS / f'second_comparison_{name}.flags'}")
  config = settings.config_from_flags(runner.ComparisonConfig)
  assert config.short_steps == {"mnist1d": 2800, "mnist1d_40k": 5600, "mnist": 1000, "smoke": 20}[name]
