"""Which darts of a block join each step's batch: the test against the accepted set, then the settling.

A block's darts are tested against the accepted set with one Gram matrix, the darts that survive
are compacted, and conflicts among them are resolved with matrix ops in dart order: the result is
exactly what the sequential loop accepts from the same darts.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from tf_repulsive._dart_config import DART_ALIGN
from tf_repulsive._dart_config import DrawConfig
from tf_repulsive._dart_state import DrawState
from tf_repulsive._dart_state import as_columns
from tf_repulsive._dart_state import as_rows


class Acceptance:
  """The disk tests and the acceptance of a configuration's draws on one dataset's tensors."""

  def __init__(self, config: DrawConfig, state: DrawState):
    self._config = config
    self._state = state

  def _per_step(self, rows: tf.Tensor, cols: tf.Tensor, finish: Callable[..., tf.Tensor],
                *step_args: tf.Tensor) -> tf.Tensor:
    """`finish(sq_dist, *args)` of each step's `[rows, cols]` shrunk squared distances, stacked over steps.

    `finish` takes one step's distances and its slices of `step_args` (`[S, ...]` each), or, with
    the distance cache, all steps at once with the whole `step_args`. It runs before the stack,
    so the stack copies its result (a comparison, a minimum), not the float distances: at large
    k that copy is a visible part of the draw.
    """
    state = self._state
    if state.sq_distances is not None:
      pairs = tf.cast(rows, tf.int64)[:, :, None] * self._config.num_points + tf.cast(cols, tf.int64)[:, None, :]
      return finish(tf.gather(state.sq_distances, pairs), *step_args)
    # (The settling measures a block's darts against themselves: one gather serves both sides.)
    row_x, row_norms = tf.gather(state.features, rows), tf.gather(state.shrunk_sq_norms, rows)
    col_x, col_norms = (row_x, row_norms) if cols is rows else (tf.gather(state.features, cols),
                                                                tf.gather(state.shrunk_sq_norms, cols))
    if self._config.one_product:
      lhs, rhs = tf.unstack(as_rows(row_x, row_norms)), tf.unstack(as_columns(col_x, col_norms))
      # One 2-D `MatMul` per step: inside the stream's single-device function TensorFlow's
      # `MatMul` kernel does these small products much faster than `BatchMatMul` over the step
      # axis ("One matmul per step", BUILD_NOTES.md).
      sq_dists = [tf.matmul(row, col, transpose_b=True) for row, col in zip(lhs, rhs)]
    else:
      sq_dists = [row_norm[:, None] + col_norm[None, :] - 2.0 * tf.matmul(row, col, transpose_b=True)
                  for row, col, row_norm, col_norm in zip(tf.unstack(row_x), tf.unstack(col_x),
                                                          tf.unstack(row_norms), tf.unstack(col_norms))]
    per_step_args = [tf.unstack(arg) for arg in step_args]
    return tf.stack([finish(sq_dist, *(args[step] for args in per_step_args))
                     for step, sq_dist in enumerate(sq_dists)])

  def conflicts(self, rows: tf.Tensor, cols: tf.Tensor, radius_scale: tf.Tensor) -> tf.Tensor:
    """`[S, rows, cols]` bool per step: same point, or closer than the smaller of the two radii."""
    same = tf.equal(rows[:, :, None], cols[:, None, :])
    if not self._has_disks():
      return same
    return tf.logical_or(same, self._per_step(rows, cols, self._inside(radius_scale), *self._radii(rows, cols)))

  def _drops_repeats(self) -> bool:
    """Whether a block drops the darts that repeat an earlier dart of their step before the settling.

    Such a dart is rejected, as the sequential loop rejects it: the earlier copy is accepted, or
    blocked by an accepted point that blocks this copy too. The sort that finds them pays where
    darts repeat the same few points often (darts by mingling value or weight), and without disks,
    where distinct survivors need no settling at all. Uniform darts with disks rarely repeat: an
    identity test in the settling is cheaper there.
    """
    return self._config.pi is not None or self._config.weighted_darts or not self._has_disks()

  def _has_disks(self) -> bool:
    """Whether the points may have disks.

    In a trace and in a refreshable thrower the one radius is a tensor, never known to be 0.
    """
    uniform_radius = self._state.uniform_radius
    return self._config.disks and not (isinstance(uniform_radius, float) and uniform_radius == 0.0)

  def _inside(self, radius_scale: tf.Tensor, within: tf.Tensor | None = None) -> Callable[..., tf.Tensor]:
    """A `finish` of `_per_step`: whether a pair is closer than the smaller of its radii (`_radii`).

    With `within` (bool, broadcast against the distances), only the pairs it marks can be inside:
    for one radius it sets the others' bound to -inf, so that one comparison replaces a
    comparison and a mask (each a pass over the block's matrix).
    """
    uniform_radius = self._state.uniform_radius
    if uniform_radius is not None:
      sq_radius = tf.square(uniform_radius * radius_scale)
      below = tf.where(sq_radius > 0.0, sq_radius, -np.inf)
      if within is not None:
        below = tf.where(within, below, -np.inf)
      return lambda sq_dist: sq_dist < below

    # Per-point radii: radius 0 means no disk.
    def inside(sq_dist, row_radius, col_radius):
      sq_radius = tf.square(radius_scale * tf.minimum(row_radius[..., :, None], col_radius[..., None, :]))
      closer = tf.logical_and(sq_radius > 0.0, sq_dist < sq_radius)
      return closer if within is None else tf.logical_and(closer, within)

    return inside

  def _radii(self, rows: tf.Tensor, cols: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """What `_inside` takes besides the distances: nothing for one radius, else the points' radii."""
    if self._state.uniform_radius is not None:
      return ()
    return tf.gather(self._state.point_radius, rows), tf.gather(self._state.point_radius, cols)

  def _survives(self, darts: tf.Tensor, accepted: tf.Tensor, count: tf.Tensor, radius_scale: tf.Tensor) -> tf.Tensor:
    """`[S, darts]` bool: the darts that conflict with no accepted point of their step."""
    config, state = self._config, self._state
    width = tf.reduce_max(count)
    columns = accepted[:, :width]
    occupied = tf.range(width)[None, :] < count[:, None]
    if not (config.one_disk_radius and config.survival_in_one_pass):
      # A dart conflicts with an accepted point when it is that point (a sort and a binary search
      # find these, O((darts + k) log k)) or lies within its disk (each step's rows reduced
      # before the steps are stacked).
      def tested():
        fresh = not_accepted(darts, columns, occupied)
        if not self._has_disks():
          return fresh
        def within_a_disk(sq_dist, occupied, *radii):
          return tf.reduce_any(self._inside(radius_scale, within=occupied[..., None, :])(sq_dist, *radii), axis=-1)

        blocked = self._per_step(darts, columns, within_a_disk, occupied, *self._radii(darts, columns))
        return tf.logical_and(fresh, tf.logical_not(blocked))

      # Nothing accepted yet (a draw's first block, the only one of most small batches): every
      # dart survives, as the test would find, without gathering the darts' rows for distances
      # to no point.
      return tf.cond(width > 0, tested, lambda: tf.ones(tf.shape(darts), tf.bool))
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
    # (With one step and one radius every accepted point blocks: no mask.)
    masked = config.steps_per_draw > 1 or state.uniform_radius is None

    def nearest(sq_dist, blocks):
      return tf.reduce_min(tf.where(blocks[..., None, :], sq_dist, np.inf) if masked else sq_dist, axis=-1)

    # (The tested darts and the accepted points they are tested against all have the one disk
    # radius. A minimum over no columns is +inf: nothing accepted blocks nothing. Radius 0: no disks.)
    min_sq_dist = self._per_step(tested_darts, columns, nearest, blocking)
    if state.uniform_radius is None:
      sq_radius = tf.square(radius_scale * tf.gather(state.point_radius, tested_darts))
    else:
      sq_radius = tf.square(state.uniform_radius * radius_scale)
    clear = tf.logical_or(min_sq_dist >= sq_radius, sq_radius <= 0.0)
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
    if self._drops_repeats():
      survives = tf.logical_and(survives, first_occurrences(darts))
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
    # Distinct darts without disks conflict with nothing: all are taken.
    taken = self._settled(compact, valid, width, radius_scale) if self._has_disks() else valid
    survival = tf.cast(width, tf.float32) / tf.cast(settled, tf.float32)
    # The sequential loop stops at k accepted points.
    accepted, count = self.append_first(accepted, count, compact, taken)
    return accepted, count, settled, survival

  def _settled(self, compact: tf.Tensor, valid: tf.Tensor, width: tf.Tensor, radius_scale: tf.Tensor) -> tf.Tensor:
    """`[S, width]` bool: the survivors (`compact`, the first `valid`) the sequential loop takes."""
    # Dart i is blocked by an earlier dart j within the smaller disk, or at the same point (only
    # when repeats are kept). Only valid rows are ever undecided, and the valid darts are a
    # prefix, so an earlier dart of a valid row is valid: no mask for the columns.
    earlier = tf.range(width)[None, :] < tf.range(width)[:, None]
    inside, radii = self._inside(radius_scale), self._radii(compact, compact)
    if self._drops_repeats():
      blocks = self._per_step(compact, compact, lambda sq_dist, *pair: tf.logical_and(inside(sq_dist, *pair), earlier),
                              *radii)
    else:
      same = tf.equal(compact[:, :, None], compact[:, None, :])
      blocks = tf.logical_and(tf.logical_or(self._per_step(compact, compact, inside, *radii), same), earlier)
    # The blocking pairs as a list (step, dart, earlier dart): dense passes over the
    # `[S, width, width]` matrix would cost every round what one pass costs, and a block has few
    # pairs (the blocked darts, and the one or few earlier darts that block each).
    pairs = tf.cast(tf.where(blocks), tf.int32)
    blocked_dart = pairs[:, 0] * width + pairs[:, 1]
    blocker = pairs[:, 0] * width + pairs[:, 2]
    num_darts = self._config.steps_per_draw * width

    def any_blocker(among):
      """Per dart (flat), whether an earlier dart that blocks it is `among` (flat bool)."""
      hits = tf.math.unsorted_segment_sum(tf.cast(tf.gather(among, blocker), tf.int32), blocked_dart, num_darts)
      return hits > 0

    # A dart is accepted once no earlier dart that blocks it can still be accepted, and rejected
    # once an earlier blocking dart is accepted. Each round settles at least the first undecided
    # dart of every step, so at most `width` rounds run; usually a handful.
    def unsettled(undecided, taken):
      del taken
      return tf.reduce_any(undecided)

    def settle(undecided, taken):
      blocked = any_blocker(tf.logical_or(undecided, taken))
      taken = tf.logical_or(taken, tf.logical_and(undecided, tf.logical_not(blocked)))
      beaten = any_blocker(taken)
      undecided = tf.logical_and(tf.logical_and(undecided, blocked), tf.logical_not(beaten))
      return undecided, taken

    flat_valid = tf.reshape(valid, [-1])
    _, taken = tf.while_loop(unsettled, settle, (flat_valid, tf.zeros_like(flat_valid)), maximum_iterations=width)
    return tf.reshape(taken, tf.shape(valid))

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


def first_occurrences(values: tf.Tensor) -> tf.Tensor:
  """`[S, n]` bool: whether each entry of `values` (`[S, n]` int32) is the first of its value in its row.

  A stable sort per row: O(n log n).
  """
  order = tf.argsort(values, axis=1, stable=True)
  ordered = tf.gather(values, order, batch_dims=1)
  first_in_order = tf.concat([tf.ones_like(ordered[:, :1], tf.bool), ordered[:, 1:] != ordered[:, :-1]], axis=1)
  return tf.scatter_nd(tf.stack([step_rows(values), order], axis=2), first_in_order, tf.shape(values))


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
