"""Dart throwing for Poisson disk sampling over a finite point set, as TensorFlow graph ops.

The sequential algorithm (paper, section 4 and Algorithm 1) throws one dart at a time and accepts
it unless it lies inside the disk of an accepted point. Here darts are thrown in blocks: a block
is tested against the accepted set with one Gram matrix, the darts that survive are compacted,
conflicts among them are resolved with matrix ops in dart order, and the result is exactly what
the sequential loop accepts from the same darts. Dart j of a step is fixed by (key, step, j)
alone, so block sizes adapt to the acceptance rate without changing which darts are thrown. Work
per batch is O(darts * accepted * d), independent of the dataset size N.
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

_FLOAT32_EPS = float(np.finfo(np.float32).eps)
_PHILOX = tf.random.Algorithm.PHILOX.value
# Blocks start at dart numbers divisible by this, so that every block's darts begin on a Philox
# counter (4 int32 or 2 float64 draws each; see `_darts`).
_DART_ALIGN = 4
# Norms of the largest feature vector at which the features serve uncentred and unscaled: their
# squares and Gram products stay far from float32's underflow and overflow.
_RAW_NORMS = (2.0**-20, 2.0**20)
# The squared distance of the features' mean from the origin, over their mean squared distance
# from the mean, up to which the features serve uncentred.
_RAW_OFFSET_SQ = 4.0
# The per-dataset tensors of a thrower (those of its plan): what a refreshable thrower holds in
# variables, and what its traced draws take as arguments.
_STATE = ("_features", "_shrunk_sq_norms", "_point_radius", "_sq_distances", "_points_by_value", "_value_counts",
          "_value_offsets", "_value_histogram")


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
      batches (`_survives`) only then.
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
    step_rows_per_draw: steps share a draw while S * k stays within this (`steps_per_draw`).
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
      k >= this * (d + 2) (see `DartThrower.__init__`).
    fill_by_scores_up_to: the fallback fill draws candidates when N > this * k, and scores every
      point (O(N) = O(k)) below.
    fill_candidates_per_point: uniform candidates per step of that fill, per point of the batch
      (see `fill_extra_candidates`).
    fill_extra_candidates: candidates per step added to those: with the defaults, 2 k + 64 are
      enough to find the k distinct new points a step may need (see `_fill_uniformly`).
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


def steps_per_draw(batch_size: int, most: int, step_rows: int) -> int:
  """S, the steps one draw throws darts for side by side: a power of two up to `most` (and 16), S * k <= `step_rows`.

  The per-op cost of TensorFlow is paid once per draw, so small batches share a draw; large ones
  already give each op enough work.
  """
  return min(2 ** min(4, max(0, (step_rows // batch_size).bit_length() - 1)), most)


# Traced draws by configuration (`_trace_config`), most recently used last: throwers of the same
# configuration in this process draw with one trace, whichever batcher built them. Bounded, as
# each holds its traced graph (about 8 MiB of Python objects for Anneal PDS); a function holds no
# per-dataset tensor (they are its arguments).
_TRACES: collections.OrderedDict[tuple, Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor]]] = (
    collections.OrderedDict())
_MAX_TRACES = 8


def _traced_draws(template: DartThrower) -> Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
  """The traced `_draws_with_state` of `template`'s configuration: the one traced before, or a new one."""
  config = _trace_config(template)
  function = _TRACES.pop(config, None)
  if function is None:
    function = tf.function(functools.partial(DartThrower._draws_with_state, template), autograph=False)
  _TRACES[config] = function
  while len(_TRACES) > _MAX_TRACES:
    _TRACES.popitem(last=False)
  return function


def _trace_config(template: DartThrower) -> tuple:
  """What a trace of `template`'s draws is built from besides the per-dataset tensors.

  Its Python values (sizes, block bounds, flags) and its plan's (pi, the kind of disks): two
  throwers with the same configuration and tensors of the same shapes draw with one trace.
  """
  plan = template._plan
  values = sorted((name, value) for name, value in vars(template).items()
                  if name != "radius_scale" and (value is None or isinstance(value, (bool, int, float, str))))
  return (tuple(values), plan.pi, plan.point_radius is None, plan.num_mingling_values, plan.one_radius,
          plan.one_disk_radius, plan.pi_follows_step)


class DartThrower(BatchDrawer):
  """Draws the indices of mini-batches as a pure function of a stateless key and the steps."""

  def __init__(self, features: np.ndarray, plan: DartPlan, batch_size: int,
               distance_cache_bytes: int = 0, verbose: bool = False, max_steps_per_draw: int = 16,
               tuning: DartTuning = DartTuning()):
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
    """
    num_points, dim = features.shape
    # The variables of a refreshable thrower (`refreshable`), by attribute name; None: constants.
    self._variables: dict[str, tf.Variable] | None = None
    self._num_points = num_points
    self._batch_size = batch_size
    self._plan = plan
    self._tuning = tuning
    # Every disk radius is multiplied by this (see `with_radius_scale`).
    self.radius_scale = 1.0
    self.steps_per_draw = steps_per_draw(batch_size, max_steps_per_draw, tuning.step_rows_per_draw)
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
      self._features = _arrays.to_tensor(features)
    else:
      for rows in blocks:
        centered_rows = features[rows].astype(np.float64) - mean
        sq_norms[rows] = np.einsum("ij,ij->i", centered_rows, centered_rows)
      max_norm = float(np.sqrt(np.max(sq_norms, initial=0.0)))
      scale = 2.0 ** -math.ceil(math.log2(max_norm)) if max_norm > 0 else 1.0
      centered = _arrays.empty((num_points, dim), np.float32)
      for rows in blocks:
        centered[rows] = (features[rows].astype(np.float64) - mean) * scale
      self._features = _arrays.to_tensor(centered)
    # Squared distances are |x|^2 + |y|^2 - 2 x.y, or one float32 dot product of length d + 2,
    # [x, |x|^2, 1] . [-2 y, 1, |y|^2] (`_as_rows`, `_as_columns`). A rigorous bound on the rounding
    # error of either, with the norms rounded to float32, is tolerance * (|x|^2 + |y|^2).
    # Shrinking the squared norms by it makes pairs within that error of the disk boundary count
    # as conflicts, so accepted pairs are at least the radius apart in exact arithmetic; the same
    # point is always "closer than" a positive radius.
    tolerance = 2 * (dim + 4) * _FLOAT32_EPS
    self._shrunk_sq_norms = tf.constant(((1.0 - tolerance) * scale**2 * sq_norms).astype(np.float32))
    # The augmented rows cost a copy of each block's gathered rows, O((darts + accepted) d); the
    # norms added after the product cost passes over the matrix, O(darts * accepted): about
    # 0.6 k^2 against 1.75 k d per block, so one product from k = 3 (d + 2) on.
    self._one_product = batch_size >= tuning.one_product_from_k_over_d * (dim + 2)
    self._sq_distances = None
    self._point_radius = self._uniform_radius = None
    # Whether every point with a disk has the same radius (one radius, or one and none).
    self._one_disk_radius = False
    self._points_by_value = self._value_counts = self._value_offsets = self._value_histogram = None
    if plan.point_radius is not None:
      radius = (plan.point_radius * scale).astype(np.float32)
      # One radius for all points (Vanilla, Dense, Anneal) needs no per-pair minimum.
      self._uniform_radius = float(radius[0]) if np.all(radius == radius[0]) else None
      disk_radii = radius[radius > 0]
      self._one_disk_radius = bool(np.all(disk_radii == disk_radii[0])) if disk_radii.size else True
      self._point_radius = tf.constant(radius)
      if 4 * num_points * num_points <= distance_cache_bytes:
        self._sq_distances = self._pairwise_sq_distances(verbose)
    if plan.pi is not None:
      if plan.mingling_values is None:
        raise ValueError("a DartPlan with `pi` needs the `mingling_values` of the points.")
      order = np.argsort(plan.mingling_values, kind="stable")
      counts = np.bincount(plan.mingling_values, minlength=plan.num_mingling_values)
      self._points_by_value = tf.constant(order.astype(np.int32))
      self._value_counts = tf.constant(counts.astype(np.float64))
      self._value_offsets = tf.constant(np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32))
      self._value_histogram = tf.constant(counts / counts.sum(), tf.float64)
    # A block aims for enough survivors to fill what a step still needs (`survivor_margin` more,
    # for the ones that block each other), up to `max_survivor_target`; it settles at most
    # `max_survivors_over_target` times that.
    self._survivor_margin = tuning.survivor_margin
    self._survivor_target = _aligned(min(math.ceil(tuning.survivor_margin * batch_size), tuning.max_survivor_target))
    self._max_survivors = tuning.max_survivors_over_target * self._survivor_target
    self._block_cells = tuning.block_cells
    self._max_block_rows = max(_DART_ALIGN, tuning.block_cells // (self.steps_per_draw * (dim + 2)))
    self._survival_in_one_pass = batch_size >= tuning.one_pass_from
    # Uniform draws with replacement per step for the fallback fill, which are enough to find the
    # k distinct new points it may need (see `_fill_uniformly`); None: fill by scores, O(N) but then
    # N is a few k.
    self._fill_candidates = (tuning.fill_candidates_per_point * batch_size + tuning.fill_extra_candidates
                             if num_points > tuning.fill_by_scores_up_to * batch_size else None)
    self._draws_on_state = self._configuration_trace()
    # A refreshable thrower's draw, traced once on its variables (`refreshable`).
    self._traced_variable_draw: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None = None

  def _configuration_trace(self) -> Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
    """The trace of the draws of this thrower's configuration, which takes the per-dataset tensors.

    One trace serves every draw: the radius calibration's, at any radius scale and dart budget,
    the batcher's (`traced_draw`), at any key, and the pipeline's (`draw` copies it in); the
    per-dataset tensors are its arguments, so that every thrower of the same configuration reuses
    it (`_traced_draws`: a refresh's, another batcher's on data of the same shape; a trace costs
    more than all of a calibration's draws). It draws with a template that holds none of them, nor
    the plan's per-point arrays, nor another trace: a function that referenced the thrower holding
    it would be a cycle, and keep the tensors (the distance cache, say) until the next garbage
    collection; a kept function would keep the arrays.
    """
    template = copy.copy(self)
    for name in _STATE:
      setattr(template, name, None)
    template._uniform_radius = None
    for name in ("_draws_on_state", "_traced_variable_draw"):
      vars(template).pop(name, None)
    plan = self._plan
    template._plan = dataclasses.replace(
        plan, point_radius=None if plan.point_radius is None else np.empty(0), mingling_values=None)
    return _traced_draws(template)

  def _pairwise_sq_distances(self, verbose: bool) -> tf.Tensor:
    """`[N * N]` shrunk squared distances (row-major), computed like the on-the-fly test."""
    num_points, row_block = self._num_points, self._tuning.cache_row_block
    matrix = _arrays.empty((num_points, num_points), np.float32)
    columns = _as_columns(self._features, self._shrunk_sq_norms)
    with _progress.bar("distance cache", num_points, verbose) as progress:
      for start in range(0, num_points, row_block):
        rows = _as_rows(self._features[start:start + row_block], self._shrunk_sq_norms[start:start + row_block])
        matrix[start:start + row_block] = tf.matmul(rows, columns, transpose_b=True).numpy()
        progress.update(rows.shape[0])
    return _arrays.to_tensor(matrix.reshape(-1))

  def refreshable(self) -> DartThrower:
    """This thrower with its per-dataset tensors in variables on the host, for `refresh_from`.

    It draws what this thrower draws. The variables let a thrower of the same plan built on new
    features of the same shape (features recomputed from a model as it trains) hand over its
    tensors without a new trace of the draw. One radius for all points stays one radius only
    when the plan says so (`DartPlan.one_radius`), not because the first data gave it.
    """
    live = copy.copy(self)
    if not self._plan.one_radius:
      live._uniform_radius = None
    if self._one_disk_radius and not (self._plan.one_radius or self._plan.one_disk_radius):
      live._one_disk_radius = False
      live._draws_on_state = live._configuration_trace()
    state = {**live._trace_state(), "radius_scale": tf.constant(self.radius_scale, tf.float32)}
    with tf.device("CPU:0"):
      live._variables = {name: tf.Variable(value, trainable=False) for name, value in state.items()}
    # As in `__init__`: the trace draws with a copy that does not hold the trace.
    live._traced_variable_draw = tf.function(functools.partial(DartThrower.draw, copy.copy(live)), autograph=False,
                                     input_signature=(tf.TensorSpec([2], tf.int64), tf.TensorSpec([], tf.int64)))
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
    values = {name: getattr(other, name, None) for name in self._variables}
    values["radius_scale"] = tf.constant(other.radius_scale, tf.float32)
    if "_uniform_radius" in values:
      values["_uniform_radius"] = None if other._uniform_radius is None else tf.constant(
          other._uniform_radius, tf.float32)
    for name, value in values.items():
      variable = self._variables[name]
      if value is None or value.shape != variable.shape or value.dtype != variable.dtype:
        raise ValueError(
            f"the refreshed thrower's {name.lstrip('_')} is "
            f"{'missing' if value is None else f'{value.dtype.name} {value.shape}'}, not "
            f"{variable.dtype.name} {variable.shape}: a refresh keeps the sampler, the data size and the "
            "feature dimension.")
    for name, value in values.items():
      self._variables[name].assign(value)
    self.report, self.groups = other.report, other.groups

  def _snapshot(self) -> DartThrower:
    """This refreshable thrower with the variables' values read once, for one draw."""
    assert self._variables is not None
    snapshot = copy.copy(self)
    for name, variable in self._variables.items():
      setattr(snapshot, name, variable.read_value())
    return snapshot

  def with_radius_scale(self, radius_scale: float) -> DartThrower:
    """This thrower with every disk radius multiplied by `radius_scale` (shares all tensors)."""
    scaled = copy.copy(self)
    scaled.radius_scale = float(radius_scale)
    return scaled

  def pi(self, step: tf.Tensor) -> tf.Tensor | None:
    return None if self._plan.pi is None else self._plan.pi(self._value_histogram, step)

  def inclusion_probabilities(self, key: tf.Tensor, verbose: bool) -> np.ndarray | None:
    """`[N]` each point's probability of being in a batch, from `inclusion_steps` draws; None under Anneal PDS.

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
      key: `[2]` int64 stateless key of these draws (not the stream's).
      verbose: show a progress bar if the estimate takes more than about 2 s.
    """
    num_points, k = self._num_points, self._batch_size
    if self._plan.pi_follows_step:
      return None
    if self._plan.point_radius is None and self._plan.pi is None:
      return np.full(num_points, k / num_points)
    thrower = self if self._variables is None else self._snapshot()
    proposal = np.ones(num_points)
    if self._plan.pi is not None:
      assert thrower._value_counts is not None and thrower._points_by_value is not None  # a plan with pi
      counts = thrower._value_counts.numpy()
      pi = np.where(counts > 0, np.asarray(thrower.pi(tf.constant(0, tf.int64)), np.float64), 0.0)
      values = np.empty(num_points, np.int64)
      values[thrower._points_by_value.numpy()] = np.repeat(np.arange(len(counts)), counts.astype(np.int64))
      proposal = (pi / np.maximum(counts, 1.0))[values]
    draw = self.traced_draw()
    steps = self.steps_per_draw
    radius_scale = tf.constant(thrower.radius_scale, tf.float32)
    columns = max(1, self._tuning.inclusion_cells // (steps * k))

    def covered_from(rows: tf.Tensor, accepted: tf.Tensor) -> tf.Tensor:
      """`[S, N]` per step and point, the acceptance index from which an accepted disk covers it (c: never)."""
      order = tf.range(k)[None, :, None]
      valid = order < accepted[:, None, None]
      firsts = []
      for start in range(0, num_points, columns):
        cols = tf.range(start, min(start + columns, num_points))
        hits = tf.logical_and(thrower._conflicts(rows, tf.tile(cols[None], [steps, 1]), radius_scale), valid)
        firsts.append(tf.reduce_min(tf.where(hits, order, k), axis=1))
      return tf.minimum(tf.concat(firsts, axis=1), accepted[:, None])

    # One trace for all draws; the [S, k, columns] conflicts never leave the function.
    covered_from = tf.function(covered_from, autograph=False, input_signature=(
        tf.TensorSpec([steps, k], tf.int32), tf.TensorSpec([steps], tf.int32)))
    total = np.zeros(num_points)
    num_draws = -(-self._tuning.inclusion_steps // steps)
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

  def count_fills(self, radius_scale: float, key: tf.Tensor, steps: int, max_darts: int) -> int:
    """How many draws of steps 0 .. steps - 1 (whole draws) need the fallback fill within `max_darts` darts a batch.

    Stops counting at the first draw with a fill. For calibrating the radius: every scale and
    budget runs the one trace of `traced_draw`.
    """
    _, _, filled = self._draws_on_state(
        self._trace_state(), key, tf.constant(0, tf.int64), tf.constant(-(-steps // self.steps_per_draw), tf.int32),
        tf.constant(radius_scale, tf.float32), tf.constant(max_darts, tf.int32))
    return int(filled)

  def traced_draw(self) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """`draw` through the calibration's trace, at this thrower's radius scale and dart budget."""
    if self._traced_variable_draw is not None:
      return self._traced_variable_draw
    state, settings = self._one_draw_arguments()

    def draw(key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
      indices, fallback, _ = self._draws_on_state(state, key, first_step, *settings)
      return indices, fallback

    return draw

  def _one_draw_arguments(self) -> tuple[dict[str, tf.Tensor], tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
    """What `_draws_on_state` takes besides the key and first step, for one draw of this thrower.

    The per-dataset tensors, and the number of draws (1), radius scale and dart budget.
    """
    return self._trace_state(), (tf.constant(1, tf.int32), tf.cast(self.radius_scale, tf.float32),
                                 tf.constant(self._plan.max_darts, tf.int32))

  def _trace_state(self) -> dict[str, tf.Tensor]:
    """The per-dataset tensors `_draws_on_state` takes (a one-radius thrower's radius among them)."""
    state = {name: getattr(self, name) for name in _STATE if getattr(self, name) is not None}
    if self._uniform_radius is not None:
      state["_uniform_radius"] = tf.convert_to_tensor(self._uniform_radius, tf.float32)
    return state

  @staticmethod
  def _draws_with_state(template: DartThrower, state: dict[str, tf.Tensor], key: tf.Tensor, first_step: tf.Tensor,
                        num_draws: tf.Tensor, radius_scale: tf.Tensor,
                        max_darts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """What `template`'s `_draws` returns with the per-dataset tensors `state`."""
    thrower = copy.copy(template)
    for name, value in state.items():
      setattr(thrower, name, value)
    return thrower._draws(key, first_step, num_draws, radius_scale, max_darts)

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
    thrower = self if self._variables is None else self._snapshot()
    state, settings = thrower._one_draw_arguments()
    indices, fallback, _ = _stream_ops.inlined(self._draws_on_state, state, key, first_step, *settings)
    return indices, fallback

  def _draws(self, key: tf.Tensor, first_step: tf.Tensor, num_draws: tf.Tensor, radius_scale: tf.Tensor,
             max_darts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """`num_draws` consecutive draws from `first_step` on, up to the first that needs the fill.

    Returns the last draw's indices and fallback counts, and how many draws needed the fill.
    """
    steps_per_draw = self.steps_per_draw
    pi_cdf = None
    if self._plan.pi is not None:
      # One vectorised evaluation of the schedule for all steps of the draws (a loop for
      # schedules whose ops TensorFlow cannot vectorise), and its check, before the loop: an
      # `Assert` inside the loop's body slows the dart throwing in it by a quarter or more
      # (BUILD_NOTES.md, "No check inside the draw's loops").
      # (`identity`: the loop's outputs must be its own ops, also for a constant pi.)
      pi_cdf = self._effective_cdf(tf.vectorized_map(
          lambda step: tf.identity(self.pi(step)),
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

    start = (tf.constant(0), tf.zeros([steps_per_draw, self._batch_size], tf.int32),
             tf.zeros([steps_per_draw], tf.int32), tf.constant(0))
    _, indices, fallback, filled = tf.while_loop(keep_drawing, next_draw, start, maximum_iterations=num_draws)
    return indices, fallback, filled

  def _draw(self, key: tf.Tensor, first_step: tf.Tensor, radius_scale: tf.Tensor, max_darts: int | tf.Tensor,
            pi_cdf: tuple[tf.Tensor, tf.Tensor] | None) -> tuple[tf.Tensor, tf.Tensor]:
    """The draw of steps `first_step` ... `first_step + S - 1`, darts by value following `pi_cdf` (`_effective_cdf`)."""
    draw_key = tf.random.experimental.stateless_fold_in(key, first_step // self.steps_per_draw)
    streams = self._dart_streams(draw_key)
    max_darts = tf.convert_to_tensor(max_darts, tf.int32)
    k = self._batch_size

    def keep_throwing(thrown, block, accepted, count):
      del block, accepted
      return tf.logical_and(tf.reduce_any(count < k), thrown < max_darts)

    def throw_block(thrown, block, accepted, count):
      darts = self._darts(streams, thrown, tf.minimum(block, max_darts - thrown), pi_cdf)
      accepted, count, settled, survival = self._accept(darts, accepted, count, radius_scale)
      return thrown + settled, self._next_block(survival, count), accepted, count

    # Every block settles at least one dart, so at most `max_darts` blocks run.
    start = (tf.constant(0), tf.constant(self._survivor_target),
             tf.zeros([self.steps_per_draw, k], tf.int32), tf.zeros([self.steps_per_draw], tf.int32))
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
    need = self._batch_size - tf.reduce_min(count)
    target = tf.clip_by_value(tf.cast(tf.math.ceil(self._survivor_margin * tf.cast(need, tf.float32)), tf.int32),
                              _DART_ALIGN, self._survivor_target)
    # Rows of the next block's distance matrix against the accepted set stay within the bound.
    max_rows = tf.minimum(self._max_block_rows,
                          self._block_cells // (self.steps_per_draw * tf.maximum(tf.reduce_max(count), 1)))
    max_rows = tf.maximum(max_rows // _DART_ALIGN * _DART_ALIGN, _DART_ALIGN)
    rows = tf.cast(target, tf.float32) / tf.maximum(survival, 1.0 / tf.cast(max_rows, tf.float32))
    rows = tf.cast(tf.minimum(tf.math.ceil(rows / _DART_ALIGN) * _DART_ALIGN, tf.cast(max_rows, tf.float32)), tf.int32)
    return tf.maximum(rows, _DART_ALIGN)

  def _effective_cdf(self, pi: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """pi (`[S, K + 1]`) over the mingling values that occur in the data, as a CDF per step.

    Returns the CDF and, per step, the last value with positive mass (where a uniform number that
    rounding puts past the CDF's last entry belongs).
    """
    counts = self._value_counts
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
            for stream in range(1, 2 if self._plan.pi is None else 3)]

  def _darts(self, streams: list[tuple[tf.Tensor, tf.Tensor]], start: tf.Tensor, size: tf.Tensor,
             pi_cdf: tuple[tf.Tensor, tf.Tensor] | None) -> tf.Tensor:
    """`[S, size]` darts `start` ... `start + size - 1` of every step of the draw (`start` divisible by 4).

    Dart j of the draw's step s is element j * S + s of each stream: one Philox counter gives 4
    int32 or 2 float64 draws, so a block's draws begin at counter start * S / 4 (or / 2) and the
    darts do not depend on how the budget is cut into blocks.
    """
    steps = self.steps_per_draw

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
      return draws(0, tf.int32, minval=tf.constant(0), maxval=tf.constant(self._num_points))
    # Inverse-CDF sampling of the mingling value, elementwise from the key. (Not
    # `stateless_categorical`: its CPU kernel gives each shard of rows a differently offset random
    # stream, so its draws depend on how many threads run it; the stream and `batch_indices` ran
    # it with different thread pools and disagreed from k = 128 on.)
    cdf, last = pi_cdf
    value = tf.minimum(tf.searchsorted(cdf, draws(0, tf.float64), side="right", out_type=tf.int32), last[:, None])
    counts = tf.gather(self._value_counts, value)
    member = tf.cast(tf.minimum(tf.floor(draws(1, tf.float64) * counts), counts - 1.0), tf.int32)
    return tf.gather(self._points_by_value, tf.gather(self._value_offsets, value) + member)

  def _sq_distances_between(self, rows: tf.Tensor, cols: tf.Tensor) -> tf.Tensor:
    """`[S, rows, cols]` shrunk squared distances per step."""
    if self._sq_distances is None:
      row_x, col_x = tf.gather(self._features, rows), tf.gather(self._features, cols)
      row_norms, col_norms = tf.gather(self._shrunk_sq_norms, rows), tf.gather(self._shrunk_sq_norms, cols)
      if self._one_product:
        return _gram_per_step(_as_rows(row_x, row_norms), _as_columns(col_x, col_norms))
      return row_norms[:, :, None] + col_norms[:, None, :] - 2.0 * _gram_per_step(row_x, col_x)
    pairs = tf.cast(rows, tf.int64)[:, :, None] * self._num_points + tf.cast(cols, tf.int64)[:, None, :]
    return tf.gather(self._sq_distances, pairs)

  def _conflicts(self, rows: tf.Tensor, cols: tf.Tensor, radius_scale: tf.Tensor) -> tf.Tensor:
    """`[S, rows, cols]` bool per step: same point, or closer than the smaller of the two radii."""
    same = lambda: tf.equal(rows[:, :, None], cols[:, None, :])  # noqa: E731
    # (A refreshable thrower's radius is a tensor, never known to be 0.)
    if self._plan.point_radius is None or (isinstance(self._uniform_radius, float) and self._uniform_radius == 0.0):
      return same()
    sq_dist = self._sq_distances_between(rows, cols)
    if self._uniform_radius is not None:
      sq_radius = tf.square(self._uniform_radius * radius_scale)
      return tf.logical_or(same(), sq_dist < tf.where(sq_radius > 0.0, sq_radius, -np.inf))
    # Per-point radii: radius 0 means no disk, so identity must be tested separately.
    sq_radius = tf.square(radius_scale * tf.minimum(tf.gather(self._point_radius, rows)[:, :, None],
                                                    tf.gather(self._point_radius, cols)[:, None, :]))
    return tf.logical_or(same(), tf.logical_and(sq_radius > 0.0, sq_dist < sq_radius))

  def _survives(self, darts: tf.Tensor, accepted: tf.Tensor, count: tf.Tensor, radius_scale: tf.Tensor) -> tf.Tensor:
    """`[S, darts]` bool: the darts that conflict with no accepted point of their step."""
    width = tf.reduce_max(count)
    columns = accepted[:, :width]
    occupied = tf.range(width)[None, :] < count[:, None]
    if not (self._one_disk_radius and self._survival_in_one_pass):
      hits = self._conflicts(darts, columns, radius_scale)
      return tf.logical_not(tf.reduce_any(tf.logical_and(hits, occupied[:, None, :]), axis=2))
    # One disk radius, large batches: the distance test is most of the draw. A dart that repeats
    # an accepted point is rejected without one (darts by mingling value repeat the few points of
    # the rare values often), and one without a disk conflicts with nothing else; for the others,
    # one pass over their distances to the accepted points with a disk (the minimum) replaces the
    # identity test, the comparison, the mask and the reduction.
    fresh = self._not_accepted(darts, columns, occupied)
    if self._uniform_radius is None:
      tested = tf.logical_and(fresh, tf.gather(self._point_radius, darts) > 0.0)
      blocking = tf.logical_and(occupied, tf.gather(self._point_radius, columns) > 0.0)
    else:
      tested, blocking = fresh, occupied
    rank = tf.cumsum(tf.cast(tested, tf.int32), axis=1)
    tested_width = tf.reduce_max(rank[:, -1])
    slots = tf.where(tested, rank - 1, tested_width)
    tested_darts = self._compacted(darts, slots, tested_width)
    sq_dist = self._sq_distances_between(tested_darts, columns)
    if self.steps_per_draw > 1 or self._uniform_radius is None:
      sq_dist = tf.where(blocking[:, None, :], sq_dist, np.inf)
    # (The tested darts and the accepted points they are tested against all have the one disk
    # radius. A minimum over no columns is +inf: nothing accepted blocks nothing. Radius 0: no disks.)
    if self._uniform_radius is None:
      sq_radius = tf.square(radius_scale * tf.gather(self._point_radius, tested_darts))
    else:
      sq_radius = tf.square(self._uniform_radius * radius_scale)
    clear = tf.logical_or(tf.reduce_min(sq_dist, axis=2) >= sq_radius, sq_radius <= 0.0)
    # The darts not tested read the padding slot, False: a repeat does not survive, a fresh dart
    # without a disk does.
    return tf.logical_or(tf.gather(tf.pad(clear, [[0, 0], [0, 1]]), slots, batch_dims=1),
                         tf.logical_and(fresh, tf.logical_not(tested)))

  def _compacted(self, values: tf.Tensor, slots: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
    """`[S, width]`: each step's `values` (`[S, n]` int32) moved to their `slots` (slot `width`: dropped).

    Slots that receive no value hold 0.
    """
    spare = tf.zeros([self.steps_per_draw, width + 1], tf.int32)
    return tf.tensor_scatter_nd_update(spare, tf.stack([_step_rows(slots), slots], axis=2), values)[:, :width]

  @staticmethod
  def _not_accepted(darts: tf.Tensor, columns: tf.Tensor, occupied: tf.Tensor) -> tf.Tensor:
    """`[S, darts]` bool: the darts whose point is not among their step's accepted `columns` (`occupied`).

    A sort of the accepted points and a binary search per dart: O((darts + k) log k).
    """
    ordered = tf.sort(tf.where(occupied, columns, -1), axis=1)
    position = tf.searchsorted(ordered, darts, side="left", out_type=tf.int32)
    # Past the last accepted point: the padding, -1, is no point.
    found = tf.gather(tf.pad(ordered, [[0, 0], [0, 1]], constant_values=-1), position, batch_dims=1)
    return tf.not_equal(found, darts)

  def _accept(self, darts: tf.Tensor, accepted: tf.Tensor, count: tf.Tensor,
              radius_scale: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Adds to each step's `accepted` exactly the darts the sequential algorithm would accept.

    Returns the new `accepted` and `count`, how many of the block's darts were settled (the rest
    are thrown again by the next block), and the largest fraction over steps of settled darts
    that survived the test against the accepted set.
    """
    size = tf.shape(darts)[1]
    survives = self._survives(darts, accepted, count, radius_scale)
    # A step settles its darts up to its `_max_survivors`-th survivor; the block settles the darts
    # before the first step's cut (rounded down to a block start), which every step settled.
    rank = tf.cumsum(tf.cast(survives, tf.int32), axis=1)
    beyond = tf.logical_and(survives, rank > self._max_survivors)
    cut = tf.reduce_min(tf.where(tf.reduce_any(beyond, axis=1),
                                 tf.argmax(tf.cast(beyond, tf.int32), axis=1, output_type=tf.int32), size))
    settled = tf.where(cut < size, cut // _DART_ALIGN * _DART_ALIGN, size)
    survivors = tf.logical_and(survives, tf.range(size)[None, :] < settled)
    survivor_count = tf.reduce_sum(tf.cast(survivors, tf.int32), axis=1)
    width = tf.reduce_max(survivor_count)
    # The survivors, compacted in dart order.
    compact = self._compacted(darts, tf.where(survivors, rank - 1, width), width)
    valid = tf.range(width)[None, :] < survivor_count[:, None]
    earlier = tf.range(width)[None, :] < tf.range(width)[:, None]
    blocks = tf.logical_and(tf.logical_and(self._conflicts(compact, compact, radius_scale), earlier),
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
    accepted, count = self._append_first(accepted, count, compact, taken)
    return accepted, count, settled, survival

  def _append_first(self, accepted: tf.Tensor, count: tf.Tensor, values: tf.Tensor,
                    keep: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Appends to each step's `accepted` the first k - count `values` (`[S, width]`) that `keep` marks, in order."""
    rank = tf.cumsum(tf.cast(keep, tf.int32), axis=1)
    keep = tf.logical_and(keep, rank <= self._batch_size - count[:, None])
    # Values not kept are written to a spare slot past the end, which is then dropped.
    slots = tf.where(keep, count[:, None] + rank - 1, self._batch_size)
    spare = tf.concat([accepted, tf.zeros([self.steps_per_draw, 1], tf.int32)], axis=1)
    accepted = tf.tensor_scatter_nd_update(
        spare, tf.stack([_step_rows(slots), slots], axis=2), values)[:, :self._batch_size]
    return accepted, count + tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)

  def _fill_uniformly(self, draw_key: tf.Tensor, accepted: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """Completes batches the darts could not fill with distinct points uniformly at random.

    Deterministic in the key, and O(k log k) per step for N > 8 k: per step, the first distinct
    points not in the batch yet among `_fill_candidates` uniform draws with replacement. (The next
    new point of an i.i.d. uniform sequence is uniform over the points not seen, so the fill is a
    uniform random sample without replacement of the points not taken.) If a step's candidates
    run short (probability below 1e-40 with the default 2 k + 64 of them for N > 8 k, by
    Hoeffding's bound), the draw fills by scores instead, which is uniform too, so the law does
    not depend on which path ran.
    """
    fill_key = tf.random.experimental.stateless_fold_in(draw_key, 0)
    if self._fill_candidates is None:
      return self._fill_by_scores(fill_key, accepted, count)
    steps, width, k = self.steps_per_draw, self._fill_candidates, self._batch_size
    candidates = tf.random.stateless_uniform([steps, width], tf.random.experimental.stateless_fold_in(fill_key, 1),
                                             minval=0, maxval=self._num_points, dtype=tf.int32)
    occupied = tf.range(k)[None, :] < count[:, None]
    # A candidate's first occurrence: the first of its run once sorted stably by value.
    order = tf.argsort(candidates, axis=1, stable=True)
    ordered = tf.gather(candidates, order, batch_dims=1)
    first_in_order = tf.concat([tf.ones([steps, 1], tf.bool), ordered[:, 1:] != ordered[:, :-1]], axis=1)
    first = tf.scatter_nd(tf.stack([_step_rows(candidates), order], axis=2), first_in_order, [steps, width])
    fresh = tf.logical_and(first, self._not_accepted(candidates, accepted, occupied))
    filled, filled_count = self._append_first(accepted, count, candidates, fresh)
    return tf.cond(tf.reduce_all(filled_count == k), lambda: filled,
                   lambda: self._fill_by_scores(fill_key, accepted, count))

  def _fill_by_scores(self, fill_key: tf.Tensor, accepted: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """The fill as the points with the largest stateless uniform scores among those not taken: O(N).

    (TensorFlow's `index_shuffle` would be O(k), but in TF 2.21 it uses only the low 8 bits of
    each seed word, so its permutations repeat every 256 steps.)
    """
    # The name scope marks the draw's only O(N) work (for tests that look for per-step O(N) tensors).
    with tf.name_scope("fill_by_scores"):
      scores = tf.random.stateless_uniform([self.steps_per_draw, self._num_points], fill_key)
      occupied = tf.range(self._batch_size)[None, :] < count[:, None]
      # Points already in the batch score -1 and sink below every fresh point.
      taken = tf.where(occupied, accepted, self._num_points)
      scores = tf.tensor_scatter_nd_update(
          tf.concat([scores, tf.zeros([self.steps_per_draw, 1])], axis=1),
          tf.stack([_step_rows(taken), taken], axis=2),
          tf.fill([self.steps_per_draw, self._batch_size], -1.0))[:, :self._num_points]
      fresh = tf.math.top_k(scores, self._batch_size).indices
      position = tf.maximum(tf.range(self._batch_size)[None, :] - count[:, None], 0)
      return tf.where(occupied, accepted, tf.gather(fresh, position, batch_dims=1))


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


def _aligned(count: int) -> int:
  """`count` rounded up to a block start."""
  return -(-count // _DART_ALIGN) * _DART_ALIGN


def _step_rows(like: tf.Tensor) -> tf.Tensor:
  """`[S, width]` int32 holding each entry's row (step) number, for scatters into `[S, ...]`."""
  return tf.broadcast_to(tf.range(tf.shape(like)[0])[:, None], tf.shape(like))


def _as_rows(x: tf.Tensor, sq_norms: tf.Tensor) -> tf.Tensor:
  """[x, |x|^2, 1]: its dot product with `_as_columns` of y is the squared distance |x - y|^2."""
  return tf.concat([x, sq_norms[..., None], tf.ones_like(sq_norms)[..., None]], axis=-1)


def _as_columns(y: tf.Tensor, sq_norms: tf.Tensor) -> tf.Tensor:
  """[-2 y, 1, |y|^2] (see `_as_rows`)."""
  return tf.concat([-2.0 * y, tf.ones_like(sq_norms)[..., None], sq_norms[..., None]], axis=-1)


def _gram_per_step(row_x: tf.Tensor, col_x: tf.Tensor) -> tf.Tensor:
  """`[S, rows, cols]` dot products of each step's rows with its columns, one 2-D `MatMul` per step.

  Inside the stream's single-device function, TensorFlow's `MatMul` kernel does these small
  products much faster than `BatchMatMul` over the step axis ("One matmul per step", BUILD_NOTES.md).
  """
  return tf.stack([tf.matmul(row, col, transpose_b=True) for row, col in zip(tf.unstack(row_x), tf.unstack(col_x))])
