"""The Deep-MNIST example end to end on tiny data: digits, and tfds mock MNIST (never downloads)."""

import csv
import pathlib

import numpy as np
import pytest
import tensorflow_datasets as tfds

import mnist_deep

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


def test_digits_run_learns_and_writes_its_outputs(tmp_path):
  config = mnist_deep.Config(sampler="anneal_pds", steps=40, eval_every=20, output_dir=str(tmp_path))
  curve = mnist_deep.train_and_evaluate(config, verbose=0)
  assert [row["step"] for row in curve] == [0, 20, 40]
  assert curve[-1]["test_error"] < 0.5 < curve[0]["test_error"]  # chance is 0.9
  with (tmp_path / "eval.csv").open() as handle:
    rows = list(csv.DictReader(handle))
  assert [int(row["step"]) for row in rows] == [0, 20, 40]
  np.testing.assert_allclose(float(rows[-1]["test_accuracy"]), curve[-1]["test_accuracy"])
  assert (tmp_path / "eval.png").stat().st_size > 0
  assert list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))


def test_digits_are_upsampled_with_a_fixed_split():
  x_train, y_train, x_test, y_test = mnist_deep.load_digits_28x28(0.5)
  assert x_train.shape[1:] == (28, 28, 1) and x_test.shape[1:] == (28, 28, 1)
  assert 0.0 <= x_train.min() and x_train.max() <= 1.0
  assert len(y_test) == 540 and len(y_train) == 628
  again = mnist_deep.load_digits_28x28(0.5)
  np.testing.assert_array_equal(again[3], y_test)


def test_mnist_from_tfds_mock_data(tmp_path):
  with tfds.testing.mock_data(num_examples=120):
    config = mnist_deep.Config(dataset="mnist", sampler="vanilla_pds", steps=4, eval_every=2,
                               output_dir=str(tmp_path))
    curve = mnist_deep.train_and_evaluate(config, verbose=0)
  assert [row["step"] for row in curve] == [0, 2, 4]
  assert all(np.isfinite(row["test_loss"]) for row in curve)


def test_missing_mnist_fails_fast_with_instructions(tmp_path):
  with pytest.raises(SystemExit, match="--dataset=digits"):
    mnist_deep.load_mnist(str(tmp_path), 0.5)


@pytest.mark.parametrize("name", ["mnist_deep_smoke", "mnist_deep_digits", "mnist_deep_mnist"])
def test_flagfiles_parse(name):
  try:
    mnist_deep.FLAGS(["mnist_deep", f"--flagfile={CONFIGS / name}.flags", "--sampler=dense_pds"])
    config = mnist_deep.config_from_flags()
  finally:
    mnist_deep.FLAGS.unparse_flags()
  assert config.sampler == "dense_pds" and config.batch_size == 50


def test_bad_config():
  with pytest.raises(ValueError, match="train_fraction"):
    mnist_deep.Config(train_fraction=0.0)


@pytest.mark.parametrize("sampler", ["kdpp", "active_bias"])
def test_baselines_run_through_the_example(tmp_path, sampler):
  config = mnist_deep.Config(sampler=sampler, steps=30, eval_every=15, train_fraction=0.2,
                             output_dir=str(tmp_path))
  curve = mnist_deep.train_and_evaluate(config, verbose=0)
  assert [row["step"] for row in curve] == [0, 15, 30]
  # The sweep resumes from the run's eval.csv only when it reached the configured steps.
  import mnist_deep_sweep
  read_back = mnist_deep_sweep.finished_curve(tmp_path, 30)
  assert [row["step"] for row in read_back] == [0, 15, 30]
  for row, expected in zip(read_back, curve):
    assert row["test_error"] == pytest.approx(expected["test_error"])
  assert mnist_deep_sweep.finished_curve(tmp_path, 45) is None


def test_sweep_summary_reports_mean_and_std_per_sampler():
  import mnist_deep_sweep

  def curve(errors):
    return [{"step": step, "test_error": error} for step, error in zip((0, 100, 200), errors)]

  table = mnist_deep_sweep.summarize(
      {"uniform": [curve([0.9, 0.2, 0.1]), curve([0.9, 0.4, 0.3])],
       "vanilla_pds": [curve([0.9, 0.1, 0.05]), curve([0.9, 0.1, 0.15])]}, [100])
  lines = table.splitlines()
  assert lines[0] == ("| sampler | seeds | error @ 100 | error @ 200 | best-of-curve error | paired Δ curve-mean "
                      "error vs uniform (seeds below) |")
  assert lines[2] == "| uniform | 2 | 30.00 ± 10.00 | 20.00 ± 10.00 | 20.00 ± 10.00 | — |"
  # Curve means: uniform 40.00 and 53.33, vanilla 35.00 and 38.33: differences -5.00 and -15.00.
  assert lines[3] == "| vanilla_pds | 2 | 10.00 ± 0.00 | 10.00 ± 5.00 | 7.50 ± 2.50 | -10.00 ± 5.00 (2/2) |"
