"""Dart throwing for Poisson disk sampling over a finite point set, as TensorFlow graph ops.

The sequential algorithm (paper, section 4 and Algorithm 1) throws one dart at a time and accepts
it unless it lies inside the disk of an accepted point. Here darts are thrown in blocks: a block
is tested against the accepted set with one Gram matrix, the darts that survive are compacted,
conflicts among them are resolved with matrix ops in dart order, and the result is exactly what
the sequential loop accepts from the same darts. Dart j of a step is fixed by (key, step, j)
alone, so block sizes adapt to the acceptance rate without changing which darts are thrown. Work
per batch is O(darts * accepted * d), independent of the dataset size N.

A thrower's draws are traced once per configuration (`DrawConfig`), on its per-dataset tensors
(`DrawState`) as arguments; `DrawTraces` keeps the traces.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import math
from typing import Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _arrays
from tf_repulsive import _progress
from tf_repulsive import _stream_ops
from tf_repulsive._contract import BatchDrawer

# Probability over mingling values at global step n (a float64 tensor), given the data's histogram
# of mingling values (float64 [K + 1]).
MinglingPi = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]

# Blocks start at dart numbers divisible by this, so that every block's darts begin on a Philox
# counter (4 int32 or 2 float64 draws each; see `BlockDraws._darts`).
DART_ALIGN = 4


@dataclasses.dataclass(frozen=True)
class DartPlan:
  """What one sampler asks of the dart thrower, resolved against a concrete dataset.

  Attributes:
    point_radius: `[N]` disk radius of every point, or None for no disk test (distinct points
      uniformly at random). Two points conflict when closer than the smaller of their radii.
    pi: pi over mingling values as a function of the histogram of mingling values and the step
      (Dense / Anneal PDS), or None for darts uniform over all points.
    mingling_values: `[N]` mingling value (0..K) of every point; required with `pi`.
    num_mingling_values: K + 1, the number of possible mingling values.
    max_darts: bound on the darts thrown for one batch before the fallback fill.
    one_radius: whether every point has the same radius by construction (Vanilla, Dense, Anneal
      PDS), whatever the data: a refreshable thrower keeps the faster test for one radius only then.
    one_disk_radius: whether the points with a disk have the same radius by construction (Easy
      PDS: r or no disk), whatever the data: a refreshable thrower keeps the one-pass test of large
      batches (`Acceptance`) only then.
    pi_follows_step: whether `pi` changes with the step (Anneal PDS), so that the law of a batch,
      and each point's probability of being in it, does too.
  """

  point_radius: np.ndarray | None
  pi: MinglingPi | None
  mingling_values: np.ndarray | None
  num_mingling_values: int
  max_darts: int
  one_radius: bool = False
  one_disk_radius: bool = False
  pi_follows_step: bool = False


@dataclasses.dataclass(frozen=True)
class DartTuning:
  """The dart thrower's sizes and thresholds, which trade speed against memory.

  None of them changes the law of a batch. Some change which batch a seed gives (how steps share
  a draw's dart streams, how the fallback fill runs), so the samplers use the defaults.

  Attributes:
    step_rows_per_draw: steps share a draw while S * k stays within this (`DrawConfig.of`): the
      per-op cost of TensorFlow is paid once per draw, and large batches give each op enough work.
    max_survivor_target: the most survivors a block aims for per step; more would make the
      settling matrix quadratic in k.
    max_survivors_over_target: survivors of the test against the accepted set that one block
      settles per step, at most, over the number it aims for (the settling works on their
      `[S, m, m]` conflict matrix).
    survivor_margin: survivors a block aims for per point a step still needs: a quarter more,
      for the ones that block each other.
    block_cells: bound on the elements of a block's distance matrix against the accepted set and
      of its gathered dart rows (S * darts * max(accepted, d + 2)).
    one_pass_from: from this batch size on, with one disk radius, the test of a block's darts
      against the accepted set sets aside the darts that repeat an accepted point (a sort and a
      search) and those without a disk, and takes one pass over the others' distances (their
      minimum); below it those ops cost more than the passes they save.
    one_product_from_k_over_d: squared distances as one product of augmented rows from
      k >= this * (d + 2) (see `DrawConfig.of`).
    fill_by_scores_up_to: the fallback fill draws candidates when N > this * k, and scores every
      point (O(N) = O(k)) below.
    fill_candidates_per_point: uniform candidates per step of that fill, per point of the batch
      (see `fill_extra_candidates`).
    fill_extra_candidates: candidates per step added to those: with the defaults, 2 k + 64 are
      enough to find the k distinct new points a step may need (see
      `BlockDraws._fill_uniformly`).
    center_row_block: rows centred per numpy step: float64 work in blocks keeps the peak at one
      float32 copy.
    cache_row_block: rows of the distance cache computed per product.
    inclusion_steps: steps whose draws estimate the inclusion probabilities
      (`DartThrower.inclusion_probabilities`).
    inclusion_cells: bound on the cells of one `[S, k, points]` conflict matrix of that estimate.
  """

  step_rows_per_draw: int = 2048
  max_survivor_target: int = 512
  max_survivors_over_target: int = 2
  survivor_margin: float = 1.25
  block_cells: int = 2**22
  one_pass_from: int = 2048
  one_product_from_k_over_d: int = 3
  fill_by_scores_up_to: int = 8
  fill_candidates_per_point: int = 2
  fill_extra_candidates: int = 64
  center_row_block: int = 16384
  cache_row_block: int = 1024
  inclusion_steps: int = 256
  inclusion_cells: int = 2**24


@dataclasses.dataclass(frozen=True)
class DrawConfig:
  """What a trace of the draw is built from besides the per-dataset tensors (`DrawState`).

  Throwers of equal configurations draw with one trace, whatever their data (`DrawTraces`).

  Attributes:
    num_points: N.
    dim: d, the features' dimension.
    batch_size: k.
    steps_per_draw: S, the steps one draw throws darts for side by side.
    pi: the plan's pi over mingling values, or None for darts uniform over all points.
    num_mingling_values: K + 1 (the plan's).
    disks: whether the points have disks (the plan has radii).
    one_radius: whether every point has the one radius of the state (`DrawState.uniform_radius`),
      which needs no per-pair minimum.
    one_disk_radius: whether every point with a disk has the same radius (one radius, or one and
      none).
    distance_cache: whether the state holds the squared distances of all pairs.
    one_product: whether squared distances are one product of augmented rows.
    survival_in_one_pass: whether the batch is large enough for the one-pass test of darts
      against the accepted set (`DartTuning.one_pass_from`).
    survivor_target: the most survivors a block aims for per step (a block start).
    max_survivors: the most survivors a block settles per step.
    max_block_rows: the most darts per step of a block, by `block_cells` and d.
    block_cells: `DartTuning.block_cells`.
    survivor_margin: `DartTuning.survivor_margin`.
    fill_candidates: uniform draws with replacement per step for the fallback fill, or None: the
      fill scores every point (O(N), but then N is a few k).
  """

  num_points: int
  dim: int
  batch_size: int
  steps_per_draw: int
  pi: MinglingPi | None
  num_mingling_values: int
  disks: bool
  one_radius: bool
  one_disk_radius: bool
  distance_cache: bool
  one_product: bool
  survival_in_one_pass: bool
  survivor_target: int
  max_survivors: int
  max_block_rows: int
  block_cells: int
  survivor_margin: float
  fill_candidates: int | None

  @classmethod
  def of(cls, plan: DartPlan, tuning: DartTuning, *, num_points: int, dim: int, batch_size: int,
         max_steps_per_draw: int, one_radius: bool, one_disk_radius: bool, distance_cache: bool) -> DrawConfig:
    """The configuration of a thrower of `plan` on prepared tensors with these properties."""
    steps_per_draw = _steps_per_draw(batch_size, max_steps_per_draw, tuning.step_rows_per_draw)
    # A block aims for enough survivors to fill what a step still needs (`survivor_margin` more,
    # for the ones that block each other), up to `max_survivor_target`; it settles at most
    # `max_survivors_over_target` times that.
    survivor_target = _aligned(min(math.ceil(tuning.survivor_margin * batch_size), tuning.max_survivor_target))
    # The fallback fill's candidates are enough to find the k distinct new points it may need
    # (see `BlockDraws._fill_uniformly`); None: fill by scores, O(N) but then N is a
    # few k.
    fill_candidates = (tuning.fill_candidates_per_point * batch_size + tuning.fill_extra_candidates
                       if num_points > tuning.fill_by_scores_up_to * batch_size else None)
    return cls(
        num_points=num_points, dim=dim, batch_size=batch_size, steps_per_draw=steps_per_draw, pi=plan.pi,
        num_mingling_values=plan.num_mingling_values, disks=plan.point_radius is not None, one_radius=one_radius,
        one_disk_radius=one_disk_radius, distance_cache=distance_cache,
        # The augmented rows cost a copy of each block's gathered rows, O((darts + accepted) d); the
        # norms added after the product cost passes over the matrix, O(darts * accepted): about
        # 0.6 k^2 against 1.75 k d per block, so one product from k = 3 (d + 2) on.
        one_product=batch_size >= tuning.one_product_from_k_over_d * (dim + 2),
        survival_in_one_pass=batch_size >= tuning.one_pass_from, survivor_target=survivor_target,
        max_survivors=tuning.max_survivors_over_target * survivor_target,
        max_block_rows=max(DART_ALIGN, tuning.block_cells // (steps_per_draw * (dim + 2))),
        block_cells=tuning.block_cells, survivor_margin=tuning.survivor_margin, fill_candidates=fill_candidates)


def _steps_per_draw(batch_size: int, most: int, step_rows: int) -> int:
  """S: a power of two up to `most` (and 16) with S * k <= `step_rows`, or 1.

  The per-op cost of TensorFlow is paid once per draw, so small batches share a draw; large ones
  already give each op enough work.
  """
  return min(2 ** min(4, max(0, (step_rows // batch_size).bit_length() - 1)), most)


def _aligned(count: int) -> int:
  """`count` rounded up to a block start."""
  return -(-count // DART_ALIGN) * DART_ALIGN


_FLOAT32_EPS = float(np.finfo(np.float32).eps)
# Norms of the largest feature vector at which the features serve uncentred and unscaled: their
# squares and Gram products stay far from float32's underflow and overflow.
_RAW_NORMS = (2.0**-20, 2.0**20)
# The squared distance of the features' mean from the origin, over their mean squared distance
# from the mean, up to which the features serve uncentred.
_RAW_OFFSET_SQ = 4.0


@dataclasses.dataclass(frozen=True, eq=False)
class DrawState:
  """The per-dataset tensors of a thrower: its traced draws take them as arguments.

  A refreshable thrower holds them in variables, by the names of `arguments`.

  Attributes:
    features: `[N, d]` float32 features, centred and scaled when their offset or norms call for it.
    shrunk_sq_norms: `[N]` float32 squared norms of `features`, shrunk by the float32 error bound.
    point_radius: `[N]` float32 disk radius of every point (in the scale of `features`), or None
      for no disks.
    uniform_radius: the radius every point has, or None: a Python float as prepared, a float32
      tensor in a trace or a refreshable thrower.
    sq_distances: `[N * N]` float32 shrunk squared distances (row-major), or None.
    points_by_value: `[N]` int32 the points ordered by mingling value (darts by value), or None.
    value_counts: `[K + 1]` float64 the points of each mingling value, or None.
    value_offsets: `[K + 1]` int32 where each value's points start in `points_by_value`, or None.
    value_histogram: `[K + 1]` float64 the share of each mingling value, or None.
  """

  features: tf.Tensor
  shrunk_sq_norms: tf.Tensor
  point_radius: tf.Tensor | None = None
  uniform_radius: tf.Tensor | float | None = None
  sq_distances: tf.Tensor | None = None
  points_by_value: tf.Tensor | None = None
  value_counts: tf.Tensor | None = None
  value_offsets: tf.Tensor | None = None
  value_histogram: tf.Tensor | None = None

  def arguments(self) -> dict[str, tf.Tensor]:
    """The tensors present, by name, as a trace takes them (the one radius a float32 tensor)."""
    arguments = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                 if getattr(self, field.name) is not None}
    if self.uniform_radius is not None:
      arguments["uniform_radius"] = tf.convert_to_tensor(self.uniform_radius, tf.float32)
    return arguments


def prepare(features: np.ndarray, plan: DartPlan, tuning: DartTuning, distance_cache_bytes: int,
            verbose: bool) -> tuple[DrawState, bool]:
  """The per-dataset tensors of a thrower of `plan` on `features`.

  Args:
    features: `[N, d]` float array; distances are Euclidean in this space.
    plan: the sampler's resolved plan.
    tuning: the thrower's tuning (`center_row_block`, `cache_row_block`).
    distance_cache_bytes: when the `[N, N]` float32 matrix of squared distances fits in this
      many bytes, it is computed here once and disk tests look distances up (O(k^2) per batch
      instead of O(k^2 d)).
    verbose: show a progress bar if computing that matrix takes more than about 2 s.

  Returns:
    The state, and whether every point with a disk has the same radius (one radius, or one and
    none).

  Raises:
    ValueError: if the plan has `pi` and no `mingling_values`.
  """
  num_points, dim = features.shape
  blocks = [slice(start, start + tuning.center_row_block) for start in range(0, num_points, tuning.center_row_block)]
  mean = np.add.reduce(features, axis=0, dtype=np.float64) / max(num_points, 1)
  sq_norms = np.empty(num_points, np.float64)
  for rows in blocks:
    rows_64 = features[rows].astype(np.float64)
    sq_norms[rows] = np.einsum("ij,ij->i", rows_64, rows_64)
  # The Gram-based distances below err by up to about d * eps * (|x|^2 + |y|^2) in float32
  # (the disk test treats pairs within that of the radius as too close). With the mean at most
  # twice as far from the origin as the points' root-mean-square spread about it, that band is
  # at most 5x what it is about the mean, and with norms far from float32's limits the features
  # serve as they are (no copy: the default features are the elements' own array). Otherwise
  # centring keeps the error relative to the spread (an offset of 1000 on a spread of 1 would
  # swamp the distances), and scaling by a power of two (exact) to norms <= 1 keeps the squared
  # norms finite (from |x| ~ 1e19 they overflow, and NaN distances would let a point be drawn
  # twice); radii follow.
  spread_sq = max(float(np.mean(sq_norms)) - float(mean @ mean), 0.0) if num_points else 0.0
  max_norm = float(np.sqrt(np.max(sq_norms, initial=0.0)))
  if (features.dtype == np.float32 and float(mean @ mean) <= _RAW_OFFSET_SQ * spread_sq
      and _RAW_NORMS[0] <= max_norm <= _RAW_NORMS[1]):
    scale = 1.0
    served = _arrays.to_tensor(features)
  else:
    for rows in blocks:
      centered_rows = features[rows].astype(np.float64) - mean
      sq_norms[rows] = np.einsum("ij,ij->i", centered_rows, centered_rows)
    max_norm = float(np.sqrt(np.max(sq_norms, initial=0.0)))
    scale = 2.0 ** -math.ceil(math.log2(max_norm)) if max_norm > 0 else 1.0
    centered = _arrays.empty((num_points, dim), np.float32)
    for rows in blocks:
      centered[rows] = (features[rows].astype(np.float64) - mean) * scale
    served = _arrays.to_tensor(centered)
  # Squared distances are |x|^2 + |y|^2 - 2 x.y, or one float32 dot product of length d + 2,
  # [x, |x|^2, 1] . [-2 y, 1, |y|^2] (`as_rows`, `as_columns`). A rigorous bound on the rounding
  # error of either, with the norms rounded to float32, is tolerance * (|x|^2 + |y|^2).
  # Shrinking the squared norms by it makes pairs within that error of the disk boundary count
  # as conflicts, so accepted pairs are at least the radius apart in exact arithmetic; the same
  # point is always "closer than" a positive radius.
  tolerance = 2 * (dim + 4) * _FLOAT32_EPS
  shrunk_sq_norms = tf.constant(((1.0 - tolerance) * scale**2 * sq_norms).astype(np.float32))
  state = DrawState(features=served, shrunk_sq_norms=shrunk_sq_norms)
  one_disk_radius = False
  if plan.point_radius is not None:
    radius = (plan.point_radius * scale).astype(np.float32)
    disk_radii = radius[radius > 0]
    one_disk_radius = bool(np.all(disk_radii == disk_radii[0])) if disk_radii.size else True
    state = dataclasses.replace(
        state, point_radius=tf.constant(radius),
        # One radius for all points (Vanilla, Dense, Anneal) needs no per-pair minimum.
        uniform_radius=float(radius[0]) if np.all(radius == radius[0]) else None)
    if 4 * num_points * num_points <= distance_cache_bytes:
      state = dataclasses.replace(state, sq_distances=_pairwise_sq_distances(state, tuning.cache_row_block, verbose))
  if plan.pi is not None:
    if plan.mingling_values is None:
      raise ValueError("a DartPlan with `pi` needs the `mingling_values` of the points.")
    order = np.argsort(plan.mingling_values, kind="stable")
    counts = np.bincount(plan.mingling_values, minlength=plan.num_mingling_values)
    state = dataclasses.replace(
        state, points_by_value=tf.constant(order.astype(np.int32)), value_counts=tf.constant(counts.astype(np.float64)),
        value_offsets=tf.constant(np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)),
        value_histogram=tf.constant(counts / counts.sum(), tf.float64))
  return state, one_disk_radius


def _pairwise_sq_distances(state: DrawState, row_block: int, verbose: bool) -> tf.Tensor:
  """`[N * N]` shrunk squared distances (row-major), computed like the on-the-fly test."""
  num_points = state.features.shape[0]
  matrix = _arrays.empty((num_points, num_points), np.float32)
  columns = as_columns(state.features, state.shrunk_sq_norms)
  with _progress.bar("distance cache", num_points, verbose) as progress:
    for start in range(0, num_points, row_block):
      rows = as_rows(state.features[start:start + row_block], state.shrunk_sq_norms[start:start + row_block])
      matrix[start:start + row_block] = tf.matmul(rows, columns, transpose_b=True).numpy()
      progress.update(rows.shape[0])
  return _arrays.to_tensor(matrix.reshape(-1))


def as_rows(x: tf.Tensor, sq_norms: tf.Tensor) -> tf.Tensor:
  """[x, |x|^2, 1]: its dot product with `as_columns` of y is the squared distance |x - y|^2."""
  return tf.concat([x, sq_norms[..., None], tf.ones_like(sq_norms)[..., None]], axis=-1)


def as_columns(y: tf.Tensor, sq_norms: tf.Tensor) -> tf.Tensor:
  """[-2 y, 1, |y|^2] (see `as_rows`)."""
  return tf.concat([-2.0 * y, tf.ones_like(sq_norms)[..., None], sq_norms[..., None]], axis=-1)


class DrawTraces:
  """Traced draws (`draws`) by configuration, the most recently used kept.

  One trace serves every draw of a thrower: the radius calibration's, at any radius scale and dart
  budget, the batcher's (`DartThrower.traced_draw`), at any key, and the pipeline's
  (`DartThrower.draw` copies it in). The per-dataset tensors are its arguments, so that every
  thrower of the same configuration reuses it: a refresh's, another batcher's on data of the same
  shape (a trace costs more than all of a calibration's draws). The traced function holds the
  configuration only: one that referenced the thrower holding it would be a cycle, and keep the
  tensors (the distance cache, say) until the next garbage collection; a kept function would keep
  the plan's per-point arrays.

  Bounded, as each holds its traced graph (about 8 MiB of Python objects for Anneal PDS); a
  function holds no per-dataset tensor (they are its arguments).
  """

  def __init__(self, max_traces: int = 8):
    """A cache of at most `max_traces` traced draws."""
    self.max_traces = max_traces
    # Most recently used last.
    self._functions: collections.OrderedDict[DrawConfig, tf.types.experimental.PolymorphicFunction] = (
        collections.OrderedDict())

  def draws(self, config: DrawConfig) -> tf.types.experimental.PolymorphicFunction:
    """The traced draws of `config`: the one traced before, or a new one.

    It takes `(state, key, first_step, num_draws, radius_scale, max_darts)`, `state` the
    per-dataset tensors (`DrawState.arguments`), and returns `BlockDraws.draws`'s three tensors.
    """
    function = self._functions.pop(config, None)
    if function is None:
      function = tf.function(functools.partial(draws, config), autograph=False)
    self._functions[config] = function
    while len(self._functions) > self.max_traces:
      self._functions.popitem(last=False)
    return function

  def clear(self) -> None:
    """Forgets every trace (throwers keep theirs)."""
    self._functions.clear()


# The traces of the built-in samplers' throwers: one cache for the process, so that throwers of
# the same configuration draw with one trace, whichever batcher built them.
DEFAULT_TRACES = DrawTraces()


class DartThrower(BatchDrawer):
  """Draws the indices of mini-batches as a pure function of a stateless key and the steps."""

  def __init__(self, features: np.ndarray, plan: DartPlan, batch_size: int, distance_cache_bytes: int = 0,
               verbose: bool = False, max_steps_per_draw: int = 16, tuning: DartTuning = DartTuning(),
               traces: DrawTraces = DEFAULT_TRACES):
    """Prepares the per-dataset tensors once.

    Args:
      features: `[N, d]` float array; distances are Euclidean in this space.
      plan: the sampler's resolved plan.
      batch_size: k, the number of distinct points in a batch (<= N).
      distance_cache_bytes: when the `[N, N]` float32 matrix of squared distances fits in this
        many bytes, it is computed here once and disk tests look distances up (O(k^2) per batch
        instead of O(k^2 d)).
      verbose: show a progress bar if computing that matrix takes more than about 2 s.
      max_steps_per_draw: the most steps one draw covers (`steps_per_draw`).
      tuning: block sizes and thresholds.
      traces: where the trace of this thrower's draws is kept for throwers of the same
        configuration.
    """
    num_points, dim = features.shape
    self._plan = plan
    self._tuning = tuning
    self._traces = traces
    self._state, one_disk_radius = prepare(features, plan, tuning, distance_cache_bytes, verbose)
    self._config = DrawConfig.of(
        plan, tuning, num_points=num_points, dim=dim, batch_size=batch_size, max_steps_per_draw=max_steps_per_draw,
        one_radius=self._state.uniform_radius is not None, one_disk_radius=one_disk_radius,
        distance_cache=self._state.sq_distances is not None)
    self.steps_per_draw = self._config.steps_per_draw
    # Every disk radius is multiplied by this (see `with_radius_scale`).
    self.radius_scale = 1.0
    # The trace of this configuration's draws (`DrawTraces`), which takes the per-dataset tensors.
    self._draws_on_state = traces.draws(self._config)
    # The variables of a refreshable thrower (`refreshable`), by argument name; None: constants.
    self._variables: dict[str, tf.Variable] | None = None
    # A refreshable thrower's draw, traced once on its variables (`refreshable`).
    self._traced_variable_draw: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None = None

  def refreshable(self) -> DartThrower:
    """This thrower with its per-dataset tensors in variables on the host, for `refresh_from`.

    It draws what this thrower draws. The variables let a thrower of the same plan built on new
    features of the same shape (features recomputed from a model as it trains) hand over its
    tensors without a new trace of the draw. One radius for all points stays one radius only
    when the plan says so (`DartPlan.one_radius`), not because the first data gave it.
    """
    live = copy.copy(self)
    if not self._plan.one_radius:
      live._state = dataclasses.replace(live._state, uniform_radius=None)
      live._config = dataclasses.replace(live._config, one_radius=False)
    if live._config.one_disk_radius and not (self._plan.one_radius or self._plan.one_disk_radius):
      live._config = dataclasses.replace(live._config, one_disk_radius=False)
    if live._config != self._config:
      live._draws_on_state = self._traces.draws(live._config)
    arguments = {**live._state.arguments(), "radius_scale": tf.constant(self.radius_scale, tf.float32)}
    with tf.device("CPU:0"):
      live._variables = {name: tf.Variable(value, trainable=False) for name, value in arguments.items()}
    # The trace draws with a copy that does not hold the trace.
    live._traced_variable_draw = tf.function(functools.partial(DartThrower.draw, copy.copy(live)), autograph=False,
                                             input_signature=(tf.TensorSpec([2], tf.int64),
                                                              tf.TensorSpec([], tf.int64)))
    return live

  def refresh_from(self, other: BatchDrawer) -> None:
    """Makes this refreshable thrower draw what `other` draws: its tensors, report and groups.

    Args:
      other: a thrower of the same sampler built on new features of the same shape.

    Raises:
      ValueError: if this thrower is not refreshable, or `other` has other tensors or shapes.
    """
    if self._variables is None or not isinstance(other, DartThrower):
      raise ValueError("refresh_from needs a thrower made by refreshable() and a DartThrower to take over.")
    arguments = other._state.arguments()
    values = {name: arguments.get(name) for name in self._variables}
    values["radius_scale"] = tf.constant(other.radius_scale, tf.float32)
    for name, value in values.items():
      variable = self._variables[name]
      if value is None or value.shape != variable.shape or value.dtype != variable.dtype:
        raise ValueError(
            f"the refreshed thrower's {name} is "
            f"{'missing' if value is None else f'{value.dtype.name} {value.shape}'}, not "
            f"{variable.dtype.name} {variable.shape}: a refresh keeps the sampler, the data size and the "
            "feature dimension.")
    for name, value in values.items():
      self._variables[name].assign(value)
    self.report, self.groups = other.report, other.groups

  def _current(self) -> tuple[DrawState, float | tf.Tensor]:
    """The per-dataset tensors and radius scale to draw with: a refreshable thrower's variables read once."""
    if self._variables is None:
      return self._state, self.radius_scale
    values = {name: variable.read_value() for name, variable in self._variables.items()}
    radius_scale = values.pop("radius_scale")
    return DrawState(**values), radius_scale

  def with_radius_scale(self, radius_scale: float) -> DartThrower:
    """This thrower with every disk radius multiplied by `radius_scale` (shares all tensors)."""
    scaled = copy.copy(self)
    scaled.radius_scale = float(radius_scale)
    return scaled

  def pi(self, step: tf.Tensor) -> tf.Tensor | None:
    return None if self._plan.pi is None else self._plan.pi(self._state.value_histogram, step)

  def inclusion_probabilities(self, key: tf.Tensor, verbose: bool) -> np.ndarray | None:
    """`[N]` each point's probability of being in a batch (`inclusion_probabilities`); None under Anneal PDS.

    Args:
      key: `[2]` int64 stateless key of these draws (not the stream's).
      verbose: show a progress bar if the estimate takes more than about 2 s.
    """
    num_points, k = self._config.num_points, self._config.batch_size
    if self._plan.pi_follows_step:
      return None
    if self._plan.point_radius is None and self._plan.pi is None:
      return np.full(num_points, k / num_points)
    state, radius_scale = self._current()
    return inclusion_probabilities(self._config, state, radius_scale, self.traced_draw(), key,
                                                   self._tuning, verbose)

  def count_fills(self, radius_scale: float, key: tf.Tensor, steps: int, max_darts: int) -> int:
    """How many draws of steps 0 .. steps - 1 (whole draws) need the fallback fill within `max_darts` darts a batch.

    Stops counting at the first draw with a fill. For calibrating the radius: every scale and
    budget runs the one trace of `traced_draw`.
    """
    _, _, filled = self._draws_on_state(
        self._state.arguments(), key, tf.constant(0, tf.int64),
        tf.constant(-(-steps // self.steps_per_draw), tf.int32), tf.constant(radius_scale, tf.float32),
        tf.constant(max_darts, tf.int32))
    return int(filled)

  def traced_draw(self) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """`draw` through the calibration's trace, at this thrower's radius scale and dart budget."""
    if self._traced_variable_draw is not None:
      return self._traced_variable_draw
    state, settings = self._one_draw_arguments(self._state, self.radius_scale)

    def draw(key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
      indices, fallback, _ = self._draws_on_state(state, key, first_step, *settings)
      return indices, fallback

    return draw

  def _one_draw_arguments(self, state: DrawState, radius_scale: float | tf.Tensor) -> tuple[
      dict[str, tf.Tensor], tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
    """What the trace takes besides the key and first step, for one draw of `state` at `radius_scale`.

    The per-dataset tensors, and the number of draws (1), radius scale and dart budget.
    """
    return state.arguments(), (tf.constant(1, tf.int32), tf.cast(radius_scale, tf.float32),
                               tf.constant(self._plan.max_darts, tf.int32))

  # The built-in drawers' control flow is explicit TensorFlow ops: AutoGraph would only re-read
  # their source, on the first trace in each process (~0.6 s of a first build). Custom drawers
  # are converted as usual.
  @tf.autograph.experimental.do_not_convert
  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The batches of steps `first_step` ... `first_step + steps_per_draw - 1`, thrown side by side.

    Args:
      key: `[2]` int64 stateless seed of the pipeline.
      first_step: int64 scalar, a multiple of `steps_per_draw`.

    Returns:
      `indices`: `[steps_per_draw, k]` int32, per step k distinct point indices in acceptance
      order; `fallback`: `[steps_per_draw]` int32, how many of each step's the fallback fill
      supplied because the dart budget ran out.
    """
    if tf.executing_eagerly():
      return self.traced_draw()(key, first_step)
    # Traced into the pipeline's map: the body of the one trace of the draw, copied in. A second
    # trace would cost as much as the first (a fifth to two fifths of a small build); a call of
    # the function would make tf.data instantiate the map as a multi-device function for every
    # iterator.
    state, settings = self._one_draw_arguments(*self._current())
    indices, fallback, _ = _stream_ops.inlined(self._draws_on_state, state, key, first_step, *settings)
    return indices, fallback


_PHILOX = tf.random.Algorithm.PHILOX.value


def draws(config: DrawConfig, state: dict[str, tf.Tensor], key: tf.Tensor, first_step: tf.Tensor, num_draws: tf.Tensor,
          radius_scale: tf.Tensor, max_darts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """`BlockDraws.draws` of `config` on the per-dataset tensors `state` (`DrawState.arguments`): what a trace runs."""
  return BlockDraws(config, DrawState(**state)).draws(key, first_step, num_draws, radius_scale, max_darts)


class BlockDraws:
  """The draws of a configuration on one dataset's tensors, as TensorFlow ops."""

  def __init__(self, config: DrawConfig, state: DrawState):
    self._config = config
    self._state = state
    self._acceptance = Acceptance(config, state)

  def draws(self, key: tf.Tensor, first_step: tf.Tensor, num_draws: tf.Tensor, radius_scale: tf.Tensor,
            max_darts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """`num_draws` consecutive draws from `first_step` on, up to the first that needs the fill.

    Returns the last draw's indices and fallback counts, and how many draws needed the fill.
    """
    config = self._config
    steps_per_draw = config.steps_per_draw
    pi_cdf = None
    if config.pi is not None:
      pi = config.pi
      # One vectorised evaluation of the schedule for all steps of the draws (a loop for
      # schedules whose ops TensorFlow cannot vectorise), and its check, before the loop: an
      # `Assert` inside the loop's body slows the dart throwing in it by a quarter or more
      # (BUILD_NOTES.md, "No check inside the draw's loops").
      # (`identity`: the loop's outputs must be its own ops, also for a constant pi.)
      pi_cdf = self._effective_cdf(tf.vectorized_map(
          lambda step: tf.identity(pi(self._state.value_histogram, step)),
          first_step + tf.range(tf.cast(num_draws, tf.int64) * steps_per_draw, dtype=tf.int64)))

    def keep_drawing(draw, indices, fallback, filled):
      del indices, fallback
      return tf.logical_and(draw < num_draws, filled == 0)

    def next_draw(draw, indices, fallback, filled):
      del indices, fallback
      draw_cdf = None if pi_cdf is None else tuple(
          tf.gather(tf.reshape(t, [-1, steps_per_draw, *t.shape[1:]]), draw) for t in pi_cdf)
      indices, fallback = self._draw(key, first_step + tf.cast(draw, tf.int64) * steps_per_draw, radius_scale,
                                     max_darts, draw_cdf)
      return draw + 1, indices, fallback, filled + tf.cast(tf.reduce_any(fallback > 0), tf.int32)

    start = (tf.constant(0), tf.zeros([steps_per_draw, config.batch_size], tf.int32),
             tf.zeros([steps_per_draw], tf.int32), tf.constant(0))
    _, indices, fallback, filled = tf.while_loop(keep_drawing, next_draw, start, maximum_iterations=num_draws)
    return indices, fallback, filled

  def _draw(self, key: tf.Tensor, first_step: tf.Tensor, radius_scale: tf.Tensor, max_darts: int | tf.Tensor,
            pi_cdf: tuple[tf.Tensor, tf.Tensor] | None) -> tuple[tf.Tensor, tf.Tensor]:
    """The draw of steps `first_step` ... `first_step + S - 1`, darts by value following `pi_cdf` (`_effective_cdf`)."""
    config = self._config
    draw_key = tf.random.experimental.stateless_fold_in(key, first_step // config.steps_per_draw)
    streams = self._dart_streams(draw_key)
    max_darts = tf.convert_to_tensor(max_darts, tf.int32)
    k = config.batch_size

    def keep_throwing(thrown, block, accepted, count):
      del block, accepted
      return tf.logical_and(tf.reduce_any(count < k), thrown < max_darts)

    def throw_block(thrown, block, accepted, count):
      darts = self._darts(streams, thrown, tf.minimum(block, max_darts - thrown), pi_cdf)
      accepted, count, settled, survival = self._acceptance.accept(darts, accepted, count, radius_scale)
      return thrown + settled, self._next_block(survival, count), accepted, count

    # Every block settles at least one dart, so at most `max_darts` blocks run.
    start = (tf.constant(0), tf.constant(config.survivor_target),
             tf.zeros([config.steps_per_draw, k], tf.int32), tf.zeros([config.steps_per_draw], tf.int32))
    _, _, accepted, count = tf.while_loop(keep_throwing, throw_block, start, maximum_iterations=max_darts)
    indices = tf.cond(
        tf.reduce_any(count < k),
        lambda: self._fill_uniformly(draw_key, accepted, count),
        lambda: accepted)
    return indices, k - count

  def _next_block(self, survival: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """Darts per step of the next block: enough for the survivors a step still needs at the last block's survival rate.

    While rejections are rare a block is about what the batch still needs; near the packing limit
    (few survivors) blocks grow to the memory bound, so a batch the disks cannot fill throws its
    budget in a few blocks instead of hundreds.
    """
    config = self._config
    need = config.batch_size - tf.reduce_min(count)
    target = tf.clip_by_value(tf.cast(tf.math.ceil(config.survivor_margin * tf.cast(need, tf.float32)), tf.int32),
                              DART_ALIGN, config.survivor_target)
    # Rows of the next block's distance matrix against the accepted set stay within the bound.
    max_rows = tf.minimum(config.max_block_rows,
                          config.block_cells // (config.steps_per_draw * tf.maximum(tf.reduce_max(count), 1)))
    max_rows = tf.maximum(max_rows // DART_ALIGN * DART_ALIGN, DART_ALIGN)
    rows = tf.cast(target, tf.float32) / tf.maximum(survival, 1.0 / tf.cast(max_rows, tf.float32))
    rows = tf.cast(tf.minimum(tf.math.ceil(rows / DART_ALIGN) * DART_ALIGN, tf.cast(max_rows, tf.float32)), tf.int32)
    return tf.maximum(rows, DART_ALIGN)

  def _effective_cdf(self, pi: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """pi (`[S, K + 1]`) over the mingling values that occur in the data, as a CDF per step.

    Returns the CDF and, per step, the last value with positive mass (where a uniform number that
    rounding puts past the CDF's last entry belongs).
    """
    counts = self._state.value_counts
    assert counts is not None  # a plan with pi
    pi = tf.cast(pi, tf.float64)
    pi = tf.where(counts > 0, pi, tf.zeros_like(pi))
    total = tf.reduce_sum(pi, axis=-1, keepdims=True)
    check = tf.debugging.assert_positive(
        total, message="the mingling distribution pi puts no mass on a mingling value that occurs")
    with tf.control_dependencies([check]):
      cdf = tf.cumsum(pi / total, axis=-1)
    last_from_the_end = tf.argmax(tf.reverse(pi > 0.0, axis=[-1]), axis=-1, output_type=tf.int32)
    last = tf.shape(pi, out_type=tf.int32)[-1] - 1 - last_from_the_end
    return cdf, last

  def _dart_streams(self, draw_key: tf.Tensor) -> list[tuple[tf.Tensor, tf.Tensor]]:
    """Philox (key, counter) of the draw's dart streams: the points, or (darts by mingling value) values and members."""
    return [tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.random.experimental.stateless_fold_in(draw_key, stream))
            for stream in range(1, 2 if self._config.pi is None else 3)]

  def _darts(self, streams: list[tuple[tf.Tensor, tf.Tensor]], start: tf.Tensor, size: tf.Tensor,
             pi_cdf: tuple[tf.Tensor, tf.Tensor] | None) -> tf.Tensor:
    """`[S, size]` darts `start` ... `start + size - 1` of every step of the draw (`start` divisible by 4).

    Dart j of the draw's step s is element j * S + s of each stream: one Philox counter gives 4
    int32 or 2 float64 draws, so a block's draws begin at counter start * S / 4 (or / 2) and the
    darts do not depend on how the budget is cut into blocks.
    """
    steps = self._config.steps_per_draw

    def draws(stream, dtype, **bounds):
      key, counter = streams[stream]
      per_counter = 4 if dtype == tf.int32 else 2
      offset = tf.stack([tf.cast(start * steps // per_counter, tf.uint64), tf.constant(0, tf.uint64)])
      shape = tf.reshape(size * steps, [1])
      if dtype == tf.int32:
        flat = tf.raw_ops.StatelessRandomUniformIntV2(shape=shape, key=key, counter=counter + offset, alg=_PHILOX,
                                                      **bounds)
      else:
        flat = tf.raw_ops.StatelessRandomUniformV2(shape=shape, key=key, counter=counter + offset, alg=_PHILOX,
                                                   dtype=dtype)
      return tf.transpose(tf.reshape(flat, [size, steps]))

    if pi_cdf is None:
      return draws(0, tf.int32, minval=tf.constant(0), maxval=tf.constant(self._config.num_points))
    # Inverse-CDF sampling of the mingling value, elementwise from the key. (Not
    # `stateless_categorical`: its CPU kernel gives each shard of rows a differently offset random
    # stream, so its draws depend on how many threads run it; the stream and `batch_indices` ran
    # it with different thread pools and disagreed from k = 128 on.)
    cdf, last = pi_cdf
    value = tf.minimum(tf.searchsorted(cdf, draws(0, tf.float64), side="right", out_type=tf.int32), last[:, None])
    counts = tf.gather(self._state.value_counts, value)
    member = tf.cast(tf.minimum(tf.floor(draws(1, tf.float64) * counts), counts - 1.0), tf.int32)
    return tf.gather(self._state.points_by_value, tf.gather(self._state.value_offsets, value) + member)

  def _fill_uniformly(self, draw_key: tf.Tensor, accepted: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """Completes batches the darts could not fill with distinct points uniformly at random.

    Deterministic in the key, and O(k log k) per step for N > 8 k: per step, the first distinct
    points not in the batch yet among `fill_candidates` uniform draws with replacement. (The next
    new point of an i.i.d. uniform sequence is uniform over the points not seen, so the fill is a
    uniform random sample without replacement of the points not taken.) If a step's candidates
    run short (probability below 1e-40 with the default 2 k + 64 of them for N > 8 k, by
    Hoeffding's bound), the draw fills by scores instead, which is uniform too, so the law does
    not depend on which path ran.
    """
    config = self._config
    fill_key = tf.random.experimental.stateless_fold_in(draw_key, 0)
    if config.fill_candidates is None:
      return self._fill_by_scores(fill_key, accepted, count)
    steps, width, k = config.steps_per_draw, config.fill_candidates, config.batch_size
    candidates = tf.random.stateless_uniform([steps, width], tf.random.experimental.stateless_fold_in(fill_key, 1),
                                             minval=0, maxval=config.num_points, dtype=tf.int32)
    occupied = tf.range(k)[None, :] < count[:, None]
    # A candidate's first occurrence: the first of its run once sorted stably by value.
    order = tf.argsort(candidates, axis=1, stable=True)
    ordered = tf.gather(candidates, order, batch_dims=1)
    first_in_order = tf.concat([tf.ones([steps, 1], tf.bool), ordered[:, 1:] != ordered[:, :-1]], axis=1)
    first = tf.scatter_nd(tf.stack([step_rows(candidates), order], axis=2), first_in_order, [steps, width])
    fresh = tf.logical_and(first, not_accepted(candidates, accepted, occupied))
    filled, filled_count = self._acceptance.append_first(accepted, count, candidates, fresh)
    return tf.cond(tf.reduce_all(filled_count == k), lambda: filled,
                   lambda: self._fill_by_scores(fill_key, accepted, count))

  def _fill_by_scores(self, fill_key: tf.Tensor, accepted: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """The fill as the points with the largest stateless uniform scores among those not taken: O(N).

    (TensorFlow's `index_shuffle` would be O(k), but in TF 2.21 it uses only the low 8 bits of
    each seed word, so its permutations repeat every 256 steps.)
    """
    steps, num_points, k = self._config.steps_per_draw, self._config.num_points, self._config.batch_size
    # The name scope marks the draw's only O(N) work (for tests that look for per-step O(N) tensors).
    with tf.name_scope("fill_by_scores"):
      scores = tf.random.stateless_uniform([steps, num_points], fill_key)
      occupied = tf.range(k)[None, :] < count[:, None]
      # Points already in the batch score -1 and sink below every fresh point.
      taken = tf.where(occupied, accepted, num_points)
      scores = tf.tensor_scatter_nd_update(
          tf.concat([scores, tf.zeros([steps, 1])], axis=1),
          tf.stack([step_rows(taken), taken], axis=2),
          tf.fill([steps, k], -1.0))[:, :num_points]
      fresh = tf.math.top_k(scores, k).indices
      position = tf.maximum(tf.range(k)[None, :] - count[:, None], 0)
      return tf.where(occupied, accepted, tf.gather(fresh, position, batch_dims=1))


class Acceptance:
  """The disk tests and the acceptance of a configuration's draws on one dataset's tensors."""

  def __init__(self, config: DrawConfig, state: DrawState):
    self._config = config
    self._state = state

  def _sq_distances_between(self, rows: tf.Tensor, cols: tf.Tensor) -> tf.Tensor:
    """`[S, rows, cols]` shrunk squared distances per step."""
    state = self._state
    if state.sq_distances is None:
      row_x, col_x = tf.gather(state.features, rows), tf.gather(state.features, cols)
      row_norms, col_norms = tf.gather(state.shrunk_sq_norms, rows), tf.gather(state.shrunk_sq_norms, cols)
      if self._config.one_product:
        return _gram_per_step(as_rows(row_x, row_norms), as_columns(col_x, col_norms))
      return row_norms[:, :, None] + col_norms[:, None, :] - 2.0 * _gram_per_step(row_x, col_x)
    pairs = tf.cast(rows, tf.int64)[:, :, None] * self._config.num_points + tf.cast(cols, tf.int64)[:, None, :]
    return tf.gather(state.sq_distances, pairs)

  def conflicts(self, rows: tf.Tensor, cols: tf.Tensor, radius_scale: tf.Tensor) -> tf.Tensor:
    """`[S, rows, cols]` bool per step: same point, or closer than the smaller of the two radii."""
    same = lambda: tf.equal(rows[:, :, None], cols[:, None, :])  # noqa: E731
    uniform_radius = self._state.uniform_radius
    # (In a trace and in a refreshable thrower the radius is a tensor, never known to be 0.)
    if not self._config.disks or (isinstance(uniform_radius, float) and uniform_radius == 0.0):
      return same()
    sq_dist = self._sq_distances_between(rows, cols)
    if uniform_radius is not None:
      sq_radius = tf.square(uniform_radius * radius_scale)
      return tf.logical_or(same(), sq_dist < tf.where(sq_radius > 0.0, sq_radius, -np.inf))
    # Per-point radii: radius 0 means no disk, so identity must be tested separately.
    sq_radius = tf.square(radius_scale * tf.minimum(tf.gather(self._state.point_radius, rows)[:, :, None],
                                                    tf.gather(self._state.point_radius, cols)[:, None, :]))
    return tf.logical_or(same(), tf.logical_and(sq_radius > 0.0, sq_dist < sq_radius))

  def _survives(self, darts: tf.Tensor, accepted: tf.Tensor, count: tf.Tensor, radius_scale: tf.Tensor) -> tf.Tensor:
    """`[S, darts]` bool: the darts that conflict with no accepted point of their step."""
    config, state = self._config, self._state
    width = tf.reduce_max(count)
    columns = accepted[:, :width]
    occupied = tf.range(width)[None, :] < count[:, None]
    if not (config.one_disk_radius and config.survival_in_one_pass):
      hits = self.conflicts(darts, columns, radius_scale)
      return tf.logical_not(tf.reduce_any(tf.logical_and(hits, occupied[:, None, :]), axis=2))
    # One disk radius, large batches: the distance test is most of the draw. A dart that repeats
    # an accepted point is rejected without one (darts by mingling value repeat the few points of
    # the rare values often), and one without a disk conflicts with nothing else; for the others,
    # one pass over their distances to the accepted points with a disk (the minimum) replaces the
    # identity test, the comparison, the mask and the reduction.
    fresh = not_accepted(darts, columns, occupied)
    if state.uniform_radius is None:
      tested = tf.logical_and(fresh, tf.gather(state.point_radius, darts) > 0.0)
      blocking = tf.logical_and(occupied, tf.gather(state.point_radius, columns) > 0.0)
    else:
      tested, blocking = fresh, occupied
    rank = tf.cumsum(tf.cast(tested, tf.int32), axis=1)
    tested_width = tf.reduce_max(rank[:, -1])
    slots = tf.where(tested, rank - 1, tested_width)
    tested_darts = self._compacted(darts, slots, tested_width)
    sq_dist = self._sq_distances_between(tested_darts, columns)
    if config.steps_per_draw > 1 or state.uniform_radius is None:
      sq_dist = tf.where(blocking[:, None, :], sq_dist, np.inf)
    # (The tested darts and the accepted points they are tested against all have the one disk
    # radius. A minimum over no columns is +inf: nothing accepted blocks nothing. Radius 0: no disks.)
    if state.uniform_radius is None:
      sq_radius = tf.square(radius_scale * tf.gather(state.point_radius, tested_darts))
    else:
      sq_radius = tf.square(state.uniform_radius * radius_scale)
    clear = tf.logical_or(tf.reduce_min(sq_dist, axis=2) >= sq_radius, sq_radius <= 0.0)
    # The darts not tested read the padding slot, False: a repeat does not survive, a fresh dart
    # without a disk does.
    return tf.logical_or(tf.gather(tf.pad(clear, [[0, 0], [0, 1]]), slots, batch_dims=1),
                         tf.logical_and(fresh, tf.logical_not(tested)))

  def _compacted(self, values: tf.Tensor, slots: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
    """`[S, width]`: each step's `values` (`[S, n]` int32) moved to their `slots` (slot `width`: dropped).

    Slots that receive no value hold 0.
    """
    spare = tf.zeros([self._config.steps_per_draw, width + 1], tf.int32)
    return tf.tensor_scatter_nd_update(spare, tf.stack([step_rows(slots), slots], axis=2), values)[:, :width]

  def accept(self, darts: tf.Tensor, accepted: tf.Tensor, count: tf.Tensor,
             radius_scale: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Adds to each step's `accepted` exactly the darts the sequential algorithm would accept.

    Returns the new `accepted` and `count`, how many of the block's darts were settled (the rest
    are thrown again by the next block), and the largest fraction over steps of settled darts
    that survived the test against the accepted set.
    """
    size = tf.shape(darts)[1]
    survives = self._survives(darts, accepted, count, radius_scale)
    # A step settles its darts up to its `max_survivors`-th survivor; the block settles the darts
    # before the first step's cut (rounded down to a block start), which every step settled.
    rank = tf.cumsum(tf.cast(survives, tf.int32), axis=1)
    beyond = tf.logical_and(survives, rank > self._config.max_survivors)
    cut = tf.reduce_min(tf.where(tf.reduce_any(beyond, axis=1),
                                 tf.argmax(tf.cast(beyond, tf.int32), axis=1, output_type=tf.int32), size))
    settled = tf.where(cut < size, cut // DART_ALIGN * DART_ALIGN, size)
    survivors = tf.logical_and(survives, tf.range(size)[None, :] < settled)
    survivor_count = tf.reduce_sum(tf.cast(survivors, tf.int32), axis=1)
    width = tf.reduce_max(survivor_count)
    # The survivors, compacted in dart order.
    compact = self._compacted(darts, tf.where(survivors, rank - 1, width), width)
    valid = tf.range(width)[None, :] < survivor_count[:, None]
    earlier = tf.range(width)[None, :] < tf.range(width)[:, None]
    blocks = tf.logical_and(tf.logical_and(self.conflicts(compact, compact, radius_scale), earlier),
                            valid[:, None, :])

    # A dart is accepted once no earlier dart that blocks it can still be accepted, and rejected
    # once an earlier blocking dart is accepted. Each round settles at least the first undecided
    # dart of every step, so at most `width` rounds run; usually a handful.
    def unsettled(undecided, taken):
      del taken
      return tf.reduce_any(undecided)

    def settle(undecided, taken):
      live = tf.logical_or(undecided, taken)
      blocked = tf.reduce_any(tf.logical_and(blocks, live[:, None, :]), axis=2)
      taken = tf.logical_or(taken, tf.logical_and(undecided, tf.logical_not(blocked)))
      beaten = tf.reduce_any(tf.logical_and(blocks, taken[:, None, :]), axis=2)
      undecided = tf.logical_and(tf.logical_and(undecided, blocked), tf.logical_not(beaten))
      return undecided, taken

    _, taken = tf.while_loop(unsettled, settle, (valid, tf.zeros_like(valid)), maximum_iterations=width)
    survival = tf.cast(width, tf.float32) / tf.cast(settled, tf.float32)
    # The sequential loop stops at k accepted points.
    accepted, count = self.append_first(accepted, count, compact, taken)
    return accepted, count, settled, survival

  def append_first(self, accepted: tf.Tensor, count: tf.Tensor, values: tf.Tensor,
                   keep: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Appends to each step's `accepted` the first k - count `values` (`[S, width]`) that `keep` marks, in order."""
    batch_size = self._config.batch_size
    rank = tf.cumsum(tf.cast(keep, tf.int32), axis=1)
    keep = tf.logical_and(keep, rank <= batch_size - count[:, None])
    # Values not kept are written to a spare slot past the end, which is then dropped.
    slots = tf.where(keep, count[:, None] + rank - 1, batch_size)
    spare = tf.concat([accepted, tf.zeros([self._config.steps_per_draw, 1], tf.int32)], axis=1)
    accepted = tf.tensor_scatter_nd_update(
        spare, tf.stack([step_rows(slots), slots], axis=2), values)[:, :batch_size]
    return accepted, count + tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)


def not_accepted(darts: tf.Tensor, columns: tf.Tensor, occupied: tf.Tensor) -> tf.Tensor:
  """`[S, darts]` bool: the darts whose point is not among their step's accepted `columns` (`occupied`).

  A sort of the accepted points and a binary search per dart: O((darts + k) log k).
  """
  ordered = tf.sort(tf.where(occupied, columns, -1), axis=1)
  position = tf.searchsorted(ordered, darts, side="left", out_type=tf.int32)
  # Past the last accepted point: the padding, -1, is no point.
  found = tf.gather(tf.pad(ordered, [[0, 0], [0, 1]], constant_values=-1), position, batch_dims=1)
  return tf.not_equal(found, darts)


def step_rows(like: tf.Tensor) -> tf.Tensor:
  """`[S, width]` int32 holding each entry's row (step) number, for scatters into `[S, ...]`."""
  return tf.broadcast_to(tf.range(tf.shape(like)[0])[:, None], tf.shape(like))


def _gram_per_step(row_x: tf.Tensor, col_x: tf.Tensor) -> tf.Tensor:
  """`[S, rows, cols]` dot products of each step's rows with its columns, one 2-D `MatMul` per step.

  Inside the stream's single-device function, TensorFlow's `MatMul` kernel does these small
  products much faster than `BatchMatMul` over the step axis ("One matmul per step", BUILD_NOTES.md).
  """
  return tf.stack([tf.matmul(row, col, transpose_b=True) for row, col in zip(tf.unstack(row_x), tf.unstack(col_x))])


def inclusion_probabilities(config: DrawConfig, state: DrawState, radius_scale: float | tf.Tensor,
                            draw: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]], key: tf.Tensor,
                            tuning: DartTuning, verbose: bool) -> np.ndarray:
  """`[N]` each point's probability of being in a batch, from `tuning.inclusion_steps` draws.

  For a thrower with disks or darts by mingling value whose pi does not follow the step.
  Rao-Blackwellised over each draw's acceptance path, exact in expectation: while j points are
  accepted, the next dart that survives is a draw from the proposal (uniform, or pi_m / count_m
  over the points of mingling value m) restricted to the points no accepted disk covers, whatever
  the darts it took to come; so point i's probability of being accepted j-th, given the path, is
  q_i / Q_j when it is still free (Q_j: the proposal mass still free) and 0 otherwise. A draw
  contributes that sum over j for every point, not just an indicator for the k it holds, so
  a few hundred draws estimate every point's probability, also the rarely drawn ones. Points
  the fallback fill supplies are uniform over those not taken: (k − c) / (N − c) each, for a
  batch whose darts gave c. Cost: O(steps · k · N · d), one-time.

  Args:
    config: the thrower's configuration.
    state: the per-dataset tensors its draws run on.
    radius_scale: what every disk radius is multiplied by.
    draw: the thrower's traced draw of S steps (`DartThrower.traced_draw`).
    key: `[2]` int64 stateless key of these draws (not the stream's).
    tuning: the number of steps (`inclusion_steps`) and the bound on a conflict matrix
      (`inclusion_cells`).
    verbose: show a progress bar if the estimate takes more than about 2 s.
  """
  num_points, k, steps = config.num_points, config.batch_size, config.steps_per_draw
  proposal = np.ones(num_points)
  if config.pi is not None:
    assert state.value_counts is not None and state.points_by_value is not None  # a plan with pi
    counts = state.value_counts.numpy()
    pi = np.where(counts > 0, np.asarray(config.pi(state.value_histogram, tf.constant(0, tf.int64)), np.float64), 0.0)
    values = np.empty(num_points, np.int64)
    values[state.points_by_value.numpy()] = np.repeat(np.arange(len(counts)), counts.astype(np.int64))
    proposal = (pi / np.maximum(counts, 1.0))[values]
  acceptance = Acceptance(config, state)
  radius_scale = tf.constant(radius_scale, tf.float32)
  columns = max(1, tuning.inclusion_cells // (steps * k))

  def covered_from(rows: tf.Tensor, accepted: tf.Tensor) -> tf.Tensor:
    """`[S, N]` per step and point, the acceptance index from which an accepted disk covers it (c: never)."""
    order = tf.range(k)[None, :, None]
    valid = order < accepted[:, None, None]
    firsts = []
    for start in range(0, num_points, columns):
      cols = tf.range(start, min(start + columns, num_points))
      hits = tf.logical_and(acceptance.conflicts(rows, tf.tile(cols[None], [steps, 1]), radius_scale), valid)
      firsts.append(tf.reduce_min(tf.where(hits, order, k), axis=1))
    return tf.minimum(tf.concat(firsts, axis=1), accepted[:, None])

  # One trace for all draws; the [S, k, columns] conflicts never leave the function.
  covered_from = tf.function(covered_from, autograph=False, input_signature=(
      tf.TensorSpec([steps, k], tf.int32), tf.TensorSpec([steps], tf.int32)))
  total = np.zeros(num_points)
  num_draws = -(-tuning.inclusion_steps // steps)
  with _progress.bar("estimating inclusion probabilities", num_draws, verbose) as progress:
    for first_step in range(0, num_draws * steps, steps):
      indices, fallback = draw(key, tf.constant(first_step, tf.int64))
      accepted = k - fallback
      covered = covered_from(indices, accepted).numpy()
      accepted, indices = accepted.numpy(), indices.numpy()
      for step in range(steps):
        total += _path_inclusion(covered[step], int(accepted[step]), indices[step], proposal, k)
      progress.update(1)
  return total / (num_draws * steps)


def _path_inclusion(covered_from: np.ndarray, accepted: int, indices: np.ndarray, proposal: np.ndarray,
                    batch_size: int) -> np.ndarray:
  """Each point's probability of entering one batch given its acceptance path (`inclusion_probabilities`).

  Args:
    covered_from: `[N]` the number of accepted points after which an accepted disk covers the
      point (`accepted` if none does); a point is free while fewer are accepted.
    accepted: c, the points the darts accepted.
    indices: `[k]` the batch, the c accepted first.
    proposal: `[N]` unnormalised probability of a dart at each point.
    batch_size: k.
  """
  if accepted == 0:
    probability = np.zeros(len(proposal))
  else:
    # Q_j: the proposal's mass on the points still free while j are accepted, j < c.
    free_mass = np.cumsum(np.bincount(covered_from, weights=proposal, minlength=accepted + 1)[::-1])[::-1][:accepted]
    probability = proposal * np.cumsum(1.0 / free_mass)[np.minimum(covered_from, accepted - 1)]
  if accepted < batch_size:
    rest = np.ones(len(proposal), bool)
    rest[indices[:accepted]] = False
    probability[rest] += (batch_size - accepted) / (len(proposal) - accepted)
  return probability
