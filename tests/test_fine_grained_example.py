"""The fine-grained (Oxford Flowers) stand-in: data, sampling space, a smoke run from its flagfile."""

import copy
import csv
import pathlib

import numpy as np
import pytest
import tensorflow as tf

import fine_grained

_REPO = pathlib.Path(__file__).resolve().parents[1]


def test_features_are_unit_norm_and_the_split_is_fixed():
  x_train, y_train, x_test, y_test = fine_grained.load_data()
  assert x_train.shape == (1257, 64) and x_test.shape == (540, 64)
  np.testing.assert_allclose(np.linalg.norm(x_train, axis=1), 1.0, rtol=1e-5)
  np.testing.assert_array_equal(y_test, fine_grained.load_data()[3])
  # Stratified: every class has 30% of its digits in the test split, to one digit.
  counts = np.bincount(np.concatenate([y_train, y_test]))
  assert np.all(np.abs(np.bincount(y_test) - 0.3 * counts) <= 1)


def test_sampling_space_weights_image_and_label():
  image = tf.constant([0.6, 0.8])
  features = fine_grained.sampling_features(0.7)(image, tf.constant(3, tf.int64)).numpy()
  np.testing.assert_allclose(features[:2], [0.18, 0.24], rtol=1e-6)
  np.testing.assert_allclose(features[2:], 0.7 * np.eye(10)[3])


@pytest.mark.parametrize("name", ["fine_grained.flags", "fine_grained_smoke.flags"])
def test_flagfiles_parse(name, monkeypatch):
  flag_values = copy.deepcopy(fine_grained.FLAGS)
  flag_values(["fine_grained", f"--flagfile={_REPO / 'configs' / name}"])
  monkeypatch.setattr(fine_grained, "FLAGS", flag_values)
  config = fine_grained.config_from_flags()
  assert config.label_weight == 0.7 and config.radius is None and "vanilla_pds" in config.samplers


def test_smoke_run_writes_curves_and_pairs_with_uniform(tmp_path, monkeypatch):
  flag_values = copy.deepcopy(fine_grained.FLAGS)
  flag_values(["fine_grained", f"--flagfile={_REPO / 'configs' / 'fine_grained_smoke.flags'}",
               f"--output_dir={tmp_path}", "--radius=auto"])
  monkeypatch.setattr(fine_grained, "FLAGS", flag_values)
  config = fine_grained.config_from_flags()
  rows = fine_grained.train_and_evaluate(config)
  assert len(rows) == len(config.samplers) * config.seeds * config.epochs
  with open(tmp_path / "results.csv") as handle:
    assert len(list(csv.DictReader(handle))) == len(rows)
  for row in rows:
    assert 0.0 <= row["test_accuracy"] <= 1.0
  # After two epochs of SGD at this rate a softmax on digits is well above chance (0.1).
  assert min(row["test_accuracy"] for row in rows if row["epoch"] == 2) > 0.2
  summary = (tmp_path / "results.md").read_text()
  assert "| 80 | vanilla_pds |" in summary
  assert "(0/1)" in summary or "(1/1)" in summary  # the paired difference to uniform
