"""The built-in point processes: Uniform and the Poisson disk samplers (Vanilla, Easy, Dense, Anneal PDS)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _dart_throwing
from tf_repulsive import _mingling
from tf_repulsive import _radius
from tf_repulsive import _schedule
from tf_repulsive._contract import BatchDrawer
from tf_repulsive._contract import PointGroups
from tf_repulsive._contract import Sampler
from tf_repulsive._contract import SamplingContext


def check_radius(radius: float | str | None) -> None:
  if radius is not None and radius != _radius.AUTO:
    _checks.real(radius, "radius", positive=False,
                 type_hint='a number, "auto" or None (half the median distance)')


def dart_budget(max_darts: int | None, batch_size: int) -> int:
  return max(16 * batch_size, 256) if max_darts is None else max_darts


@dataclasses.dataclass(frozen=True, eq=False)
class Uniform(Sampler):
  """Plain SGD: `batch_size` distinct points uniformly at random (no repulsion).

  Dart throwing without disks: uniform darts, duplicates rejected, which is sampling without
  replacement (O(k) per batch). If k is so close to N that the dart budget runs out, the fill
  completes the batch uniformly, so the batch stays a uniform random k-subset.
  """

  def build(self, context: SamplingContext) -> BatchDrawer:
    plan = _dart_throwing.DartPlan(point_radius=None, pi=None, mingling_values=None, num_mingling_values=0,
                                   max_darts=dart_budget(None, context.batch_size))
    return _dart_throwing.DartThrower(context.features, plan, context.batch_size, context.distance_cache_bytes,
                                      verbose=context.verbose, max_steps_per_draw=context.max_steps_per_draw)


class DiskSampler(Sampler):
  """Poisson disk samplers: the radius is configured, estimated (None) or calibrated ("auto").

  Subclasses have `radius` and `max_darts` and resolve to a `DartPlan` given the radius and, for
  the mingling samplers, the mingling values.
  """

  radius: float | str | None
  max_darts: int | None
  # The dart thrower's tuning: a class attribute, not a field of the configuration (a subclass may
  # set its own).
  _tuning: ClassVar[_dart_throwing.DartTuning] = _dart_throwing.DartTuning()

  def build(self, context: SamplingContext) -> BatchDrawer:
    num_points = context.features.shape[0]
    mingling = self._mingling(context)
    if self.radius is None or self.radius == _radius.AUTO:
      radius = _radius.half_median_distance(context.features) if num_points > 1 else 0.0
    else:
      radius = float(self.radius)
    plan = self.plan(batch_size=context.batch_size, radius=radius,
                     mingling_values=None if mingling is None else mingling.values, num_points=num_points)
    weighted = self._dart_weights(context)
    if weighted is not None:
      plan = dataclasses.replace(plan, point_weights=weighted[0])
    thrower = _dart_throwing.DartThrower(context.features, plan, context.batch_size, context.distance_cache_bytes,
                                         verbose=context.verbose, max_steps_per_draw=context.max_steps_per_draw,
                                         tuning=self._tuning)
    if self.radius == _radius.AUTO:
      scale = _radius.calibrated_scale(thrower.count_fills, plan.max_darts, context.batch_size,
                                         context.verbose)
      thrower = thrower.with_radius_scale(scale)
    report = {"radius": radius * thrower.radius_scale, **({} if weighted is None else weighted[1])}
    if mingling is None:
      return thrower.described(report)
    report["mingling_agreement"] = mingling.agreement
    if mingling.target_gap is not None:
      report["target_gap"] = mingling.target_gap
    return thrower.described(report, PointGroups(name="mingling", of_points=mingling.values,
                                                 levels=np.arange(mingling.neighbors + 1) / mingling.neighbors))

  def _mingling(self, context: SamplingContext) -> _mingling.MinglingValues | None:
    del context
    return None

  def _dart_weights(self, context: SamplingContext) -> tuple[np.ndarray, Mapping[str, float]] | None:
    """`[N]` each point's dart probability and what the build reports of it.

    None (the default): darts uniform, or by mingling value.
    """
    del context
    return None

  def plan(self, *, batch_size: int, radius: float, mingling_values: np.ndarray | None,
           num_points: int) -> _dart_throwing.DartPlan:
    """The dart thrower's plan for this configuration on a dataset of `num_points` at `radius`."""
    raise NotImplementedError


@dataclasses.dataclass(frozen=True, eq=False)
class VanillaPDS(DiskSampler):
  """Poisson disk sampling by dart throwing with one fixed disk radius (the paper's Vanilla PDS).

  No two points of a batch are closer than `radius` (up to the documented fallback fill).

  Attributes:
    radius: disk radius in feature space; None: half the median pairwise distance; "auto": the
      largest radius at which the darts fill the batch (see `repulsive_batch`), reported by
      `batcher.stats().report["radius"]`.
    max_darts: darts thrown per batch before the fallback fill; None: max(16 k, 256).
  """

  radius: float | str | None = None
  max_darts: int | None = None

  def __post_init__(self):
    check_radius(self.radius)
    _checks.count_fields(self, "max_darts")

  def plan(self, *, batch_size, radius, mingling_values, num_points):
    del mingling_values
    return _dart_throwing.DartPlan(
        point_radius=np.full([num_points], radius), pi=None, mingling_values=None,
        num_mingling_values=0, max_darts=dart_budget(self.max_darts, batch_size), one_radius=True)


class _MinglingPDS(DiskSampler):
  """What Easy, Dense and Anneal PDS share: labels, mingling values (K = `neighbors`), a disk."""

  needs_labels = True
  neighbors: int
  target_gap_quantile: float | None

  @property
  def label_kind(self) -> str:  # type: ignore[override]
    return "class" if self.target_gap_quantile is None else "target"

  def _check_disk_and_mingling(self) -> None:
    check_radius(self.radius)
    _checks.count_fields(self, "neighbors", "max_darts")
    if self.target_gap_quantile is not None:
      object.__setattr__(self, "target_gap_quantile", _mingling.checked_target_gap_quantile(self.target_gap_quantile))

  def _mingling(self, context: SamplingContext) -> _mingling.MinglingValues:
    num_points = context.features.shape[0]
    if not self.neighbors < num_points:
      raise ValueError(f"`neighbors` = {self.neighbors} must be < N = {num_points}; use fewer neighbours.")
    assert context.labels is not None  # needs_labels
    distinct = np.unique(context.labels)
    if distinct.size < 2:
      # Every mingling index would be 0: the sampler would silently be Vanilla PDS.
      what = "regression targets" if self.label_kind == "target" else "mingling index"
      raise ValueError(
          f"the labels take one value ({distinct[0]}) over all {num_points} elements, and the {what} of "
          f"{type(self).__name__} need{'' if self.label_kind == 'target' else 's'} at least two "
          f"{'values' if self.label_kind == 'target' else 'classes'}. Check the labels: by default y "
          "of (x, y[, sample_weight]) elements, or the 'label' key of dicts; pass `labels` for others.")
    return _mingling.mingling_values(context.features, context.labels, self.neighbors,
                                     target_gap_quantile=self.target_gap_quantile, verbose=context.verbose)


@dataclasses.dataclass(frozen=True, eq=False)
class EasyPDS(_MinglingPDS):
  """Easy PDS: disk radius r0 for points of mingling index 0, none for the others.

  Only easy points (all K nearest neighbours share their label) repulse each other, so points
  near decision boundaries are sampled more often than with Vanilla PDS.

  Attributes:
    radius: r0; None: half the median pairwise distance; "auto": calibrated (as VanillaPDS).
    neighbors: K of the mingling index.
    max_darts: darts thrown per batch before the fallback fill; None: max(16 k, 256).
    target_gap_quantile: None: the labels are class ids (the paper's mingling index). For
      regression, q in (0, 1): the labels are real-valued targets and a neighbour counts as
      "another label" when its target differs by more than the q-quantile of all points' gaps
      to their K nearest neighbours' targets (see `tf_repulsive.mingling_index`).
  """

  radius: float | str | None = None
  neighbors: int = 5
  max_darts: int | None = None
  target_gap_quantile: float | None = None

  def __post_init__(self):
    self._check_disk_and_mingling()

  def plan(self, *, batch_size, radius, mingling_values, num_points):
    del num_points
    return _dart_throwing.DartPlan(
        point_radius=np.where(mingling_values == 0, radius, 0.0), pi=None, mingling_values=None,
        num_mingling_values=0, max_darts=dart_budget(self.max_darts, batch_size), one_disk_radius=True)


@dataclasses.dataclass(frozen=True, eq=False)
class DensePDS(_MinglingPDS):
  """Dense PDS (the paper's Algorithm 1): darts drawn by mingling value, then the disk test.

  Each dart first draws a mingling value m ~ Cat(pi) over the K + 1 possible values (0, 1/K, ...,
  1), then a point uniformly among those with value m. Values no point has are skipped and pi is
  renormalised over the rest.

  Attributes:
    pi: K + 1 non-negative weights (normalised here) for mingling values 0, 1/K, ..., 1.
    radius: disk radius; None: half the median pairwise distance; "auto": calibrated (as VanillaPDS).
    neighbors: K of the mingling index.
    max_darts: darts thrown per batch before the fallback fill; None: max(16 k, 256).
    target_gap_quantile: None: the labels are class ids (the paper's mingling index). For
      regression, q in (0, 1): the labels are real-valued targets and a neighbour counts as
      "another label" when its target differs by more than the q-quantile of all points' gaps
      to their K nearest neighbours' targets (see `tf_repulsive.mingling_index`).
  """

  pi: Sequence[float]
  radius: float | str | None = None
  neighbors: int = 5
  max_darts: int | None = None
  target_gap_quantile: float | None = None

  def __post_init__(self):
    self._check_disk_and_mingling()
    pi = _schedule.validate_histogram(self.pi, "pi")
    if pi.size != self.neighbors + 1:
      raise ValueError(
          f"`pi` must have neighbors + 1 = {self.neighbors + 1} entries (mingling values 0, 1/K, "
          f"..., 1); got {pi.size}.")
    object.__setattr__(self, "pi", tuple(float(p) for p in pi))

  def plan(self, *, batch_size, radius, mingling_values, num_points):
    present = np.bincount(mingling_values, minlength=self.neighbors + 1) > 0
    if not np.any(np.asarray(self.pi) * present > 0):
      raise ValueError(
          f"`pi` = {self.pi} puts no mass on a mingling value that occurs in the data "
          f"(values present: {np.flatnonzero(present).tolist()}); give those values weight.")
    return _dart_throwing.DartPlan(
        point_radius=np.full([num_points], radius), pi=_ConstantPi(self.pi),
        mingling_values=mingling_values, num_mingling_values=self.neighbors + 1,
        max_darts=dart_budget(self.max_darts, batch_size), one_radius=True)


@dataclasses.dataclass(frozen=True)
class _ConstantPi:
  """Dense PDS's pi, the same at every step; equal for equal values (so refreshes share a trace)."""

  values: tuple[float, ...]

  def __call__(self, histogram: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
    del histogram, step
    return tf.constant(self.values, tf.float64)


@dataclasses.dataclass(frozen=True, eq=False)
class AnnealPDS(_MinglingPDS):
  """Anneal PDS: Dense PDS whose pi_n follows a schedule over the global step n.

  The default schedule is the paper's: pi_n ∝ h^(1/log(0.01 n + 1)) with h the empirical histogram
  of mingling values, so early batches are dominated by easy points (mingling index 0) and pi_n
  passes through h at n ≈ 172 before flattening.

  Attributes:
    radius: disk radius; None: half the median pairwise distance; "auto": calibrated (as VanillaPDS).
    neighbors: K of the mingling index.
    schedule: `(h, n) -> pi` in TensorFlow ops (h float64 [K + 1], n int64 scalar); None: the
      paper's (`tf_repulsive.paper_schedule`).
    max_darts: darts thrown per batch before the fallback fill; None: max(16 k, 256).
    target_gap_quantile: None: the labels are class ids (the paper's mingling index). For
      regression, q in (0, 1): the labels are real-valued targets and a neighbour counts as
      "another label" when its target differs by more than the q-quantile of all points' gaps
      to their K nearest neighbours' targets (see `tf_repulsive.mingling_index`).
  """

  radius: float | str | None = None
  neighbors: int = 5
  schedule: _schedule.Schedule | None = None
  max_darts: int | None = None
  target_gap_quantile: float | None = None

  def __post_init__(self):
    self._check_disk_and_mingling()
    if self.schedule is not None and not callable(self.schedule):
      raise TypeError(f"`schedule` must be a callable (h, n) -> pi or None; got {self.schedule!r}.")

  def plan(self, *, batch_size, radius, mingling_values, num_points):
    counts = np.bincount(mingling_values, minlength=self.neighbors + 1)
    histogram = tf.constant(counts / counts.sum(), tf.float64)
    schedule = self.schedule or _schedule.paper_schedule
    first = np.asarray(schedule(histogram, tf.constant(0, tf.int64)))
    if first.shape != (self.neighbors + 1,):
      raise ValueError(
          f"`schedule` must return neighbors + 1 = {self.neighbors + 1} probabilities; returned "
          f"shape {first.shape} at n = 0.")
    if not np.all(np.isfinite(first)) or np.any(first < 0) or not np.any(first * (counts > 0) > 0):
      raise ValueError(
          f"`schedule` returned {first.tolist()} at n = 0: it must be finite, non-negative and put "
          "mass on a mingling value that occurs in the data.")
    return _dart_throwing.DartPlan(
        point_radius=np.full([num_points], radius), pi=schedule,
        mingling_values=mingling_values, num_mingling_values=self.neighbors + 1,
        max_darts=dart_budget(self.max_darts, batch_size), one_radius=True, pi_follows_step=True)
