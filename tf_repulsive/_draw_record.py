"""What a batcher's stream records as it draws: counters, the last step delivered, a ring of recent steps.

The record lives in variables on the host and is written by the stream's own functions. It is
not part of iterator checkpoints and need not be: it describes what this process drew. The
callbacks read it to log each epoch's group shares and fallback fills at a cost that does not
grow with the epoch.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
import tensorflow as tf

from tf_repulsive import _contract
from tf_repulsive._stream_start import UNSET

if TYPE_CHECKING:
  from tf_repulsive import _refresh

# Steps whose fallback count and group counts are kept (per step, as it is drawn) for the logs.
RECORDED_STEPS = 4096


@dataclasses.dataclass(frozen=True)
class SamplingStats:
  """Counters of a batcher's work in this process (not part of iterator checkpoints).

  Attributes:
    batches: batches drawn, including any drawn ahead by prefetching.
    streams: batch streams (new iterators) that began drawing. An iterator restored from a
      checkpoint continues its stream.
    fallback_batches: batches the darts could not fill within `max_darts`. The fallback fill
      completed them uniformly at random.
    fallback_points: points supplied by that fill, over all batches.
    last_step_delivered: the step of the batch the stream last handed on (to `fit` or to the
      transformations after the batcher); None before the first.
    last_start: the step at which the last stream began; None before the first. A batcher with
      a fixed `start_step` always reports it.
    report: what the sampler reported of its preparation (`BatchDrawer.report`), by name. The
      Poisson disk samplers report `radius`, the disk radius in use. Easy, Dense and Anneal PDS
      also report `mingling_agreement`, the share of points whose mingling value equals an
      exhaustive nearest-neighbour search's, and with regression targets `target_gap`.
    refreshes: refreshes of the features installed (batchers with a `ModelSpace`; else 0).
    refresh_seconds: the seconds those refreshes took.
  """

  batches: int
  streams: int
  fallback_batches: int
  fallback_points: int
  last_step_delivered: int | None
  last_start: int | None
  report: dict[str, float]
  refreshes: int = 0
  refresh_seconds: float = 0.0


class DrawRecord:
  """The variables a stream writes as it draws, and what the handle reads from them.

  Args:
    groups: the drawer's point groups (`BatchDrawer.groups`), or None.
    regroupable: whether a refresh may regroup the points (a `ModelSpace` batcher).
  """

  def __init__(self, groups: _contract.PointGroups | None, regroupable: bool):
    self.num_groups = 0 if groups is None else len(groups.levels)
    # On the host, where the draw's single-device function runs (`_stream_ops`).
    with tf.device("CPU:0"):
      # Batches drawn, streams begun, batches that needed the fallback fill, points the fill supplied.
      self._counters = tf.Variable(tf.zeros([4], tf.int64), trainable=False)
      self.last_step_delivered = tf.Variable(UNSET, dtype=tf.int64, trainable=False)
      self.group_of_points: tf.Tensor | tf.Variable | None = None
      if groups is not None:
        of_points = groups.of_points.astype(np.int32)
        self.group_of_points = tf.Variable(of_points, trainable=False) if regroupable else tf.constant(of_points)
      # Ring of the last RECORDED_STEPS steps drawn: per row the step, the points the fallback
      # fill supplied, then the batch's count of points per group.
      self._steps = tf.Variable(
          tf.concat([tf.fill([RECORDED_STEPS, 1], tf.constant(UNSET, tf.int64)),
                     tf.zeros([RECORDED_STEPS, 1 + self.num_groups], tf.int64)], axis=1), trainable=False)

  def regroup(self, groups: _contract.PointGroups | None) -> None:
    """Takes the groups of a refreshed drawer (same name and number of groups)."""
    if groups is not None:
      assert isinstance(self.group_of_points, tf.Variable)  # regroupable
      self.group_of_points.assign(groups.of_points.astype(np.int32))

  def record(self, steps: tf.Tensor, offset: tf.Tensor, indices: tf.Tensor, fallback: tf.Tensor,
             read: Callable[[tf.Tensor], tf.Tensor]) -> list[tf.Operation]:
    """The ops that count and record the batches of `steps` (draw number `offset` of its stream).

    `read` gives what the stream's function uses for an array (its file's, with a `data_dir`).
    """
    recorded = [self._counters.assign_add(tf.stack([
        tf.cast(tf.size(fallback), tf.int64), tf.cast(tf.equal(offset, 0), tf.int64),
        tf.math.count_nonzero(fallback), tf.reduce_sum(fallback)]))]
    columns = [steps[:, None], fallback[:, None]]
    if self.group_of_points is not None:
      columns.append(tf.math.bincount(tf.gather(read(self.group_of_points), indices), minlength=self.num_groups,
                                      maxlength=self.num_groups, dtype=tf.int64, axis=-1))
    recorded.append(self._steps.scatter_nd_update((steps % RECORDED_STEPS)[:, None], tf.concat(columns, axis=1)))
    return recorded

  def delivered(self, step: tf.Tensor) -> tf.Operation:
    """The op that records `step` as the last one the stream handed on."""
    return self.last_step_delivered.assign(step)

  def stats(self, report: Mapping[str, float], refresher: _refresh.FeatureRefresher | None,
            last_start: int | None) -> SamplingStats:
    """The counters, the drawer's `report`, the refreshes of `refresher` (None: no ModelSpace), `last_start`."""
    batches, streams, fallback_batches, fallback_points = self._counters.numpy().tolist()
    last_step_delivered = int(self.last_step_delivered.numpy())
    return SamplingStats(batches=batches, streams=streams, fallback_batches=fallback_batches,
                         fallback_points=fallback_points,
                         last_step_delivered=None if last_step_delivered == UNSET else last_step_delivered,
                         last_start=last_start,
                         report=dict(report), refreshes=0 if refresher is None else refresher.refreshes,
                         refresh_seconds=0.0 if refresher is None else refresher.seconds)

  def rows(self, steps: np.ndarray, redraw: Callable[[int], tuple[np.ndarray, int]],
           groups: _contract.PointGroups | None, redrawable: np.ndarray,
           redraw_at_most: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per step `[fallback points, points per group ...]`, and which steps the rows hold.

    Steps the ring lacks are drawn again (`redraw(step)` gives the indices and fallback count)
    when they are `redrawable` and there are at most `redraw_at_most` of them (None: any number).
    """
    rows = self._steps.numpy()[steps % RECORDED_STEPS]
    found = rows[:, 0] == steps
    missing = np.flatnonzero(~found & redrawable)
    if redraw_at_most is None or missing.size <= redraw_at_most:
      for position in missing:
        indices, fallback = redraw(int(steps[position]))
        rows[position, 1] = fallback
        if groups is not None:
          rows[position, 2:] = np.bincount(groups.of_points[indices], minlength=self.num_groups)
      found[missing] = True
    return rows[:, 1:], found


def checked_steps(steps: Any, check_step: Callable[[Any], int]) -> np.ndarray:
  """`steps` as an int64 array, each checked by `check_step` (an integer array >= 0 at once)."""
  array = np.asarray(steps)
  if array.ndim == 1 and np.issubdtype(array.dtype, np.integer) and (array >= 0).all():
    return array.astype(np.int64)  # (a range, say: checked at once)
  return np.asarray([check_step(step) for step in steps], dtype=np.int64).reshape(-1)
