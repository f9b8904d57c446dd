"""examples/fine_grained: data, sampling space, flagfiles, and the program run from its smoke flagfile."""

import csv
import pathlib
import subprocess
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from examples import settings
from examples.fine_grained import train

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow

_REPO = pathlib.Path(__file__).resolve().parents[2]


def test_features_are_unit_norm_and_the_split_is_fixed():
  x_train, y_train, x_test, y_test = train.load_data()
  assert x_train.shape == (1257, 64) and x_test.shape == (540, 64)
  np.testing.assert_allclose(np.linalg.norm(x_train, axis=1), 1.0, rtol=1e-5)
  np.testing.assert_array_equal(y_test, train.load_data()[3])
  # Stratified: every class has 30% of its digits in the test split, to one digit.
  counts = np.bincount(np.concatenate([y_train, y_test]))
  assert np.all(np.abs(np.bincount(y_test) - 0.3 * counts) <= 1)


def test_sampling_space_weights_image_and_label():
  image = tf.constant([0.6, 0.8])
  features = train.sampling_features(0.7)(image, tf.constant(3, tf.int64)).numpy()
  np.testing.assert_allclose(features[:2], [0.18, 0.24], rtol=1e-6)
  np.testing.assert_allclose(features[2:], 0.7 * np.eye(10)[3])


@pytest.mark.parametrize("name", ["fine_grained", "fine_grained_smoke"])
def test_flagfiles_parse(example_main, name):
  example_main("examples.fine_grained.main", f"--flagfile={_REPO / 'configs' / name}.flags")
  config = settings.config_from_flags(train.Config)
  assert config.label_weight == 0.7 and config.radius is None and "vanilla_pds" in config.samplers
  assert flags.FLAGS.workdir == f"runs/{name}"


def test_report_epochs_must_lie_within_the_epochs():
  with pytest.raises(ValueError, match="--report_epochs must lie in"):
    train.Config(epochs=2, report_epochs=(1, 3))


def test_smoke_flagfile_runs_as_a_program_and_pairs_with_uniform(tmp_path):
  # The one test that starts a program as the README does, `python -m` from the repository root.
  done = subprocess.run(
      [sys.executable, "-m", "examples.fine_grained.main", "--flagfile=configs/fine_grained_smoke.flags",
       f"--workdir={tmp_path}", "--radius=auto"], cwd=_REPO, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  with open(tmp_path / "results.csv") as handle:
    rows = list(csv.DictReader(handle))
  # Two samplers, one seed, two epochs (the smoke flagfile).
  assert [(row["sampler"], row["epoch"]) for row in rows] == [
      ("uniform", "1"), ("uniform", "2"), ("vanilla_pds", "1"), ("vanilla_pds", "2")]
  # After two epochs of SGD at this rate a softmax on digits is well above chance (0.1).
  assert min(float(row["test_accuracy"]) for row in rows if row["epoch"] == "2") > 0.2
  summary = (tmp_path / "results.md").read_text()
  assert "| 80 | vanilla_pds |" in summary and summary in done.stdout
  assert "(0/1)" in summary or "(1/1)" in summary  # the paired difference to uniform
