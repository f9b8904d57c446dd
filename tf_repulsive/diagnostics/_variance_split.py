"""Theorem-1 split of the variance of the mini-batch gradient, estimated from drawn batches.

This module imports numpy, never TensorFlow or Keras; tests/package/test_diagnostics.py checks it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from tf_repulsive import _checks
from tf_repulsive.diagnostics import _kernels


def _check_gradients(gradients: Any) -> np.ndarray:
  gradients = np.asarray(gradients)
  if gradients.dtype.kind not in "fiu":
    raise TypeError(f"`gradients` must be a numeric [N, D] array; got dtype {gradients.dtype}.")
  if gradients.ndim != 2 or gradients.shape[0] < 2 or gradients.shape[1] < 1:
    raise ValueError(f"`gradients` must be [N, D] with N >= 2 and D >= 1; got shape {gradients.shape}.")
  if not np.all(np.isfinite(gradients)):
    raise ValueError("`gradients` contains NaN or infinite values.")
  return gradients


@dataclasses.dataclass(frozen=True)
class GradientVarianceReport:
  """Variance of the mini-batch mean gradient under one sampler, split as in Theorem 1.

  Estimates from M independent draws are unbiased for total, intensity, pair and bias²; standard
  errors are leave-one-batch-out jackknife. The closed-form uniform reference has num_batches 0 and
  zero standard errors.

  Attributes:
    name: the sampler's name.
    batch_size: `k`.
    num_batches: M, the draws the estimates use (0 for the closed form).
    num_distinct_batches: how many of the draws differ as sets (M for a healthy sampler on a
      large dataset; fewer means repeated batches, which the standard errors do not account for).
    total: tr Cov(Ĝ).
    total_se: its standard error.
    intensity: ``(1/k²) Σ_i p_i (1 − p_i) |g_i|²``, with p_i the inclusion probability.
    intensity_se: its standard error.
    pair: total − intensity = (1/k²) Σ_{i≠j} (p_ij − p_i p_j) g_i·g_j; negative when repulsion
      reduces the variance.
    pair_se: its standard error.
    bias: ``|E[Ĝ] − ḡ|`` with ḡ the full-data mean gradient (from the debiased estimate of the square,
      clipped at 0): how far the sampler's marginals move the expected step.
    relative_bias: ``bias / |ḡ|`` (NaN when ḡ = 0).
    radius: the sampler's disk radius, when known.
  """

  name: str
  batch_size: int
  num_batches: int
  num_distinct_batches: int
  total: float
  total_se: float
  intensity: float
  intensity_se: float
  pair: float
  pair_se: float
  bias: float
  relative_bias: float
  radius: float | None = None

  @property
  def mean_squared_error(self) -> float:
    """``E|Ĝ − ḡ|² = total + bias²``, the error of Ĝ as an estimate of the full-data gradient."""
    return self.total + self.bias**2


@dataclasses.dataclass(frozen=True, eq=False)
class GradientVarianceResult:
  """Theorem-1 reports of several samplers for one model state, with the exact uniform reference.

  `str(result)` is the table `table()` renders.

  Attributes:
    reports: sampler name -> its report, in the order given.
    uniform_exact: closed form for k of N uniformly without replacement (plain SGD).
    num_examples: `N`.
    batch_size: `k`.
    full_gradient_norm: ``|ḡ|``, the norm of the full-data mean gradient.
    gradient_space: what the gradients are (variables, sketch), for the table's header.
    sampling_space: where the samplers measured distances, for the table's header.
    batches: sampler name -> the `[M, k]` draws analysed (e.g. for `pair_correlation`).
  """

  reports: Mapping[str, GradientVarianceReport]
  uniform_exact: GradientVarianceReport
  num_examples: int
  batch_size: int
  full_gradient_norm: float
  gradient_space: str = ""
  sampling_space: str = ""
  batches: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict, repr=False)

  def table(self) -> str:
    """A fixed-width table: one row per sampler, the closed-form uniform first.

    Columns: draws and distinct draws, disk radius, total ± s.e., intensity ± s.e., pair ± s.e.,
    bias and relative bias, and total / the closed-form uniform total (< 1: less variance than
    plain SGD).

    Returns:
      The table as a multi-line string.
    """
    header = (f"{'sampler':<16} {'draws':>5} {'distinct':>8} {'radius':>7}  {'total':>9} {'±se':>8}  "
              f"{'intensity':>9} {'±se':>8}  {'pair':>10} {'±se':>8}  {'bias':>8} {'rel.bias':>8}  "
              f"{'total/unif':>10}")
    lines = [f"Theorem-1 split of tr Cov(mini-batch mean gradient): N = {self.num_examples}, "
             f"k = {self.batch_size}, |full gradient| = {self.full_gradient_norm:.4g}"]
    if self.gradient_space:
      lines.append(f"gradients: {self.gradient_space}")
    if self.sampling_space:
      lines.append(f"distances: {self.sampling_space}")
    lines += [header, "-" * len(header)]
    lines += [self._row(report) for report in (self.uniform_exact, *self.reports.values())]
    return "\n".join(lines)

  def _row(self, report: GradientVarianceReport) -> str:
    exact = report.num_batches == 0
    draws = "-" if exact else str(report.num_batches)
    distinct = "-" if exact else str(report.num_distinct_batches)
    radius = "-" if report.radius is None else f"{report.radius:.3g}"
    total_se, intensity_se, pair_se = (
        ("-",) * 3 if exact else
        (f"{report.total_se:.2e}", f"{report.intensity_se:.2e}", f"{report.pair_se:.2e}"))
    reference = self.uniform_exact.total
    ratio = report.total / reference if reference > 0 else float("nan")
    return (f"{report.name:<16} {draws:>5} {distinct:>8} {radius:>7}  {report.total:9.3e} "
            f"{total_se:>8}  {report.intensity:9.3e} {intensity_se:>8}  {report.pair:10.3e} "
            f"{pair_se:>8}  {report.bias:8.2e} {report.relative_bias:8.3f}  {ratio:10.3f}")

  def __str__(self) -> str:
    return self.table()


def _jackknife_se(leave_one_out: np.ndarray) -> float:
  count = leave_one_out.size
  return float(np.sqrt((count - 1) / count * np.sum((leave_one_out - leave_one_out.mean())**2)))


def _split(name: str, gradients: np.ndarray, sq_norms: np.ndarray, full_mean: np.ndarray,
           batches: np.ndarray, radius: float | None, element_weights: np.ndarray | None) -> GradientVarianceReport:
  """Unbiased Theorem-1 estimates from M i.i.d. draws, with jackknife standard errors."""
  num_batches, batch_size = batches.shape
  m = float(num_batches)
  means = _kernels.batch_means(gradients, batches, element_weights)
  grand_mean = means.mean(axis=0)
  # Centred first: S2 − |S1|²/M would cancel catastrophically when |E Ĝ| ≫ its spread.
  deviations = _kernels.squared_norms(means, grand_mean)
  total = deviations.sum() / (m - 1.0)
  # Leaving batch b out of the centred sum: (S2 − q_b M / (M − 1)) / (M − 2).
  total_loo = (deviations.sum() - deviations * m / (m - 1.0)) / (m - 2.0)

  # p_i(1 − p_i) from counts c_i: c (M − c) / (M (M − 1)) is unbiased (p̂(1 − p̂) alone is not:
  # it is low by p(1 − p)/M). Leaving batch b out changes the numerator by w_i (M − 2 c_i) for
  # its points, so every leave-one-out value costs O(k).
  weights = sq_norms / batch_size**2
  counts = np.bincount(batches.ravel(), minlength=gradients.shape[0]).astype(np.float64)
  intensity = np.sum(weights * counts * (m - counts)) / (m * (m - 1.0))
  loo_base = np.sum(weights * counts * (m - 1.0 - counts))
  in_batch = (weights * (m - 2.0 * counts))[batches].sum(axis=1)
  intensity_loo = (loo_base - in_batch) / ((m - 1.0) * (m - 2.0))

  # E|mean of M draws − ḡ|² = bias² + total / M.
  bias_sq = float(np.sum((grand_mean - full_mean)**2) - total / m)
  bias = float(np.sqrt(max(bias_sq, 0.0)))
  if element_weights is not None:
    # Weights that depend on the batch (scaled to average 1 in it) leave no fixed per-element
    # coefficient for the intensity / pair split.
    intensity, intensity_loo = float("nan"), np.full(num_batches, np.nan)
  full_norm = float(np.linalg.norm(full_mean))
  distinct = len({tuple(row) for row in np.sort(batches, axis=1).tolist()})
  return GradientVarianceReport(
      name=name, batch_size=batch_size, num_batches=num_batches, num_distinct_batches=distinct,
      total=float(total), total_se=_jackknife_se(total_loo),
      intensity=float(intensity), intensity_se=_jackknife_se(intensity_loo),
      pair=float(total - intensity), pair_se=_jackknife_se(total_loo - intensity_loo),
      bias=bias, relative_bias=bias / full_norm if full_norm > 0 else float("nan"), radius=radius)


def uniform_variance(gradients: Any, batch_size: int) -> GradientVarianceReport:
  """Theorem-1 split for k of N uniformly without replacement, in closed form (plain SGD).

  p_i = k/N and p_ij = k(k − 1)/(N(N − 1)), so::

    total = (N − k)/(k (N − 1)) · (1/N) Σ_i |g_i − ḡ|²,
    intensity = (N − k)/(k N²) Σ_i |g_i|²,

  and ``pair = total − intensity = −(N − k)/(k N² (N − 1)) (|Σ_i g_i|² − Σ_i |g_i|²)``: drawing
  without replacement makes p_ij < p_i p_j for every pair, which lowers the variance when the
  gradients agree on average. No bias.

  Args:
    gradients: `[N, D]` per-example gradients (N >= 2).
    batch_size: k, 1 <= k <= N.

  Returns:
    The report, named "uniform (exact)", with num_batches 0 and zero standard errors.

  Raises:
    TypeError: for non-numeric gradients or a non-int batch size.
    ValueError: for bad shapes, non-finite gradients, k outside [1, N].
  """
  gradients = _check_gradients(gradients)
  k = _checks.integer(batch_size, "batch_size", 1)
  n = gradients.shape[0]
  if k > n:
    raise ValueError(f"`batch_size` = {k} exceeds the number of examples N = {n}.")
  full_mean = gradients.mean(axis=0, dtype=np.float64)
  spread = _kernels.squared_norms(gradients, full_mean).sum() / n
  total = (n - k) / (k * (n - 1.0)) * spread
  intensity = (n - k) / (k * float(n)**2) * _kernels.squared_norms(gradients).sum()
  return GradientVarianceReport(
      name="uniform (exact)", batch_size=k, num_batches=0, num_distinct_batches=0,
      total=float(total), total_se=0.0, intensity=float(intensity), intensity_se=0.0,
      pair=float(total - intensity), pair_se=0.0, bias=0.0, relative_bias=0.0)


def variance_split(gradients: Any, batches: Mapping[str, Any], *,
                   radii: Mapping[str, float | None] | None = None,
                   weights: Mapping[str, Any] | None = None,
                   gradient_space: str = "") -> GradientVarianceResult:
  """Theorem-1 split of tr Cov(Ĝ) for each sampler's draws, with the closed-form uniform reference.

  Estimators (M draws per sampler, assumed independent, e.g. consecutive steps of one pipeline):

  * total: the sample variance of the M batch means (summed over dimensions, M − 1 denominator);
  * intensity: ``(1/k²) Σ_i |g_i|² c_i (M − c_i)/(M (M − 1))`` with c_i the draws containing i, the
    unbiased estimate of p_i (1 − p_i) from the empirical inclusion frequencies;
  * pair: total − intensity, so intensity + pair == total exactly;
  * bias²: ``|mean of the M batch means − ḡ|² − total/M``.

  total, intensity, pair and bias² (before clipping at 0 for `bias`) are unbiased; standard
  errors are leave-one-batch-out jackknife. For a step-dependent
  sampler (Anneal PDS) the draws of a window of steps are not identically distributed: the report
  then describes a batch drawn at a uniformly random step of the window.

  Args:
    gradients: `[N, D]` per-example gradients (e.g. from `per_example_gradients`).
    batches: sampler name -> `[M, k]` int indices of its draws (M >= 3, the same k for all).
    radii: optional sampler name -> disk radius, copied into the reports.
    weights: optional sampler name -> `[M, k]` sample weights of its draws' elements (those a
      `repulsive_batch(..., inclusion_weights=...)` stream attaches): that sampler's estimate is
      then Ĝ = (1/k) Σ_b w_i g_i, what Keras' weighted mean loss differentiates to. Its
      intensity and pair are NaN: weights scaled per batch leave no per-element split.
    gradient_space: description of the gradients for the table's header.

  Returns:
    The reports in the order of `batches`, the exact uniform reference, and the draws.

  Raises:
    TypeError: for non-numeric gradients or non-integer batches.
    ValueError: for bad shapes, indices outside [0, N), repeated indices within a batch, fewer
      than 3 draws, differing batch sizes, no samplers.
  """
  gradients = _check_gradients(gradients)
  if not isinstance(batches, Mapping):
    raise TypeError(f"`batches` must be a mapping from sampler name to [M, k] indices; got {batches!r}.")
  if not batches:
    raise ValueError("`batches` is empty; give at least one sampler's draws.")
  radii = {} if radii is None else dict(radii)
  checked = {str(name): _kernels.check_batches(draws, gradients.shape[0], f"batches[{name!r}]", 3)
             for name, draws in batches.items()}
  weights = {} if weights is None else {str(name): value for name, value in weights.items()}
  for name, value in weights.items():
    if name not in checked:
      raise ValueError(f"`weights[{name!r}]` names no sampler of `batches` ({sorted(checked)}).")
    value = np.asarray(value, np.float64)
    if value.shape != checked[name].shape or not np.all(np.isfinite(value)):
      raise ValueError(f"`weights[{name!r}]` must be finite and of its batches' shape {checked[name].shape}; got "
                       f"shape {value.shape}.")
    weights[name] = value
  sizes = {draws.shape[1] for draws in checked.values()}
  if len(sizes) != 1:
    raise ValueError(f"`batches` must share one batch size (one uniform reference); got {sorted(sizes)}.")
  uniform = uniform_variance(gradients, sizes.pop())
  full_mean = gradients.mean(axis=0, dtype=np.float64)
  sq_norms = _kernels.squared_norms(gradients)
  reports = {name: _split(name, gradients, sq_norms, full_mean, draws, radii.get(name), weights.get(name))
             for name, draws in checked.items()}
  return GradientVarianceResult(
      reports=reports, uniform_exact=uniform, num_examples=gradients.shape[0],
      batch_size=uniform.batch_size, full_gradient_norm=float(np.linalg.norm(full_mean)),
      gradient_space=gradient_space, batches=checked)
