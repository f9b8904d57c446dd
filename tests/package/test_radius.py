"""radius="auto": the largest radius at which the darts fill the batch, calibrated on the data."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _dart_blocks
from conftest import check_auto_radius
from conftest import draw_steps


def _sine_boundary(seed=0):
  """The paper's synthetic set (figure 4): 3000 points in [-1, 1]^2 split by a sine."""
  points = np.random.default_rng(seed).uniform(-1, 1, (3000, 2)).astype(np.float32)
  return points, (points[:, 1] > 0.5 * np.sin(2 * np.pi * points[:, 0])).astype(np.int64)


@pytest.mark.slow
@pytest.mark.parametrize("sampler", [tf_repulsive.VanillaPDS(radius="auto"), tf_repulsive.EasyPDS(radius="auto"),
                                     tf_repulsive.AnnealPDS(radius="auto")], ids=lambda s: type(s).__name__)
def test_auto_radius_fills_the_batch_on_the_sine_boundary_where_the_default_does_not(sampler):
  x, y = _sine_boundary()
  batcher, batches = draw_steps(x, y, 30, sampler)
  check_auto_radius(batcher, batches, sampler)
  if not isinstance(sampler, tf_repulsive.EasyPDS):
    with pytest.warns(RuntimeWarning, match="filled only"):
      default, _ = draw_steps(x, y, 30, type(sampler)(), steps=20)
    assert default.stats().fallback_batches > 10
    assert batcher.stats().report["radius"] < default.stats().report["radius"]


@pytest.mark.slow
@pytest.mark.parametrize("sampler", [tf_repulsive.VanillaPDS(radius="auto"), tf_repulsive.AnnealPDS(radius="auto")],
                         ids=lambda s: type(s).__name__)
def test_auto_radius_fills_the_batch_on_the_digits(digits, sampler):
  x, y = digits
  batcher, batches = draw_steps(x, y, 50, sampler)
  check_auto_radius(batcher, batches, sampler)


def test_auto_radius_is_a_property_of_the_data_not_of_the_seed(digits):
  x, y = digits
  radii = {tf_repulsive.repulsive_batch(50, tf_repulsive.VanillaPDS(radius="auto"), seed=seed, start_step=0,
                                        options=tf_repulsive.BatcherOptions(verbose=False))
           for seed in (0, 1)}
  values = set()
  for batcher in radii:
    tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
    values.add(batcher.stats().report["radius"])
  assert len(values) == 1


@pytest.mark.slow
def test_the_calibration_and_the_batches_outside_the_pipeline_share_one_trace_also_across_builds(digits):
  # On small data tracing the draw costs more than all of the calibration's draws: a build that
  # traced it once more for the calibration would spend most of its time calibrating.
  x, y = digits
  _dart_blocks.traced_draws.cache_clear()

  def build(features, batch_size=50):
    return tf_repulsive.VanillaPDS(radius="auto").build(tf_repulsive.SamplingContext(
        features=features, labels=None, batch_size=batch_size, distance_cache_bytes=0))

  key, step = tf.constant([5, 6], tf.int64), tf.constant(32, tf.int64)
  drawer = build(x)
  traced = drawer._draws_on_state
  assert traced.experimental_get_tracing_count() == 1
  indices, fallback = drawer.traced_draw()(key, step)
  assert indices.shape == (drawer.steps_per_draw, 50) and fallback.shape == (drawer.steps_per_draw,)
  assert traced.experimental_get_tracing_count() == 1
  # A build on other features of the same shape (a refresh's, another batcher's) calibrates and
  # draws through that trace, and its radius and batches are its own.
  moved = build(np.sqrt(x[::-1] + 1.0))
  assert moved._draws_on_state is traced and traced.experimental_get_tracing_count() == 1
  assert moved.report["radius"] != drawer.report["radius"]
  assert not np.array_equal(moved.traced_draw()(key, step)[0], drawer.traced_draw()(key, step)[0])
  assert traced.experimental_get_tracing_count() == 1
  # Another configuration has a trace of its own, and the memo keeps a bounded number of them.
  other = build(x, batch_size=40)
  assert other._draws_on_state is not traced
  for batch_size in range(30, 30 + _dart_blocks.traced_draws.cache_info().maxsize):
    _dart_blocks.traced_draws(dataclasses.replace(drawer._config, batch_size=batch_size))
  info = _dart_blocks.traced_draws.cache_info()
  assert info.currsize == info.maxsize
  assert build(x)._draws_on_state is not traced


@pytest.mark.slow
def test_auto_radius_is_as_large_as_the_darts_allow():
  # 1-D points 0..99 and batches of 10: disks of radius r fit iff about 100 / r >= 10, so the
  # calibrated radius lies between what fits easily and what cannot fit at all.
  points = np.arange(100, dtype=np.float32)[:, None]
  batcher, batches = draw_steps(points, np.zeros(100, np.int64), 10, tf_repulsive.VanillaPDS(radius="auto"))
  assert 5.0 <= batcher.stats().report["radius"] <= 11.0
  check_auto_radius(batcher, batches, tf_repulsive.VanillaPDS())


def test_no_disk_fits_gives_radius_zero_and_distinct_points():
  # Ten copies of one point: no positive radius lets two of them into a batch of two.
  points = np.zeros((10, 2), np.float32)
  points[0] = 1.0
  batcher, batches = draw_steps(points, np.arange(10), 3, tf_repulsive.VanillaPDS(radius="auto"), steps=5)
  assert batcher.stats().report["radius"] == 0.0
  assert all(len(set(labels.tolist())) == 3 for _, labels in batches)


@pytest.mark.parametrize("radius, error, message", [
    ("bogus", TypeError, '`radius` must be a number, "auto" or None'), (-1.0, ValueError, "`radius` must be finite")])
def test_bad_radius_says_what_it_may_be(radius, error, message):
  with pytest.raises(error, match=message):
    tf_repulsive.VanillaPDS(radius=radius)
