"""examples/synthetic: sine data, the sampler hookup, the trainer, the program from its flagfiles."""

import csv
import pathlib

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from examples import common
from examples import settings
from examples.synthetic import train as synthetic
import tf_repulsive
from conftest import pairwise_distances

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_example_synthetic")]

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
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


@pytest.fixture(scope="module")
def pipeline(data):
  """Sampler name -> its batcher over the data (seed 0) and the points of its batches at steps 0-4."""
  points, labels = data
  built = {}

  def batches(name):
    if name not in built:
      batcher = tf_repulsive.repulsive_batch(30, common.make_sampler(name, radius=RADIUS), seed=0, start_step=0)
      tf.data.Dataset.from_tensor_slices((points, labels)).apply(batcher)
      built[name] = batcher, np.stack([points[batcher.batch_indices(step)] for step in range(5)])
    return built[name]

  return batches


def test_the_drawn_batch_is_the_pipelines_first(data, pipeline):
  points, labels = data
  batch_points, batch_labels = synthetic.draw_batch(points, labels, common.make_sampler("vanilla_pds", radius=RADIUS),
                                                    30, seed=0)
  # A batch is a function of (seed, step): draw_batch's own pipeline yields step 0 of this one.
  np.testing.assert_array_equal(batch_points, pipeline("vanilla_pds")[1][0])
  np.testing.assert_array_equal(batch_labels, synthetic.true_labels(batch_points))


def test_vanilla_batches_keep_the_radius_and_uniform_batches_do_not(pipeline):
  batcher, batches = pipeline("vanilla_pds")
  assert batcher.stats().report["radius"] == RADIUS
  for batch in batches:
    assert len(np.unique(batch, axis=0)) == 30
    assert pairwise_distances(batch).min() >= RADIUS
  assert all(pairwise_distances(batch).min() < RADIUS for batch in pipeline("uniform")[1])


def test_dense_pds_crowds_the_boundary_and_anneal_pds_starts_away_from_it(pipeline):
  # Dense PDS with uniform pi aims 5/6 of its darts at points with mixed neighbourhoods; Anneal PDS
  # in its first steps draws only points whose neighbours all share their label.
  def near_share(name):
    return synthetic.near_boundary(pipeline(name)[1]).mean()

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


def test_smoke_flagfile_run_writes_figures_and_tables_and_beats_chance(example_main, tmp_path):
  program = example_main("examples.synthetic.main", f"--flagfile={CONFIGS / 'synthetic_smoke.flags'}",
                         "--samplers=uniform,vanilla_pds", "--repetitions=2", f"--workdir={tmp_path}")
  program.main(["main"])
  with (tmp_path / "repetitions.csv").open() as handle:
    repetitions = list(csv.DictReader(handle))
  assert [(row["sampler"], row["repetition"]) for row in repetitions] == [
      ("uniform", "0"), ("uniform", "1"), ("vanilla_pds", "0"), ("vanilla_pds", "1")]
  accuracies = np.array([float(row["accuracy"]) for row in repetitions])
  # Chance is 0.5 and flipped labels would give about 0.15; a straight line gets about 0.84.
  assert np.all((accuracies > 0.7) & (accuracies <= 1.0))
  for name in ("synthetic_uniform", "synthetic_vanilla_pds", "synthetic_boundaries"):
    png = (tmp_path / f"{name}.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
  with (tmp_path / "results.csv").open() as handle:
    rows = list(csv.DictReader(handle))
  assert [row["sampler"] for row in rows] == ["uniform", "vanilla_pds"]
  for row, pair in zip(rows, (accuracies[:2], accuracies[2:])):
    assert float(row["mean_accuracy"]) == pytest.approx(pair.mean(), abs=1e-6)
  assert "| vanilla_pds |" in (tmp_path / "results.md").read_text()


def test_regression_run_trains_on_the_noisy_step_and_marks_the_step(example_main, tmp_path, monkeypatch):
  drawn = []
  original = synthetic.draw_batch

  def recording(points, targets, sampler, batch_size, seed):
    drawn.append((targets, sampler))
    return original(points, targets, sampler, batch_size, seed)

  monkeypatch.setattr(synthetic, "draw_batch", recording)
  program = example_main("examples.synthetic.main", f"--flagfile={CONFIGS / 'synthetic_smoke.flags'}",
                         "--samplers=uniform,easy_pds", "--repetitions=2", "--task=regression",
                         f"--workdir={tmp_path}")
  program.main(["main"])
  targets, sampler = drawn[-1]
  assert targets.dtype == np.float32 and 0.05 < np.std(targets - np.round(targets)) < 0.15
  assert sampler.target_gap_quantile == 0.9 and sampler.label_kind == "target"
  with (tmp_path / "repetitions.csv").open() as handle:
    accuracies = np.array([float(row["accuracy"]) for row in csv.DictReader(handle)])
  # The regression output thresholded at 0.5: a straight line gets about 0.84, chance 0.5.
  assert np.all((accuracies > 0.7) & (accuracies <= 1.0))
  assert "regression (noise 0.1" in (tmp_path / "results.md").read_text()


@pytest.mark.parametrize("name", ["synthetic", "synthetic_smoke", "synthetic_regression"])
def test_flagfiles_parse(example_main, name, monkeypatch):
  monkeypatch.chdir(CONFIGS.parent)  # a flagfile names the one it extends from the repository root
  example_main("examples.synthetic.main", f"--flagfile={CONFIGS / name}.flags")
  config = settings.config_from_flags(synthetic.Config)
  assert config.samplers == common.SAMPLER_NAMES
  assert (config.batch_size, config.hidden_units, config.radius) == (30, 5, 0.2)
  assert config.repetitions == (3 if name == "synthetic_smoke" else 30)
  assert config.task == ("regression" if name == "synthetic_regression" else "classification")
  assert flags.FLAGS.workdir == f"runs/{name}"


def test_bad_config():
  with pytest.raises(ValueError, match="samplers"):
    synthetic.Config(samplers=("uniform", "bogus"))
  with pytest.raises(ValueError, match="num_points"):
    synthetic.Config(num_points=10, batch_size=30)
