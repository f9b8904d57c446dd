"""Walker's alias table: darts by per-point weight at O(1) each.

A dart picks a column uniformly and keeps it with the column's threshold, else takes the
column's alias. The table is built once per set of weights, vectorised (the sweep of
Hübschle-Schneider and Sanders, "Parallel Weighted Random Sampling", 2022, written with prefix
sums): O(N log N) in numpy, no loop over the points.
"""

from __future__ import annotations

import numpy as np


def alias_table(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """The alias table of `weights`: `[N]` float64 thresholds in [0, 1] and `[N]` int32 aliases.

  Column i's dart stays at i with probability `threshold[i]` and goes to `alias[i]` otherwise,
  so point i is hit with probability `weights[i] / sum(weights)` (`masses` inverts it).

  Args:
    weights: `[N]` finite non-negative weights with a positive sum.
  """
  weights = np.asarray(weights, np.float64)
  num_points = weights.size
  scaled = weights / weights.sum() * num_points
  light = np.flatnonzero(scaled < 1.0)
  heavy = np.flatnonzero(scaled >= 1.0)
  threshold = np.ones(num_points)
  alias = np.arange(num_points, dtype=np.int64)
  # The heavy points' excess over 1 lies along a line, in order; the light points' deficits use
  # it up in order. A light point borrows from the heavy point whose stretch of the line holds
  # its start. A heavy point whose stretch is used up keeps what is left of its own column and
  # borrows the rest from the next heavy point.
  deficit_ends = np.cumsum(1.0 - scaled[light])
  deficit_starts = deficit_ends - (1.0 - scaled[light])
  excess_ends = np.cumsum(scaled[heavy] - 1.0)
  if heavy.size:
    threshold[light] = scaled[light]
    alias[light] = heavy[np.minimum(np.searchsorted(excess_ends, deficit_starts, side="right"), heavy.size - 1)]
    # x_j: where the deficits of the light points that borrow from heavy points 0 ... j end (0
    # for none). Heavy point j lends them all but x_j - E_j of its stretch, which it borrows from
    # the next heavy point.
    borrowers = np.searchsorted(deficit_starts, excess_ends, side="left")
    ends = np.where(borrowers > 0, deficit_ends[np.maximum(borrowers - 1, 0)] if light.size else 0.0, 0.0)
    threshold[heavy] = np.clip(1.0 - (ends - excess_ends), 0.0, 1.0)
    following = np.append(heavy[1:], heavy[-1])
    alias[heavy] = following
  return threshold, alias.astype(np.int32)


def masses(threshold: np.ndarray, alias: np.ndarray) -> np.ndarray:
  """`[N]` each point's probability of being hit by a dart of the table (`alias_table`)."""
  num_points = threshold.size
  threshold = np.asarray(threshold, np.float64)
  return (threshold + np.bincount(alias, weights=1.0 - threshold, minlength=num_points)) / num_points
