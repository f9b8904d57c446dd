"""Disk radii: half the median pairwise distance (the paper's Table 1 setting) and "auto"."""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _progress

# The radius is a property of the data, not of a run: the subsample and the calibration draws use
# fixed seeds, whatever seed the batches use.
_SUBSAMPLE_SEED = 20180529
_SUBSAMPLE_SIZE = 2000
_CALIBRATION_KEY = (_SUBSAMPLE_SEED, 0xCA1B)
# "auto": the scale is bracketed (at most 2x the median-based radius, i.e. the median distance:
# wider disks exclude rather than repel, and Easy PDS, whose disks only easy points have, would
# otherwise grow them without bound) and bisected to 1/16 of the bracket for the largest scale at
# which each batch of steps 0-15 fills within half the dart budget (fewer steps for k > 128: see
# `calibration_steps`). The radius is 90% of that:
# near the packing limit a batch needs many times the darts, and on data where that limit is
# sharp the largest radius that fits makes every batch several times slower (BUILD_NOTES.md). At
# the full budget, steps 0-31 must then need no fill (else the radius shrinks by 10%, at most 4
# times; a fill beyond that shows in stats() and the build's warning).
SEARCH_STEPS = 16
CHECK_STEPS = 32
# Batches of up to this size count fully; larger ones count as several (see `calibration_steps`).
_FULL_STEP_POINTS = 128
_SEARCH_BUDGET = 0.5
_MAX_SCALE = 2.0
_BISECTIONS = 4
_MARGIN = 0.9
_SHRINKS = 4

# The value of a sampler's `radius` that asks for calibration.
AUTO = "auto"


def half_median_distance(features: np.ndarray, subsample: int = _SUBSAMPLE_SIZE) -> float:
  """Half the median Euclidean distance between distinct points of a seeded subsample.

  Args:
    features: `[N, d]` float array, N >= 2.
    subsample: at most this many points enter the estimate (all pairs among them).

  Returns:
    The radius as a Python float (0.0 when most points coincide).
  """
  n = features.shape[0]
  rng = np.random.default_rng(_SUBSAMPLE_SEED)
  rows = rng.choice(n, size=min(n, subsample), replace=False)
  points = features[rows].astype(np.float64)
  points -= points.mean(axis=0)
  sq_norms = np.einsum("ij,ij->i", points, points)
  sq_dist = sq_norms[:, None] + sq_norms[None, :] - 2.0 * points @ points.T
  upper = np.triu_indices(len(rows), k=1)
  return 0.5 * float(np.sqrt(max(np.median(sq_dist[upper]), 0.0)))


def calibration_steps(steps: int, batch_size: int) -> int:
  """The steps a calibration test draws for `steps` batches of up to 128 points: fewer for larger batches.

  Whether a batch fills is decided by the darts its k acceptances need, a sum that concentrates as
  k grows: a batch of k > 128 points tells about as much as k / 128 small ones. At least one
  eighth of `steps` are drawn.
  """
  return max(steps // 8, min(steps, steps * _FULL_STEP_POINTS // batch_size))


def calibrated_scale(count_fills: Callable[[float, tf.Tensor, int, int], int], max_darts: int,
                     batch_size: int, verbose: bool) -> float:
  """90% of the largest factor on the base radius at which calibration batches fill with darts to spare.

  Args:
    count_fills: `(scale, key, steps, max_darts) -> fills`, as `DartThrower.count_fills`: how
      many of the batches of steps 0 .. steps - 1 with every radius times `scale` need the fill
      within `max_darts` darts each (it may stop counting at one).
    max_darts: the sampler's dart budget per batch.
    batch_size: k, which sets how many batches each test draws (`calibration_steps`).
    verbose: show a progress bar if calibrating takes more than about 2 s.

  Returns:
    The factor; 0.0 (no disks) when even tiny disks do not fit.
  """
  key = tf.constant(_CALIBRATION_KEY, tf.int64)
  search_darts = max(1, int(_SEARCH_BUDGET * max_darts))
  with _progress.bar("calibrating the radius", None, verbose) as progress:

    search_steps, check_steps = calibration_steps(SEARCH_STEPS, batch_size), calibration_steps(CHECK_STEPS, batch_size)

    def fits(scale: float, steps: int = search_steps, darts: int = search_darts) -> bool:
      progress.update(1)
      return count_fills(scale, key, steps, darts) == 0

    low, high = (1.0, _MAX_SCALE) if fits(1.0) else (0.0, 1.0)
    for _ in range(_BISECTIONS):
      middle = 0.5 * (low + high)
      low, high = (middle, high) if fits(middle) else (low, middle)
    # The cap is tried only when every candidate below it fitted.
    scale = _MARGIN * (_MAX_SCALE if high == _MAX_SCALE and fits(_MAX_SCALE) else low)
    for _ in range(_SHRINKS):
      if scale == 0.0 or fits(scale, check_steps, max_darts):
        break
      scale *= _MARGIN
  return scale
