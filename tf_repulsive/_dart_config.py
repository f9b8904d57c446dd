"""What the dart thrower is given and what a trace of its draw is built from: Python values only.

A sampler resolves to a `DartPlan` on a dataset. `DartTuning` holds the thrower's sizes and
thresholds. `DrawConfig` is what a trace of the draw depends on besides the per-dataset tensors
(`_dart_state.DrawState`): throwers of equal configurations draw with one trace (`_dart_blocks.traced_draws`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import tensorflow as tf

# Probability over mingling values at global step n (a float64 tensor), given the data's histogram
# of mingling values (float64 [K + 1]).
MinglingPi = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]

# Blocks start at dart numbers divisible by this, so that every block's darts begin on a Philox
# counter (4 int32 or 2 float64 draws each; see `_dart_blocks.BlockDraws._darts`).
DART_ALIGN = 4


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
      batches (`_dart_blocks.Acceptance`) only then.
    pi_follows_step: whether `pi` changes with the step (Anneal PDS), so that the law of a batch,
      and each point's probability of being in it, does too.
    point_weights: `[N]` non-negative weights with a positive sum: each dart hits a point with
      probability proportional to its weight (the importance samplers); None: darts uniform, or
      by mingling value with `pi`. Not with `pi`.
  """

  point_radius: np.ndarray | None
  pi: MinglingPi | None
  mingling_values: np.ndarray | None
  num_mingling_values: int
  max_darts: int
  one_radius: bool = False
  one_disk_radius: bool = False
  pi_follows_step: bool = False
  point_weights: np.ndarray | None = None

  def __post_init__(self):
    if self.pi is not None and self.point_weights is not None:
      raise ValueError("a DartPlan draws its darts by mingling value (`pi`) or by `point_weights`, not both.")


@dataclasses.dataclass(frozen=True)
class DartTuning:
  """The dart thrower's sizes and thresholds, which trade speed against memory.

  None of them changes the law of a batch. Some change which batch a seed gives (how steps share
  a draw's dart streams, how the fallback fill runs), so the samplers use the defaults.

  Attributes:
    step_rows_per_draw: steps share a draw while S * k stays within this (`DrawConfig.of`): the
      per-op cost of TensorFlow is paid once per draw, and large batches give each op enough work.
    max_survivor_target: the most survivors a block aims for per step; more would make the
      settling matrix quadratic in k.
    max_survivors_over_target: survivors of the test against the accepted set that one block
      settles per step, at most, over the number it aims for (the settling works on their
      `[S, m, m]` conflict matrix).
    survivor_margin: survivors a block aims for per point a step still needs: a quarter more,
      for the ones that block each other.
    tight_blocks_from_dim: from this feature dimension on, without the distance cache, a block
      aims for exactly the points a step still needs (margin 1). There a dart's distance products
      cost more than the next block's per-op cost, which the darts that block each other then pay.
    block_cells: bound on the elements of a block's distance matrix against the accepted set and
      of its gathered dart rows (S * darts * max(accepted, d + 2)).
    one_pass_from: from this batch size on, with one disk radius, the test of a block's darts
      against the accepted set sets aside the darts that repeat an accepted point (a sort and a
      search) and those without a disk, and takes one pass over the others' distances (their
      minimum); below it those ops cost more than the passes they save.
    one_product_from_k_over_d: squared distances as one product of augmented rows from
      k >= this * (d + 2) (see `DrawConfig.of`).
    fill_by_scores_up_to: the fallback fill draws candidates when N > this * k, and scores every
      point (O(N) = O(k)) below.
    fill_candidates_per_point: uniform candidates per step of that fill, per point of the batch
      (see `fill_extra_candidates`).
    fill_extra_candidates: candidates per step added to those: with the defaults, 2 k + 64 are
      enough to find the k distinct new points a step may need (see
      `_dart_blocks.BlockDraws._fill_uniformly`).
    center_row_block: rows centred per numpy step: float64 work in blocks keeps the peak at one
      float32 copy.
    cache_row_block: rows of the distance cache computed per product.
    cache_from_dim: the distance cache is built only from this feature dimension on. A lookup
      in an N x N matrix larger than the processor's caches waits on memory, about as long as a
      product of length 1,000-2,000 takes; below that the products are cheaper, and the stream
      is faster without the cache.
    inclusion_steps: steps whose draws estimate the inclusion probabilities
      (`DartThrower.inclusion_probabilities`).
    inclusion_cells: bound on the cells of one `[S, k, points]` conflict matrix of that estimate.
  """

  step_rows_per_draw: int = 8192
  max_survivor_target: int = 512
  max_survivors_over_target: int = 2
  survivor_margin: float = 1.25
  tight_blocks_from_dim: int = 512
  block_cells: int = 2**22
  one_pass_from: int = 2048
  one_product_from_k_over_d: int = 3
  fill_by_scores_up_to: int = 8
  fill_candidates_per_point: int = 2
  fill_extra_candidates: int = 64
  center_row_block: int = 16384
  cache_row_block: int = 1024
  cache_from_dim: int = 1024
  inclusion_steps: int = 256
  inclusion_cells: int = 2**24


@dataclasses.dataclass(frozen=True)
class DrawConfig:
  """What a trace of the draw is built from besides the per-dataset tensors (`DrawState`).

  Throwers of equal configurations draw with one trace, whatever their data (`_dart_blocks.traced_draws`).

  Attributes:
    num_points: N.
    dim: d, the features' dimension.
    batch_size: k.
    steps_per_draw: S, the steps one draw throws darts for side by side.
    pi: the plan's pi over mingling values, or None for darts uniform over all points.
    num_mingling_values: K + 1 (the plan's).
    weighted_darts: whether darts hit points by their weight (`DartPlan.point_weights`), through
      the alias table of the state.
    disks: whether the points have disks (the plan has radii).
    one_radius: whether every point has the one radius of the state (`DrawState.uniform_radius`),
      which needs no per-pair minimum.
    one_disk_radius: whether every point with a disk has the same radius (one radius, or one and
      none).
    distance_cache: whether the state holds the squared distances of all pairs.
    one_product: whether squared distances are one product of augmented rows.
    survival_in_one_pass: whether the batch is large enough for the one-pass test of darts
      against the accepted set (`DartTuning.one_pass_from`).
    survivor_target: the most survivors a block aims for per step (a block start).
    max_survivors: the most survivors a block settles per step.
    max_block_rows: the most darts per step of a block, by `block_cells` and d.
    block_cells: `DartTuning.block_cells`.
    survivor_margin: survivors a block aims for per point a step still needs:
      `DartTuning.survivor_margin`, or 1 from `DartTuning.tight_blocks_from_dim` on.
    fill_candidates: uniform draws with replacement per step for the fallback fill, or None: the
      fill scores every point (O(N), but then N is a few k).
  """

  num_points: int
  dim: int
  batch_size: int
  steps_per_draw: int
  pi: MinglingPi | None
  num_mingling_values: int
  weighted_darts: bool
  disks: bool
  one_radius: bool
  one_disk_radius: bool
  distance_cache: bool
  one_product: bool
  survival_in_one_pass: bool
  survivor_target: int
  max_survivors: int
  max_block_rows: int
  block_cells: int
  survivor_margin: float
  fill_candidates: int | None

  @classmethod
  def of(cls, plan: DartPlan, tuning: DartTuning, *, num_points: int, dim: int, batch_size: int,
         max_steps_per_draw: int, one_radius: bool, one_disk_radius: bool, distance_cache: bool) -> DrawConfig:
    """The configuration of a thrower of `plan` on prepared tensors with these properties."""
    steps_per_draw = _steps_per_draw(batch_size, max_steps_per_draw, tuning.step_rows_per_draw)
    # A block aims for enough survivors to fill what a step still needs (`survivor_margin` more,
    # for the ones that block each other; none in high dimensions), up to `max_survivor_target`;
    # it settles at most `max_survivors_over_target` times that.
    tight = dim >= tuning.tight_blocks_from_dim and not distance_cache
    survivor_margin = 1.0 if tight else tuning.survivor_margin
    survivor_target = _aligned(min(math.ceil(survivor_margin * batch_size), tuning.max_survivor_target))
    # The fallback fill's candidates are enough to find the k distinct new points it may need
    # (see `_dart_blocks.BlockDraws._fill_uniformly`); None: fill by scores, O(N) but then N is a
    # few k.
    fill_candidates = (tuning.fill_candidates_per_point * batch_size + tuning.fill_extra_candidates
                       if num_points > tuning.fill_by_scores_up_to * batch_size else None)
    return cls(
        num_points=num_points, dim=dim, batch_size=batch_size, steps_per_draw=steps_per_draw, pi=plan.pi,
        num_mingling_values=plan.num_mingling_values, weighted_darts=plan.point_weights is not None,
        disks=plan.point_radius is not None, one_radius=one_radius,
        one_disk_radius=one_disk_radius, distance_cache=distance_cache,
        # The augmented rows cost a copy of each block's gathered rows, O((darts + accepted) d); the
        # norms added after the product cost passes over the matrix, O(darts * accepted): about
        # 0.6 k^2 against 1.75 k d per block, so one product from k = 3 (d + 2) on.
        one_product=batch_size >= tuning.one_product_from_k_over_d * (dim + 2),
        survival_in_one_pass=batch_size >= tuning.one_pass_from, survivor_target=survivor_target,
        max_survivors=tuning.max_survivors_over_target * survivor_target,
        max_block_rows=max(DART_ALIGN, tuning.block_cells // (steps_per_draw * (dim + 2))),
        block_cells=tuning.block_cells, survivor_margin=survivor_margin, fill_candidates=fill_candidates)


def _steps_per_draw(batch_size: int, most: int, step_rows: int) -> int:
  """S: a power of two up to `most` with S * k <= `step_rows`, or 1.

  The per-op cost of TensorFlow is paid once per draw, so small batches share a draw; large ones
  already give each op enough work.
  """
  return min(2 ** max(0, (step_rows // batch_size).bit_length() - 1), most)


def _aligned(count: int) -> int:
  """`count` rounded up to a block start."""
  return -(-count // DART_ALIGN) * DART_ALIGN
