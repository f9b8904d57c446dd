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
# otherwise grow them without bound) and bisected to 1/64 of the bracket on 64 draws per
# candidate. 90% of that, away from jamming, where a batch needs many more darts, must then pass
# 1024 draws without a fill (else it shrinks by 10%, at most 4 times; a fill beyond that shows in
# stats() and the build's warning): a radius whose batches need the fill 1% of the time passes
# that with probability 3e-5 (256 draws let it pass with 8%, and it did: Easy PDS on the sine
# boundary, 2-3 fills in 200 steps).
SEARCH_DRAWS = 64
CALIBRATION_DRAWS = 1024
_MAX_SCALE = 2.0
_BISECTIONS = 6
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


def calibrated_scale(count_fills: Callable[[tf.Tensor, tf.Tensor, int], tf.Tensor], verbose: bool) -> float:
  """The largest factor on the base radius for which no calibration draw needs the fallback fill.

  Args:
    count_fills: `(scale, key, draws) -> fills`, as `DartThrower.count_fills`: how many of the
      draws of steps 0 .. draws - 1 with every radius times `scale` need the fill (it may stop
      counting at one).
    verbose: show a progress bar if calibrating takes more than about 2 s.

  Returns:
    The factor; 0.0 (no disks) when even tiny disks do not fit.
  """
  count = tf.function(count_fills)
  key = tf.constant(_CALIBRATION_KEY, tf.int64)
  with _progress.bar("calibrating the radius", None, verbose) as progress:

    def fits(scale: float, draws: int = SEARCH_DRAWS) -> bool:
      progress.update(1)
      return int(count(tf.constant(scale, tf.float32), key, tf.constant(draws))) == 0

    if not fits(1.0):
      low, high = 0.0, 1.0
    elif fits(_MAX_SCALE):
      low = high = _MAX_SCALE
    else:
      low, high = 1.0, _MAX_SCALE
    if high > low:
      for _ in range(_BISECTIONS):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if fits(middle) else (low, middle)
    scale = _MARGIN * low
    for _ in range(_SHRINKS):
      if scale == 0.0 or fits(scale, CALIBRATION_DRAWS):
        break
      scale *= _MARGIN
  return scale
