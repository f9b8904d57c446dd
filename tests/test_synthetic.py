"""examples/synthetic.py: sine data, the sampler hookup, the trainer, outputs and flagfiles."""

import csv
import pathlib

import numpy as np
import pytest
import tensorflow as tf

import common
import synthetic
import tf_repulsive
from conftest import pairwise_distances

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
RADIUS = synthetic.Config().radius


@pytest.fixture(scope="module")
def data():
  return synthetic.make_data(1500, seed=0)


def test_labels_follow_the_sine_boundary():
  points, labels = synthetic.make_data(4000, seed=3)
  assert points.shape == (4000, 2) and points.dtype == np.float32 and labels.dtype == np.int64
  assert np.all(np.abs(points) <= 1.0)
  expected = points[:, 1] > synthetic.AMPLITUDE * np.sin(np.pi * synthetic.WAVES * points[:, 0])
  np.testing.assert_array_equal(labels, expected.astype(np.int64))
  assert 0.4 < labels.mean() < 0.6
  # Two full waves of amplitude 0.5 on [-1, 1]: a crest at x0 = 0.25, a trough at 0.75, a zero at 0.
  probes = np.array(
      [[0.25, 0.45], [0.25, 0.55], [0.75, -0.55], [0.75, -0.45], [0.0, -0.01], [0.0, 0.01]])
  np.testing.assert_array_equal(synthetic.true_labels(probes), [0, 1, 0, 1, 0, 1])
  np.testing.assert_array_equal(synthetic.make_data(4000, seed=3)[0], points)
  assert not np.array_equal(synthetic.make_data(4000, seed=4)[0], points)


def test_grid_covers_the_domain_evenly():
  grid = synthetic.grid_points(4)
  assert grid.shape == (16, 2)
  np.testing.assert_allclose(np.unique(grid[:, 0]), [-0.75, -0.25, 0.25, 0.75])
  np.testing.assert_allclose(np.unique(grid[:, 1]), [-0.75, -0.25, 0.25, 0.75])


def _batches(points, labels, name, count=5):
  """`count` consecutive batches of one pipeline: `draw_batch`'s, then steps 1.. by `batch_indices`.

  The steps after the first come from a batcher of the same sampler and seed over the same data,
  which draws what `draw_batch`'s pipeline would (a batch is a function of (seed, step)).
  """
  sampler = common.make_sampler(name, radius=RADIUS)
  first, first_labels = synthetic.draw_batch(points, labels, sampler, 30, seed=0)
  batcher = tf_repulsive.repulsive_batch(30, sampler, seed=0, start_step=0)
  tf.data.Dataset.from_tensor_slices((points, labels)).apply(batcher)
  # The batch is the pipeline's draw at step 0, with each point's own label.
  np.testing.assert_array_equal(first, points[batcher.batch_indices(0)])
  np.testing.assert_array_equal(first_labels, synthetic.true_labels(first))
  later = [points[batcher.batch_indices(step)] for step in range(1, count)]
  return batcher, np.stack([first, *later])


def test_vanilla_batches_keep_the_radius_and_uniform_batches_do_not(data):
  points, labels = data
  batcher, batches = _batches(points, labels, "vanilla_pds")
  assert batcher.stats().radius == RADIUS
  for batch in batches:
    assert len(np.unique(batch, axis=0)) == 30
    assert pairwise_distances(batch).min() >= RADIUS
  _, uniform = _batches(points, labels, "uniform")
  assert all(pairwise_distances(batch).min() < RADIUS for batch in uniform)


def test_dense_pds_crowds_the_boundary_and_anneal_pds_starts_away_from_it(data):
  # Dense PDS with uniform pi aims 5/6 of its darts at points with mixed neighbourhoods; Anneal PDS
  # in its first steps draws only points whose neighbours all share their label.
  points, labels = data

  def near_share(name):
    return synthetic.near_boundary(_batches(points, labels, name)[1]).mean()

  uniform = near_share("uniform")
  assert near_share("dense_pds") > max(2 * uniform, 0.25)
  assert near_share("anneal_pds") < uniform


def test_networks_train_independently_and_fit_their_batch(data):
  points, labels = data
  first, second, third = (slice(30 * i, 30 * (i + 1)) for i in range(3))

  def fit(other):
    params = synthetic.fit_networks(np.stack([points[first], points[other]]),
                                    np.stack([labels[first], labels[other]]), seeds=[0, 1],
                                    hidden_units=5, steps=400, learning_rate=0.02)
    return [variable.numpy() for variable in params]

  with_second, with_third = fit(second), fit(third)
  for a, b in zip(with_second, with_third):
    np.testing.assert_allclose(a[0], b[0], rtol=1e-4, atol=1e-5)  # network 0 saw the same batch
    assert not np.allclose(a[1], b[1])
  logits = synthetic.network_logits(with_second, np.stack([points[first], points[second]])).numpy()
  assert np.mean((logits > 0) == np.stack([labels[first], labels[second]])) >= 0.9


def test_train_and_evaluate_writes_figures_and_tables_and_beats_chance(tmp_path):
  config = synthetic.Config(output_dir=str(tmp_path), samplers=("uniform", "vanilla_pds"),
                            repetitions=2, num_points=1000, train_steps=600, grid_size=80)
  accuracies = synthetic.train_and_evaluate(config)
  assert list(accuracies) == ["uniform", "vanilla_pds"]
  for accuracy in accuracies.values():
    assert accuracy.shape == (2,)
    # Chance is 0.5 and flipped labels would give about 0.15; a straight line gets about 0.84.
    assert np.all((accuracy > 0.7) & (accuracy <= 1.0))
  for name in ("synthetic_uniform", "synthetic_vanilla_pds", "synthetic_boundaries"):
    png = (tmp_path / f"{name}.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
  with (tmp_path / "results.csv").open() as handle:
    rows = list(csv.DictReader(handle))
  assert [row["sampler"] for row in rows] == ["uniform", "vanilla_pds"]
  for row in rows:
    assert float(row["mean_accuracy"]) == pytest.approx(accuracies[row["sampler"]].mean(), abs=1e-6)
  with (tmp_path / "repetitions.csv").open() as handle:
    assert len(list(csv.DictReader(handle))) == 4
  assert "vanilla_pds" in (tmp_path / "results.md").read_text()


@pytest.mark.parametrize("name", ["synthetic", "synthetic_smoke"])
def test_flagfiles_parse(name):
  try:
    synthetic.FLAGS(["synthetic", f"--flagfile={CONFIGS / name}.flags"])
    config = synthetic.config_from_flags()
  finally:
    synthetic.FLAGS.unparse_flags()
  assert config.samplers == common.SAMPLER_NAMES
  assert (config.batch_size, config.hidden_units) == (30, 5)
  assert config.repetitions == (30 if name == "synthetic" else 3)
  assert config.output_dir == f"runs/{name}"


def test_bad_config():
  with pytest.raises(ValueError, match="samplers"):
    synthetic.Config(samplers=("uniform", "bogus"))
  with pytest.raises(ValueError, match="num_points"):
    synthetic.Config(num_points=10, batch_size=30)


@pytest.mark.parametrize("text, radius", [("auto", "auto"), ("default", None), ("0.3", 0.3)])
def test_radius_flag_takes_auto_default_or_a_number(text, radius):
  try:
    synthetic.FLAGS(["synthetic", f"--radius={text}"])
    assert synthetic.config_from_flags().radius == radius
  finally:
    synthetic.FLAGS.unparse_flags()


@pytest.mark.parametrize("text", ["-1", "zero", "0"])
def test_bad_radius_flag_names_the_choices(text):
  with pytest.raises(ValueError, match="--radius must be 'default', 'auto' or a number > 0"):
    common.parse_radius(text)
