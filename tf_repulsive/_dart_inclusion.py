"""Each point's probability of being in a batch of the dart thrower, estimated from its draws."""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _alias
from tf_repulsive import _progress
from tf_repulsive._dart_blocks import Acceptance
from tf_repulsive._dart_config import DartTuning
from tf_repulsive._dart_config import DrawConfig
from tf_repulsive._dart_state import DrawState


def inclusion_probabilities(config: DrawConfig, state: DrawState, radius_scale: float | tf.Tensor,
                            draw: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]], key: tf.Tensor,
                            tuning: DartTuning, verbose: bool) -> np.ndarray:
  """`[N]` each point's probability of being in a batch, from `tuning.inclusion_steps` draws.

  For a thrower with disks, darts by weight, or darts by mingling value whose pi does not follow
  the step.
  Rao-Blackwellised over each draw's acceptance path, exact in expectation: while j points are
  accepted, the next dart that survives is a draw from the proposal (uniform, pi_m / count_m over
  the points of mingling value m, or the points' weights) restricted to the points no accepted
  disk covers, whatever the darts it took to come; so point i's probability of being accepted
  j-th, given the path, is q_i / Q_j when it is still free (Q_j: the proposal mass still free)
  and 0 otherwise. A draw
  contributes that sum over j for every point, not just an indicator for the k it holds, so
  a few hundred draws estimate every point's probability, also the rarely drawn ones. Points
  the fallback fill supplies are uniform over those not taken: (k − c) / (N − c) each, for a
  batch whose darts gave c. Cost: O(steps · k · N · d) with disks, O(steps · (N + k)) without,
  one-time.

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
  if config.weighted_darts:
    assert state.alias_threshold is not None and state.alias_points is not None  # a plan with weights
    proposal = _alias.masses(state.alias_threshold.numpy(), state.alias_points.numpy())
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

  def taken_at(rows: tf.Tensor, accepted: tf.Tensor) -> np.ndarray:
    """`covered_from` without disks: a point is covered from where it was accepted, O(S (N + k))."""
    rows, accepted = rows.numpy(), accepted.numpy()
    covered = np.repeat(accepted[:, None], num_points, axis=1)
    step, position = np.nonzero(np.arange(k)[None, :] < accepted[:, None])
    covered[step, rows[step, position]] = position
    return covered

  if config.disks:
    # One trace for all draws; the [S, k, columns] conflicts never leave the function.
    covered_from = tf.function(covered_from, autograph=False, input_signature=(
        tf.TensorSpec([steps, k], tf.int32), tf.TensorSpec([steps], tf.int32)))
  else:
    covered_from = taken_at
  total = np.zeros(num_points)
  num_draws = -(-tuning.inclusion_steps // steps)
  with _progress.bar("estimating inclusion probabilities", num_draws, verbose) as progress:
    for first_step in range(0, num_draws * steps, steps):
      indices, fallback = draw(key, tf.constant(first_step, tf.int64))
      accepted = k - fallback
      covered = np.asarray(covered_from(indices, accepted))
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
