"""The blocked dart thrower against the sequential algorithm of the paper, dart for dart."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from cached_samplers import CACHE_AT_ANY_DIM
from tf_repulsive import _dart_blocks
from tf_repulsive import _dart_throwing

KEY = tf.constant([7, 11], tf.int64)


def _grid(side):
  """Integer grid points: squared distances are integers, so radii of x.5 are never hit exactly."""
  xs, ys = np.meshgrid(np.arange(side), np.arange(side))
  return np.stack([xs.ravel(), ys.ravel()], axis=1).astype(np.float32)


def _batch(thrower, step):
  """(indices, fallback) of the batch of `step`: its row of the draw that covers it."""
  steps_per_draw = thrower.steps_per_draw
  indices, fallback = thrower.draw(KEY, tf.constant(step - step % steps_per_draw, tf.int64))
  return indices.numpy()[step % steps_per_draw], int(fallback[step % steps_per_draw])


def _blocks(thrower):
  """The draws of `thrower`'s configuration on its tensors."""
  return _dart_blocks.BlockDraws(thrower._config, thrower._state)


def _thrown_darts(thrower, step, pi=None):
  """Every dart `draw` may throw for `step`, in order (same stateless calls as the thrower)."""
  steps_per_draw = thrower.steps_per_draw
  draw_key = tf.random.experimental.stateless_fold_in(KEY, tf.constant(step // steps_per_draw, tf.int64))
  blocks = _blocks(thrower)
  pi_cdf = None if pi is None else blocks._effective_cdf(tf.tile(pi[None], [steps_per_draw, 1]))
  darts = blocks._darts(blocks._dart_streams(draw_key), 0, thrower._plan.max_darts, pi_cdf)
  return darts.numpy()[step % steps_per_draw]


def _sequential(darts, points, radius, k):
  """The paper's dart throwing: accept unless a duplicate or closer than min(r_i, r_j)."""
  accepted = []
  for dart in darts:
    if len(accepted) == k:
      break
    if dart in accepted:
      continue
    gaps = np.linalg.norm(points[accepted] - points[dart], axis=1)
    if np.any(gaps < np.minimum(radius[accepted], radius[dart])):
      continue
    accepted.append(int(dart))
  return accepted


def _plan(radius, max_darts, mingling_values=None, pi=None):
  return _dart_throwing.DartPlan(
      point_radius=radius,
      pi=None if pi is None else (lambda histogram, step: tf.constant(pi, tf.float64)),
      mingling_values=mingling_values, num_mingling_values=0 if pi is None else len(pi), max_darts=max_darts)


@pytest.mark.parametrize("cache_bytes", [0, 2**24])
@pytest.mark.parametrize("batch_size", [1, 7, 40])
def test_equals_sequential_dart_throwing_with_mixed_radii(cache_bytes, batch_size):
  points = _grid(30)
  rng = np.random.default_rng(batch_size)
  radius = rng.choice([0.0, 1.5, 2.5, 4.5], size=len(points))
  thrower = _dart_throwing.DartThrower(points, _plan(radius, 400), batch_size, cache_bytes, tuning=CACHE_AT_ANY_DIM)
  assert thrower._config.distance_cache == (cache_bytes > 0)
  for step in range(5):
    indices, fallback = _batch(thrower, step)
    expected = _sequential(_thrown_darts(thrower, step), points, radius, batch_size)
    assert indices[:len(expected)].tolist() == expected
    assert fallback == batch_size - len(expected)


def test_the_distance_cache_is_built_only_from_cache_from_dim_on_and_within_its_budget():
  # Below that dimension a lookup in the N x N matrix costs more than the product it saves.
  rng = np.random.default_rng(0)
  for dim, cache_bytes, built in [(1023, 2**24, False), (1024, 2**24, True), (1024, 4 * 50 * 50 - 1, False)]:
    points = rng.normal(size=(50, dim)).astype(np.float32)
    thrower = _dart_throwing.DartThrower(points, _plan(np.full(50, 1.0), 100), 5, cache_bytes)
    assert thrower._config.distance_cache == built, (dim, cache_bytes)


@pytest.fixture(params=["one_pass", "per_pair"])
def survival_test(request):
  """The tuning under which a thrower with one disk radius tests darts against the accepted set in one pass, or not."""
  return _dart_throwing.DartTuning(one_pass_from=1 if request.param == "one_pass" else 10**9)


def test_the_tuning_chooses_the_test_of_darts_and_the_blocks(survival_test):
  # What the tests below rely on to run both tests of darts against the accepted set, and short blocks.
  tuning = dataclasses.replace(survival_test, max_survivor_target=4)
  config = _dart_throwing.DartThrower(_grid(6), _plan(np.full(36, 1.5), 36), 20, tuning=tuning)._config
  assert config.survival_in_one_pass == (tuning.one_pass_from == 1)
  assert config.survivor_target == 4 and config.max_survivors == 8
  # A block aims for a quarter more survivors than a step needs, and for exactly as many in high
  # dimensions, where products cost more than a further block (unless the cache replaces them).
  for dim, cache_bytes, target in [(64, 0, 28), (512, 0, 20), (1024, 2**24, 28)]:
    points = np.random.default_rng(dim).normal(size=(40, dim)).astype(np.float32)
    config = _dart_throwing.DartThrower(points, _plan(np.full(40, 1.0), 40), 20, cache_bytes,
                                        tuning=survival_test)._config
    assert (config.distance_cache, config.survivor_target) == (cache_bytes > 0, target), dim


def test_equals_sequential_dart_throwing_with_darts_drawn_by_mingling_value(survival_test):
  points = _grid(25)
  rng = np.random.default_rng(3)
  mingling_values = rng.integers(0, 4, len(points))
  pi = [0.1, 0.2, 0.3, 0.4]
  radius = np.full(len(points), 1.5)
  thrower = _dart_throwing.DartThrower(points, _plan(radius, 300, mingling_values, pi), 30, tuning=survival_test)
  pi = thrower.pi(tf.constant(0, tf.int64))
  for step in range(5):
    indices, _ = _batch(thrower, step)
    expected = _sequential(_thrown_darts(thrower, step, pi), points, radius, 30)
    assert indices[:len(expected)].tolist() == expected


@pytest.mark.parametrize("survivor_target", [4, 512])
@pytest.mark.parametrize("cache_bytes", [0, 2**24])
def test_equals_sequential_dart_throwing_with_one_radius_and_duplicate_points(survival_test, survivor_target,
                                                                              cache_bytes):
  # A survivor target of 4 cuts nearly every block short (its later darts are thrown again).
  tuning = dataclasses.replace(survival_test, max_survivor_target=survivor_target, cache_from_dim=1)
  points = np.concatenate([_grid(12), _grid(12)])  # every location twice, under two indices
  radius = np.full(len(points), 1.5)
  thrower = _dart_throwing.DartThrower(points, _plan(radius, 200), 20, cache_bytes, tuning=tuning)
  assert thrower._config.distance_cache == (cache_bytes > 0)
  for step in range(0, 40, 3):
    expected = _sequential(_thrown_darts(thrower, step), points, radius, 20)
    indices, fallback = _batch(thrower, step)
    assert indices[:len(expected)].tolist() == expected and fallback == 20 - len(expected)


@pytest.mark.slow
def test_equals_sequential_dart_throwing_with_tight_blocks_in_high_dimensions(survival_test):
  # The grid in 600 dimensions (zeros past the first two): distances stay exact integers, and a
  # block aims for exactly the points a step still needs, so blocks that fall short are common.
  points = np.pad(np.concatenate([_grid(12), _grid(12)]), [(0, 0), (0, 598)])
  radius = np.full(len(points), 1.5)
  thrower = _dart_throwing.DartThrower(points, _plan(radius, 300), 30, tuning=survival_test)
  assert thrower._config.survivor_target == 32 and thrower._config.survivor_margin == 1.0
  for step in range(0, 40, 3):
    expected = _sequential(_thrown_darts(thrower, step), points, radius, 30)
    indices, fallback = _batch(thrower, step)
    assert indices[:len(expected)].tolist() == expected and fallback == 30 - len(expected)


@pytest.mark.parametrize("radius_scale", [1.0, 0.0])
@pytest.mark.parametrize("survivor_target", [4, 512])
@pytest.mark.parametrize("batch_size", [20, 60])
def test_equals_sequential_dart_throwing_with_one_disk_radius_and_points_without_disks(
    survival_test, batch_size, survivor_target, radius_scale):
  # A survivor target of 4 cuts nearly every block short, so most darts meet the accepted set of
  # earlier blocks. Every location twice: a point with a disk and one without at the same place do
  # not conflict, two points with disks there do.
  tuning = dataclasses.replace(survival_test, max_survivor_target=survivor_target)
  points = np.concatenate([_grid(12), _grid(12)])
  radius = np.where(np.random.default_rng(batch_size).random(len(points)) < 0.7, 2.5, 0.0)
  thrower = _dart_throwing.DartThrower(points, _plan(radius, 300), batch_size, tuning=tuning).with_radius_scale(
      radius_scale)
  for step in range(0, 24, 5):
    expected = _sequential(_thrown_darts(thrower, step), points, radius * radius_scale, batch_size)
    indices, fallback = _batch(thrower, step)
    assert indices[:len(expected)].tolist() == expected and fallback == batch_size - len(expected)


@pytest.mark.parametrize("plan_says", [False, True])
def test_a_refreshable_thrower_keeps_one_disk_radius_only_when_the_plan_says_so(survival_test, plan_says):
  tuning = dataclasses.replace(survival_test, max_survivor_target=4)
  points = np.concatenate([_grid(12), _grid(12)])
  disks = np.random.default_rng(5).random(len(points)) < 0.7
  first = np.where(disks, 2.5, 0.0)
  # Without the plan's promise, the data refreshes to two disk radii.
  two_radii = np.where(np.arange(len(points)) % 2, 1.5, 3.5)
  refreshed = np.where(disks, 2.5 if plan_says else two_radii, 0.0)

  def thrower(radius):
    plan = dataclasses.replace(_plan(radius, 300), one_disk_radius=plan_says)
    return _dart_throwing.DartThrower(points, plan, 40, tuning=tuning)

  live = thrower(first).refreshable()
  live.refresh_from(thrower(refreshed))
  for step in range(0, 24, 5):
    expected = _sequential(_thrown_darts(live, step), points, refreshed, 40)
    indices, fallback = _batch(live, step)
    assert indices[:len(expected)].tolist() == expected and fallback == 40 - len(expected)


@pytest.mark.parametrize("radius,radius_scale", [(0.0, 1.0), (1.5, 0.0)])
def test_one_radius_of_zero_draws_distinct_points_and_nothing_else_conflicts(survival_test, radius, radius_scale):
  points = np.concatenate([_grid(6), _grid(6)])  # duplicate locations: distinct points all the same
  thrower = _dart_throwing.DartThrower(points, _plan(np.full(len(points), radius), 400), 40,
                                       tuning=survival_test).with_radius_scale(radius_scale)
  for step in range(6):
    expected = _sequential(_thrown_darts(thrower, step), points, np.zeros(len(points)), 40)
    indices, fallback = _batch(thrower, step)
    assert len(expected) == 40 and fallback == 0 and indices.tolist() == expected


@pytest.mark.parametrize("pi", [None, [0.5, 0.5]])
def test_darts_are_the_same_whatever_the_blocks(pi):
  points = _grid(10)
  mingling_values = None if pi is None else np.arange(100) % 2
  thrower = _dart_throwing.DartThrower(points, _plan(np.full(100, 1.5), 400, mingling_values, pi), 7)
  assert thrower.steps_per_draw == 16
  blocks = _blocks(thrower)
  pi_cdf = None if pi is None else blocks._effective_cdf(tf.constant([pi] * 16, tf.float64))
  streams = blocks._dart_streams(tf.constant([3, 4], tf.int64))
  darts = lambda start, size: blocks._darts(streams, tf.constant(start), tf.constant(size), pi_cdf).numpy()  # noqa: E731
  whole = darts(0, 400)
  np.testing.assert_array_equal(whole, np.concatenate([darts(0, 12), darts(12, 300), darts(312, 88)], axis=1))
  # Different steps of the draw get different darts.
  assert len({tuple(row) for row in whole.tolist()}) == 16


def test_darts_are_independent_and_uniform_over_the_points_and_follow_pi():
  # The darts' law is what makes the blocks exact dart throwing: i.i.d. uniform points (a block
  # whose Philox counters overlapped another's would repeat its darts), or for Dense/Anneal PDS a
  # mingling value drawn from pi, then a uniform point with that value.
  num_points = 100
  pi = np.array([0.1, 0.2, 0.3, 0.4])
  values = np.arange(num_points) % 4
  for plan in (_plan(np.full(num_points, 1.5), 400), _plan(np.full(num_points, 1.5), 400, values, pi.tolist())):
    blocks = _blocks(_dart_throwing.DartThrower(_grid(10), plan, 7))
    pi_cdf = None if plan.pi is None else blocks._effective_cdf(tf.constant([pi] * 16, tf.float64))
    darts = np.concatenate([
        blocks._darts(blocks._dart_streams(tf.constant([5, draw], tf.int64)), tf.constant(start), tf.constant(100),
                      pi_cdf).numpy()
        for draw in range(5) for start in range(0, 400, 100)])  # [20 * 16, 100]: 32000 darts
    if plan.pi is None:
      assert stats.chisquare(np.bincount(darts.ravel(), minlength=num_points)).pvalue > 1e-3
      # Consecutive darts of a step are independent: their pairs are uniform over the 100^2 pairs.
      pairs = darts[:, :-1] * num_points + darts[:, 1:]
      assert stats.chisquare(np.bincount(pairs.ravel(), minlength=num_points**2)).pvalue > 1e-3
    else:
      counts = np.bincount(values[darts.ravel()], minlength=4)
      assert stats.chisquare(counts, pi * counts.sum()).pvalue > 1e-3
      # Consecutive darts' values are independent: their pairs follow pi x pi.
      pairs = values[darts[:, :-1]] * 4 + values[darts[:, 1:]]
      pair_counts = np.bincount(pairs.ravel(), minlength=16)
      assert stats.chisquare(pair_counts, np.outer(pi, pi).ravel() * pair_counts.sum()).pvalue > 1e-3
      # Within a value, uniform over its 25 points.
      for value in range(4):
        chosen = darts.ravel()[values[darts.ravel()] == value] // 4
        assert stats.chisquare(np.bincount(chosen, minlength=25)).pvalue > 1e-3


def test_fallback_fills_distinct_points_when_the_radius_is_too_large():
  points = _grid(10)
  # Radius 100 admits one point per batch: the rest comes from the fallback fill.
  thrower = _dart_throwing.DartThrower(points, _plan(np.full(100, 100.0), 64), 20)
  indices, fallback = thrower.draw(KEY, tf.constant(0, tf.int64))
  assert fallback.numpy().tolist() == [19] * thrower.steps_per_draw
  assert all(len(set(row)) == 20 for row in indices.numpy().tolist())
  # Each step of the draw gets its own fill.
  assert len({tuple(sorted(row)) for row in indices.numpy().tolist()}) > 1
  again, _ = thrower.draw(KEY, tf.constant(0, tf.int64))
  np.testing.assert_array_equal(indices, again)


def test_batch_of_the_whole_dataset_terminates_and_is_a_permutation(survival_test):
  points = _grid(6)
  thrower = _dart_throwing.DartThrower(points, _plan(np.full(36, 0.5), 36), 36, tuning=survival_test)
  indices, _ = thrower.draw(KEY, tf.constant(0, tf.int64))
  assert all(sorted(row) == list(range(36)) for row in indices.numpy().tolist())


@pytest.mark.slow
def test_float32_tolerance_keeps_exact_minimum_distance_in_high_dimension(survival_test):
  rng = np.random.default_rng(5)
  # Far from the origin and from each other: plain float32 Gram distances would err by more
  # than the gap between nearby pairs and the radius.
  points = (1000.0 + rng.normal(size=(400, 512))).astype(np.float32)
  distances = np.linalg.norm(points[:, None].astype(np.float64) - points[None], axis=-1)
  radius = float(np.quantile(distances[np.triu_indices(400, 1)], 0.02))
  for cache_bytes in (0, 2**24):
    thrower = _dart_throwing.DartThrower(points, _plan(np.full(400, radius), 2000), 30, cache_bytes,
                                         tuning=dataclasses.replace(survival_test, cache_from_dim=1))
    assert thrower._config.distance_cache == (cache_bytes > 0)
    for step in range(10):
      indices = _batch(thrower, step)[0]
      chosen = distances[np.ix_(indices, indices)] + np.diag(np.full(30, np.inf))
      assert chosen.min() >= radius


def test_fallback_fill_is_uniform_over_the_points_not_yet_taken():
  points = _grid(4)  # 16 points
  # Two darts for a batch of 8: the fill supplies at least 6 points of every batch.
  thrower = _dart_throwing.DartThrower(points, _plan(None, 2), 8)
  counts = np.zeros(16)
  for first_step in range(0, 800, thrower.steps_per_draw):
    indices, fallback = thrower.draw(KEY, tf.constant(first_step, tf.int64))
    for row, filled in zip(indices.numpy(), fallback.numpy()):
      assert filled >= 6 and len(set(row.tolist())) == 8
      counts += np.bincount(row, minlength=16)
  assert stats.chisquare(counts).pvalue > 1e-3


def _far_apart_plan(num_points, max_darts=64):
  """Radius 100 on a unit-scale grid: the first dart is the batch's only accepted point."""
  return _plan(np.full(num_points, 100.0), max_darts)


# 12 candidates are too few for the 9 points needed: most draws fill by scores instead.
@pytest.mark.parametrize("tuning", [_dart_throwing.DartTuning(),
                                    _dart_throwing.DartTuning(fill_candidates_per_point=0, fill_extra_candidates=12)],
                         ids=["default", "12_candidates"])
def test_fallback_fill_of_large_datasets_is_uniform_given_the_accepted_point(tuning):
  points = _grid(20)  # N = 400 > 8 k: the fill draws candidates
  thrower = _dart_throwing.DartThrower(points, _far_apart_plan(400), 10, tuning=tuning)
  assert thrower._config.fill_candidates == tuning.fill_candidates_per_point * 10 + tuning.fill_extra_candidates
  # The fill is uniform over the 399 points not taken: its offsets from the accepted point,
  # modulo N, are uniform over 1 ... 399.
  offsets = np.zeros(400)
  for first_step in range(0, 800, thrower.steps_per_draw):
    indices, fallback = thrower.draw(KEY, tf.constant(first_step, tf.int64))
    for row, filled in zip(indices.numpy(), fallback.numpy()):
      assert filled == 9 and len(set(row.tolist())) == 10
      offsets += np.bincount((row[1:] - row[0]) % 400, minlength=400)
  assert offsets[0] == 0
  assert stats.chisquare(offsets[1:]).pvalue > 1e-3


def _graphs(graph):
  """`graph` and the graphs of every function it calls (loop bodies, branches), recursively."""
  yield graph
  for function in graph._functions.values():
    yield from _graphs(function.graph)


def test_per_step_work_of_a_filled_draw_does_not_grow_with_the_dataset():
  num_points = 100_003  # a size no other dimension of the draw has
  points = np.random.default_rng(0).normal(size=(num_points, 3)).astype(np.float32)
  thrower = _dart_throwing.DartThrower(points, _far_apart_plan(num_points), 20)
  indices, fallback = thrower.draw(KEY, tf.constant(0, tf.int64))
  assert (fallback.numpy() == 19).all() and all(len(set(row)) == 20 for row in indices.numpy().tolist())
  # The one trace of the draw, which the pipeline's map copies in.
  draw = tf.function(thrower.traced_draw()).get_concrete_function(tf.TensorSpec([2], tf.int64),
                                                                  tf.TensorSpec([], tf.int64))
  # Inputs hold the dataset (features, norms), which loops pass through: it is read by gather
  # only. The fill by scores is O(N), but runs only when the fill's candidates run short
  # (probability below 1e-40).
  passing_through = {"Placeholder", "While", "StatelessWhile", "If", "StatelessIf"}
  sized_by_n = {(op.type, op.name) for graph in _graphs(draw.graph) for op in graph.get_operations()
                if op.type not in passing_through and "fill_by_scores/" not in op.name
                for output in op.outputs if num_points in (output.shape.as_list() or [])}
  assert not sized_by_n
