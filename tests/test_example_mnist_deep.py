"""examples/mnist_deep: the program from its flagfiles, and the library on tiny data (digits, tfds mock MNIST)."""

import csv
import pathlib

import numpy as np
import pytest
import tensorflow_datasets as tfds

from examples import settings
from examples.mnist_deep import train
from examples.mnist_deep_sweep import sweep

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


def test_smoke_flagfile_run_learns_and_writes_its_outputs(example_main, tmp_path, capsys):
  program = example_main("examples.mnist_deep.main", f"--flagfile={CONFIGS / 'mnist_deep_smoke.flags'}",
                         "--steps=40", "--eval_every=20", f"--workdir={tmp_path}")
  program.main(["main"])
  with (tmp_path / "eval.csv").open() as handle:
    rows = list(csv.DictReader(handle))
  assert [int(row["step"]) for row in rows] == [0, 20, 40]
  errors = [1.0 - float(row["test_accuracy"]) for row in rows]
  assert errors[-1] < 0.5 < errors[0]  # chance is 0.9
  assert f"final test error {errors[-1]:.4f} after 40 steps" in capsys.readouterr().out
  assert (tmp_path / "eval.png").stat().st_size > 0
  assert list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))


def test_digits_are_upsampled_with_a_fixed_split():
  x_train, y_train, x_test, y_test = train.load_digits_28x28(0.5)
  assert x_train.shape[1:] == (28, 28, 1) and x_test.shape[1:] == (28, 28, 1)
  assert 0.0 <= x_train.min() and x_train.max() <= 1.0
  assert len(y_test) == 540 and len(y_train) == 628
  again = train.load_digits_28x28(0.5)
  np.testing.assert_array_equal(again[3], y_test)


def test_mnist_from_tfds_mock_data(tmp_path):
  with tfds.testing.mock_data(num_examples=120):
    config = train.Config(dataset="mnist", sampler="vanilla_pds", steps=4, eval_every=2)
    curve = train.train_and_evaluate(config, tmp_path, verbose=0)
  assert [row["step"] for row in curve] == [0, 2, 4]
  assert all(np.isfinite(row["test_loss"]) for row in curve)


def test_missing_mnist_fails_fast_with_instructions(tmp_path):
  with pytest.raises(SystemExit, match="--dataset=digits"):
    train.load_mnist(str(tmp_path), 0.5)


@pytest.mark.parametrize("name", ["mnist_deep_smoke", "mnist_deep_digits", "mnist_deep_mnist"])
def test_flagfiles_parse(example_main, name):
  example_main("examples.mnist_deep.main", f"--flagfile={CONFIGS / name}.flags", "--sampler=dense_pds")
  config = settings.config_from_flags(train.Config)
  assert config.sampler == "dense_pds" and config.batch_size == 50


def test_bad_config():
  with pytest.raises(ValueError, match="train_fraction"):
    train.Config(train_fraction=0.0)


@pytest.mark.parametrize("sampler", ["kdpp", "active_bias"])
def test_baselines_run_through_the_example(tmp_path, sampler):
  config = train.Config(sampler=sampler, steps=30, eval_every=15, train_fraction=0.2)
  curve = train.train_and_evaluate(config, tmp_path, verbose=0)
  assert [row["step"] for row in curve] == [0, 15, 30]
  # The sweep resumes from the run's eval.csv only when it reached the configured steps.
  read_back = sweep.finished_curve(tmp_path, 30)
  assert [row["step"] for row in read_back] == [0, 15, 30]
  for row, expected in zip(read_back, curve):
    assert row["test_error"] == pytest.approx(expected["test_error"])
  assert sweep.finished_curve(tmp_path, 45) is None
