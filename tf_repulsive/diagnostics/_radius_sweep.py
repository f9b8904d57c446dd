"""Which disk radius: the Theorem-1 split, the class mix and the fill rate of a sampler at several radii."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Sequence

import keras
import numpy as np

from tf_repulsive import _checks
from tf_repulsive import _contract
from tf_repulsive import _options
from tf_repulsive import _pipeline
from tf_repulsive import _samplers
from tf_repulsive.diagnostics import _gradients
from tf_repulsive.diagnostics import _sampling
from tf_repulsive.diagnostics import _variance_split


@dataclasses.dataclass(frozen=True)
class RadiusReport:
  """One radius of a `radius_sweep`.

  Attributes:
    label: "auto", "<s> x auto" or "default" (half the median distance).
    radius: the disk radius.
    fill_rate: the fraction of the draws that needed the fallback fill (the radius did not fit).
    variance: the Theorem-1 split of the draws (see `GradientVarianceReport`).
    class_mix: `[C]` share of each class among the drawn elements (None for non-integer labels).
    class_mix_distance: total-variation distance between `class_mix` and the data's class shares.
  """

  label: str
  radius: float
  fill_rate: float
  variance: _variance_split.GradientVarianceReport
  class_mix: np.ndarray | None
  class_mix_distance: float | None


@dataclasses.dataclass(frozen=True, eq=False)
class RadiusSweepResult:
  """What `radius_sweep` measured; `str(result)` is the table.

  Attributes:
    reports: one per radius, increasing.
    uniform_exact: the closed-form variance of plain SGD (k of N uniformly).
    data_class_mix: `[C]` class shares of the data (None for non-integer labels).
    num_examples: `N`.
    batch_size: `k`.
    sampling_space: where the disks live (distances are measured), for the table's header.
  """

  reports: tuple[RadiusReport, ...]
  uniform_exact: _variance_split.GradientVarianceReport
  data_class_mix: np.ndarray | None
  num_examples: int
  batch_size: int
  sampling_space: str = ""

  def table(self) -> str:
    """One row per radius: fill rate, variance relative to plain SGD, its split, bias, class mix."""
    header = (f"{'radius':<14} {'value':>9} {'fill':>6}  {'total/unif':>10} {'intensity':>9} {'pair':>10} "
              f"{'rel.bias':>8}  {'class-mix TV':>12} {'min/max class share vs data':>28}")
    lines = [f"Radius sweep: N = {self.num_examples}, k = {self.batch_size}; plain SGD tr Cov = "
             f"{self.uniform_exact.total:.3e} (pair {self.uniform_exact.pair:.3e})", header, "-" * len(header)]
    for report in self.reports:
      variance = report.variance
      ratio = variance.total / self.uniform_exact.total if self.uniform_exact.total > 0 else float("nan")
      if report.class_mix is None or self.data_class_mix is None:
        mix = f"{'-':>12} {'-':>28}"
      else:
        share = report.class_mix / np.where(self.data_class_mix > 0, self.data_class_mix, np.nan)
        mix = f"{report.class_mix_distance:12.3f} {np.nanmin(share):13.2f} / {np.nanmax(share):<12.2f}"
      lines.append(f"{report.label:<14} {report.radius:9.4g} {report.fill_rate:6.1%}  {ratio:10.3f} "
                   f"{variance.intensity:9.3e} {variance.pair:10.3e} {variance.relative_bias:8.3f}  {mix}")
    return "\n".join(lines)

  def __str__(self) -> str:
    return self.table()


def radius_sweep(model: keras.Model, loss_fn: Callable[[Any, Any], Any], x: Any, y: Any, batch_size: int, *,
                 sampler: Callable[..., _contract.Sampler] | None = None,
                 scales: Sequence[float] = (0.25, 0.5, 0.75, 1.0, 1.25), include_default: bool = True,
                 num_batches: int = 200, seed: int = 0, start_step: int = 0,
                 variables: str | Sequence[Any] = "all", sketch_dim: int | None = None,
                 chunk_size: int | None = None, features: _sampling.DistanceSpace = None) -> RadiusSweepResult:
  """Which disk radius to use: the Theorem-1 split, bias, class mix and fill rate per radius.

  Calibrates `radius="auto"` on the data (distances measured on `features`), then for each radius
  `scale × auto` (and the default, half the median distance) draws `num_batches` batches of the
  sampler at consecutive steps and measures, on the model's current per-example gradients: the
  variance of the mini-batch mean gradient against plain SGD (< 1 helps) with its intensity /
  pair split and bias; how far the batches' class mix is from the data's; and how often the darts
  could not fill a batch.

  Args:
    model: a built Keras model (its current parameters are used).
    loss_fn: per-example loss, see `per_example_gradients`.
    x: `[N, ...]` inputs (the sampling features, flattened, unless `features` says otherwise).
    y: `[N]` labels; integer class ids give the class-mix columns (and are needed by the
      mingling-index samplers).
    batch_size: `k`.
    sampler: `radius -> sampler` (a disk sampler class such as `tf_repulsive.VanillaPDS`, the
      default, or e.g. `lambda radius: tf_repulsive.AnnealPDS(radius=radius)`).
    scales: multiples of the calibrated radius to measure (> 0).
    include_default: also measure the default radius (half the median pairwise distance).
    num_batches: M >= 3 draws per radius.
    seed: seed of the draws and of the sketch.
    start_step: first global step of the draws (for Anneal PDS: where in its schedule to look).
    variables: "all", "last_layer" or a list of variables, see `per_example_gradients`.
    sketch_dim: count-sketch dimension, or None for exact gradients.
    chunk_size: examples per vectorised gradient call; None: automatic.
    features: where the disks live: None for the inputs x, flattened; a
      `tf_repulsive.FeatureSource` for the model's own space at its current parameters; or an
      `[N, d]` array (see `gradient_variance`).

  Returns:
    The reports, sorted by radius; `print(result)` shows the table.

  Raises:
    TypeError: for a `sampler` that does not make disk samplers, or bad argument types.
    ValueError: for bad sizes or scales, or anything `repulsive_batch` rejects.
  """
  make = sampler if sampler is not None else _samplers.VanillaPDS
  if not callable(make):
    raise TypeError(f"`sampler` must be a callable radius -> sampler, e.g. tf_repulsive.VanillaPDS; got {make!r}.")
  scales = [float(scale) for scale in scales]
  if not scales or any(not np.isfinite(scale) or scale <= 0 for scale in scales):
    raise ValueError(f"`scales` must be positive multiples of the calibrated radius; got {scales}.")
  batch_size = _checks.integer(batch_size, "batch_size", 1)
  num_batches = _checks.integer(num_batches, "num_batches", 3)
  seed = _checks.integer(seed, "seed", 0)
  start_step = _checks.integer(start_step, "start_step", 0)
  labels = np.asarray(y)
  data, sampling_space = _sampling.sampling_data(model, x, y, features)

  def built(radius):
    wrong = TypeError("`sampler` must make disk samplers from a radius (VanillaPDS, EasyPDS, DensePDS, "
                      f"AnnealPDS, or a function radius -> one of them); got {make!r}.")
    try:
      instance = make(radius=radius)
    except TypeError as error:
      raise wrong from error
    if not isinstance(instance, _samplers.DiskSampler):
      raise wrong
    batcher = _pipeline.repulsive_batch(batch_size, instance, seed=seed, start_step=start_step,
                                        options=_options.BatcherOptions(verbose=False))
    # Radii that do not fit are part of the sweep: the fill rate column reports them.
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      data.apply(batcher)
    return batcher

  calibrated = built("auto")
  auto = calibrated.stats().report["radius"]
  radii = {("auto" if scale == 1.0 else f"{scale:g} x auto"): scale * auto for scale in scales}
  if include_default:
    radii["default"] = None
  batchers = {label: calibrated if label == "auto" else built(radius) for label, radius in radii.items()}
  gradients = _gradients.per_example_gradients(model, loss_fn, x, y, variables=variables, sketch_dim=sketch_dim,
                                               seed=seed, chunk_size=chunk_size)
  draws = {label: _sampling.draw_batches(batcher, num_batches, start_step=start_step)
           for label, batcher in batchers.items()}
  split = _variance_split.variance_split(gradients, draws)
  classes = np.issubdtype(labels.dtype, np.integer) and labels.ndim == 1 and labels.min() >= 0
  data_mix = np.bincount(labels, minlength=labels.max() + 1) / labels.size if classes else None
  reports = []
  for label, batcher in batchers.items():
    steps = range(start_step, start_step + num_batches)
    fill_rate = float(np.mean([batcher.fallback_points(step) > 0 for step in steps]))
    mix = distance = None
    if data_mix is not None:
      mix = np.bincount(labels[draws[label].ravel()], minlength=data_mix.size) / draws[label].size
      distance = 0.5 * float(np.abs(mix - data_mix).sum())
    reports.append(RadiusReport(label=label, radius=batcher.stats().report["radius"], fill_rate=fill_rate,
                                variance=split.reports[label], class_mix=mix, class_mix_distance=distance))
  return RadiusSweepResult(reports=tuple(sorted(reports, key=lambda report: report.radius)),
                           uniform_exact=split.uniform_exact, data_class_mix=data_mix,
                           num_examples=split.num_examples, batch_size=batch_size,
                           sampling_space=sampling_space)
