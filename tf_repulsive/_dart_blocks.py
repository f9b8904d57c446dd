"""The draw: darts thrown in blocks for S steps side by side, each block's acceptance, the fallback fill.

The sequential algorithm (paper, section 4 and Algorithm 1) throws one dart at a time and accepts
it unless it lies inside the disk of an accepted point. Here darts are thrown in blocks, and each
block accepts exactly what the sequential loop accepts from the same darts (`Acceptance`): its
darts are tested against the accepted set with one Gram matrix, the survivors are compacted, and
conflicts among them are settled with matrix ops in dart order. Dart j of a step is fixed by
(key, step, j) alone, so block sizes adapt to the acceptance rate without changing which darts
are thrown. Work per batch is O(darts * accepted * d), independent of the dataset size N.

`traced_draws` is the one trace of a configuration's draws, which every thrower of that
configuration draws with.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
import tensorflow as tf

from tf_repulsive._dart_config import DART_ALIGN
from tf_repulsive._dart_config import DrawConfig
from tf_repulsive._dart_state import DrawState
from tf_repulsive._dart_state import as_columns
from tf_repulsive._dart_state import as_rows

_PHILOX = tf.random.Algorithm.PHILOX.value

# The traces kept: each holds its traced graph, about 8 MiB of Python objects for Anneal PDS.
_TRACES_KEPT = 8


@functools.lru_cache(maxsize=_TRACES_KEPT)
def traced_draws(config: DrawConfig) -> tf.types.experimental.PolymorphicFunction:
  """The traced `draws` of `config`: one trace for every thrower of that configuration, whatever its data.

  A memo of a pure function of a frozen configuration, as a compilation cache is: the calibration,
  `batch_indices`, a refresh and another batcher on data of the same shape then skip the trace,
  which costs more than all of a calibration's draws. The function takes the per-dataset tensors
  as arguments (`DrawState.arguments`) and holds none, so a dropped pipeline frees its memory.
  """
  return tf.function(functools.partial(draws, config), autograph=False)


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
    """Philox (key, counter) of the draw's dart streams: one, or two for darts by mingling value or weight."""
    return [tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.random.experimental.stateless_fold_in(draw_key, stream))
            for stream in range(1, 3 if self._config.pi is not None or self._config.weighted_darts else 2)]

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

    if self._config.weighted_darts:
      # Walker's alias method: a uniform column, kept with its threshold, else its alias.
      column = draws(0, tf.int32, minval=tf.constant(0), maxval=tf.constant(self._config.num_points))
      kept = draws(1, tf.float64) < tf.gather(self._state.alias_threshold, column)
      return tf.where(kept, column, tf.gather(self._state.alias_points, column))
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
    fresh = tf.logical_and(first_occurrences(candidates), not_accepted(candidates, accepted, occupied))
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
