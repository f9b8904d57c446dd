"""The draw: darts thrown in blocks for S steps side by side, then the fallback fill.

The sequential algorithm (paper, section 4 and Algorithm 1) throws one dart at a time and accepts
it unless it lies inside the disk of an accepted point. Here darts are thrown in blocks, and each
block accepts exactly what the sequential loop accepts from the same darts
(`_dart_acceptance.Acceptance`). Dart j of a step is fixed by (key, step, j) alone, so block
sizes adapt to the acceptance rate without changing which darts are thrown. Work per batch is
O(darts * accepted * d), independent of the dataset size N.
"""

from __future__ import annotations

import tensorflow as tf

from tf_repulsive._dart_acceptance import Acceptance
from tf_repulsive._dart_acceptance import first_occurrences
from tf_repulsive._dart_acceptance import not_accepted
from tf_repulsive._dart_acceptance import step_rows
from tf_repulsive._dart_config import DART_ALIGN
from tf_repulsive._dart_config import DrawConfig
from tf_repulsive._dart_state import DrawState

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
