"""The dart thrower's per-dataset tensors, prepared once: features, norms, radii, distances, tables."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import tensorflow as tf

from tf_repulsive import _alias
from tf_repulsive import _arrays
from tf_repulsive import _progress
from tf_repulsive._dart_config import DartPlan
from tf_repulsive._dart_config import DartTuning

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
    features: `[N, d]` float32 features, centred and scaled when their offset or norms call for it;
      `[0, 0]` without disks.
    shrunk_sq_norms: `[N]` float32 squared norms of `features`, shrunk by the float32 error bound;
      `[0]` without disks.
    point_radius: `[N]` float32 disk radius of every point (in the scale of `features`), or None
      for no disks.
    uniform_radius: the radius every point has, or None: a Python float as prepared, a float32
      tensor in a trace or a refreshable thrower.
    sq_distances: `[N * N]` float32 shrunk squared distances (row-major), or None.
    points_by_value: `[N]` int32 the points ordered by mingling value (darts by value), or None.
    value_counts: `[K + 1]` float64 the points of each mingling value, or None.
    value_offsets: `[K + 1]` int32 where each value's points start in `points_by_value`, or None.
    value_histogram: `[K + 1]` float64 the share of each mingling value, or None.
    alias_threshold: `[N]` float64 the alias table's thresholds (darts by point weight), or None.
    alias_points: `[N]` int32 the alias table's aliases, or None.
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
  alias_threshold: tf.Tensor | None = None
  alias_points: tf.Tensor | None = None

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
    tuning: the thrower's tuning (`center_row_block`, `cache_row_block`, `cache_from_dim`).
    distance_cache_bytes: when the `[N, N]` float32 matrix of squared distances fits in this
      many bytes and d >= `tuning.cache_from_dim`, it is computed here once and disk tests look
      distances up (O(k^2) per batch instead of O(k^2 d)).
    verbose: show a progress bar if computing that matrix takes more than about 2 s.

  Returns:
    The state, and whether every point with a disk has the same radius (one radius, or one and
    none).

  Raises:
    ValueError: if the plan has `pi` and no `mingling_values`.
  """
  num_points, dim = features.shape
  if plan.point_radius is None:
    # Without disks no distance is measured: the state holds no features (a refresh then copies
    # none, and the stream ships none).
    return _with_dart_tables(DrawState(features=tf.zeros([0, 0]), shrunk_sq_norms=tf.zeros([0])), plan), False
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
    if dim >= tuning.cache_from_dim and 4 * num_points * num_points <= distance_cache_bytes:
      state = dataclasses.replace(state, sq_distances=_pairwise_sq_distances(state, tuning.cache_row_block, verbose))
  return _with_dart_tables(state, plan), one_disk_radius


def _with_dart_tables(state: DrawState, plan: DartPlan) -> DrawState:
  """`state` with the tables the darts are drawn from: by mingling value, or by weight."""
  if plan.pi is not None:
    if plan.mingling_values is None:
      raise ValueError("a DartPlan with `pi` needs the `mingling_values` of the points.")
    order = np.argsort(plan.mingling_values, kind="stable")
    counts = np.bincount(plan.mingling_values, minlength=plan.num_mingling_values)
    state = dataclasses.replace(
        state, points_by_value=tf.constant(order.astype(np.int32)), value_counts=tf.constant(counts.astype(np.float64)),
        value_offsets=tf.constant(np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)),
        value_histogram=tf.constant(counts / counts.sum(), tf.float64))
  if plan.point_weights is not None:
    threshold, alias = _alias.alias_table(plan.point_weights)
    state = dataclasses.replace(state, alias_threshold=tf.constant(threshold), alias_points=tf.constant(alias))
  return state


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
