"""Theorem-1 diagnostics: does a sampler reduce the variance of the mini-batch gradient, and why?

For the mini-batch mean gradient Ĝ = (1/k) Σ_{i∈B} g_i over a finite dataset, with Z_i the
indicator of i ∈ B, p_i = P(i ∈ B) and p_ij = P(i, j ∈ B), Theorem 1 of the paper reads::

  tr Cov(Ĝ) = (1/k²) Σ_i p_i (1 − p_i) |g_i|²  +  (1/k²) Σ_{i≠j} (p_ij − p_i p_j) g_i·g_j
            =            intensity               +                pair

`intensity` is what independent (Poisson) sampling with the same marginals would give; `pair` is
the contribution of the second-order correlations, negative when repulsion helps (close points
with aligned gradients are rarely in one batch). `gradient_variance` estimates both from draws of
a sampler and per-example gradients of a Keras model; `pair_correlation` shows the repulsion
itself, the pair-correlation function g(r) of the batches in feature space. `radius_sweep` puts
these side by side for several disk radii, with the class mix and the fill rate, to choose one.

Layout: pure numpy estimators (`variance_split`, `uniform_variance`, `pair_correlation`) apart
from the TensorFlow glue (`per_example_gradients`, `draw_batches`, `gradient_variance`,
`radius_sweep`).
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from typing import Any, Callable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _inclusion_weights
from tf_repulsive import _options
from tf_repulsive import _pipeline
from tf_repulsive import _contract
from tf_repulsive import _model_features
from tf_repulsive import _samplers

# Bound on the float64 scratch arrays of the numpy kernels (elements), so memory stays O(this)
# whatever N, k, M and the gradient dimension.
_CHUNK_ELEMENTS = 2**22
# Bound on the per-chunk per-example gradients `[chunk, P]` float32 when the chunk size is automatic.
_GRADIENT_CHUNK_BYTES = 256 * 2**20
_MAX_GRADIENT_CHUNK = 256

SamplerFactory = Callable[[], _contract.Sampler]
# Where the samplers measure distances: the inputs (None), a feature source, or `[N, d]` features.
SamplingFeatures = Any


# ----------------------------------------------------------------------------- argument checks


def _check_gradients(gradients: Any) -> np.ndarray:
  gradients = np.asarray(gradients)
  if gradients.dtype.kind not in "fiu":
    raise TypeError(f"`gradients` must be a numeric [N, D] array; got dtype {gradients.dtype}.")
  if gradients.ndim != 2 or gradients.shape[0] < 2 or gradients.shape[1] < 1:
    raise ValueError(f"`gradients` must be [N, D] with N >= 2 and D >= 1; got shape {gradients.shape}.")
  if not np.all(np.isfinite(gradients)):
    raise ValueError("`gradients` contains NaN or infinite values.")
  return gradients


def _check_batches(batches: Any, num_points: int, name: str, least_batches: int) -> np.ndarray:
  """`[M, k]` int64 batches of distinct indices into N points."""
  batches = np.asarray(batches)
  if batches.dtype.kind not in "iu":
    raise TypeError(f"`{name}` must be an integer [M, k] array of indices; got dtype {batches.dtype}.")
  if batches.ndim != 2 or batches.shape[1] < 1:
    raise ValueError(f"`{name}` must be [num_batches, batch_size]; got shape {batches.shape}.")
  if batches.shape[0] < least_batches:
    raise ValueError(f"`{name}` must hold at least {least_batches} batches; got {batches.shape[0]}.")
  if batches.min() < 0 or batches.max() >= num_points:
    raise ValueError(f"`{name}` has indices outside [0, {num_points}).")
  ordered = np.sort(batches, axis=1)
  if np.any(ordered[:, 1:] == ordered[:, :-1]):
    raise ValueError(f"`{name}` has a batch with a repeated index; batches hold distinct points.")
  return batches.astype(np.int64)


# ----------------------------------------------------------------------------- results


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


@dataclasses.dataclass(frozen=True, eq=False)
class PairCorrelation:
  """Empirical pair-correlation function g(r) of a sampler's batches in feature space.

  Attributes:
    bin_edges: `[B + 1]` increasing distances.
    g: `[B]` fraction of within-batch pairs per bin / fraction of reference pairs per bin; NaN
      where no reference pair falls. 1 means "as often as independent pairs", 0 "never".
    counts: `[B]` within-batch pairs per bin, over all batches (their Poisson error is a guide to
      how much a bin's g can be trusted).
    reference_fraction: `[B]` fraction of the reference pair weight per bin.
    num_pairs: within-batch pairs in total, including those beyond the last edge.
    reference: "uniform" or "marginal" (see `pair_correlation`).
  """

  bin_edges: np.ndarray
  g: np.ndarray
  counts: np.ndarray
  reference_fraction: np.ndarray
  num_pairs: int
  reference: str

  @property
  def bin_centres(self) -> np.ndarray:
    """`[B]` midpoints of the bins."""
    return 0.5 * (self.bin_edges[1:] + self.bin_edges[:-1])


# ----------------------------------------------------------------------------- numpy kernels


def _row_chunk(row_elements: int) -> int:
  return max(1, _CHUNK_ELEMENTS // max(1, row_elements))


def _squared_norms(gradients: np.ndarray, centre: np.ndarray | None = None) -> np.ndarray:
  """`[N]` float64 |g_i − centre|², in chunks (gradients may be float32 and large)."""
  rows = _row_chunk(gradients.shape[1])
  norms = []
  for start in range(0, gradients.shape[0], rows):
    block = gradients[start:start + rows].astype(np.float64)
    if centre is not None:
      block -= centre
    norms.append(np.einsum("ij,ij->i", block, block))
  return np.concatenate(norms)


def _batch_means(gradients: np.ndarray, batches: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
  """`[M, D]` float64 mean gradient of each batch, each element's times its weight when given."""
  rows = _row_chunk(batches.shape[1] * gradients.shape[1])
  means = []
  for start in range(0, batches.shape[0], rows):
    block = gradients[batches[start:start + rows]].astype(np.float64)
    if weights is not None:
      block *= weights[start:start + rows, :, None]
    means.append(block.mean(axis=1))
  return np.concatenate(means)


def _jackknife_se(leave_one_out: np.ndarray) -> float:
  count = leave_one_out.size
  return float(np.sqrt((count - 1) / count * np.sum((leave_one_out - leave_one_out.mean())**2)))


def _split(name: str, gradients: np.ndarray, sq_norms: np.ndarray, full_mean: np.ndarray,
           batches: np.ndarray, radius: float | None, element_weights: np.ndarray | None) -> GradientVarianceReport:
  """Unbiased Theorem-1 estimates from M i.i.d. draws, with jackknife standard errors."""
  num_batches, batch_size = batches.shape
  m = float(num_batches)
  means = _batch_means(gradients, batches, element_weights)
  grand_mean = means.mean(axis=0)
  # Centred first: S2 − |S1|²/M would cancel catastrophically when |E Ĝ| ≫ its spread.
  deviations = _squared_norms(means, grand_mean)
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
  spread = _squared_norms(gradients, full_mean).sum() / n
  total = (n - k) / (k * (n - 1.0)) * spread
  intensity = (n - k) / (k * float(n)**2) * _squared_norms(gradients).sum()
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
      `repulsive_batch(..., inclusion_weights=True)` stream attaches): that sampler's estimate is
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
  checked = {str(name): _check_batches(draws, gradients.shape[0], f"batches[{name!r}]", 3)
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
  sq_norms = _squared_norms(gradients)
  reports = {name: _split(name, gradients, sq_norms, full_mean, draws, radii.get(name), weights.get(name))
             for name, draws in checked.items()}
  return GradientVarianceResult(
      reports=reports, uniform_exact=uniform, num_examples=gradients.shape[0],
      batch_size=uniform.batch_size, full_gradient_norm=float(np.linalg.norm(full_mean)),
      gradient_space=gradient_space, batches=checked)


def _pair_distances(points: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
  """Exact float64 |x_left − x_right| per index pair, in chunks (no Gram-matrix cancellation)."""
  rows = _row_chunk(points.shape[1])
  out = np.empty(left.size)
  for start in range(0, left.size, rows):
    diff = points[left[start:start + rows]] - points[right[start:start + rows]]
    out[start:start + rows] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
  return out


def pair_correlation(features: Any, batches: Any, r_bins: int | Sequence[float] = 20, *,
                     reference: str = "uniform", max_reference_pairs: int = 1_000_000,
                     seed: int = 0) -> PairCorrelation:
  """Empirical pair-correlation function g(r) of mini-batches in feature space.

  g(r) = (fraction of within-batch pairs at distance in the bin) / (fraction of reference pairs
  in the bin). With `reference="uniform"` the reference pairs are distinct points of the dataset
  drawn uniformly: g ≈ 1 at all r for uniform sampling, g = 0 below the disk radius for Vanilla PDS.
  With `reference="marginal"` a pair (i, j) is weighted by p̂_i p̂_j, the empirical inclusion
  frequencies of the batches: this divides out a changed intensity (Easy / Dense / Anneal PDS
  prefer some points) and leaves ρ(x, y)/(λ(x) λ(y)), the factor Theorem 1's pair term weighs.

  The reference uses all N(N − 1)/2 pairs when there are at most `max_reference_pairs`, otherwise
  that many pairs drawn with `seed`. Distances are exact Euclidean in float64.

  Args:
    features: `[N, ...]` numeric; each row flattened is a point (the space the sampler used).
    batches: `[M, k]` int indices of the draws (k >= 2), e.g. from `draw_batches`.
    r_bins: number of equal bins from 0 to the largest distance seen, or increasing bin edges >= 0.
    reference: "uniform" or "marginal".
    max_reference_pairs: bound on the reference pairs (>= 1).
    seed: seed of the reference subsample.

  Returns:
    The histogram (bin edges, g, within-batch counts, reference fractions).

  Raises:
    TypeError: for non-numeric features, non-integer batches or bins count, a non-str reference.
    ValueError: for bad shapes, non-finite features, bad indices, bad bin edges, unknown reference.
  """
  points = np.asarray(features)
  if points.dtype.kind not in "fiu":
    raise TypeError(f"`features` must be numeric; got dtype {points.dtype}.")
  if points.ndim < 1 or points.shape[0] < 2:
    raise ValueError(f"`features` must be [N, ...] with N >= 2; got shape {points.shape}.")
  points = points.reshape(points.shape[0], -1).astype(np.float64)
  if not np.all(np.isfinite(points)):
    raise ValueError("`features` contains NaN or infinite values.")
  num_points = points.shape[0]
  batches = _check_batches(batches, num_points, "batches", 1)
  if batches.shape[1] < 2:
    raise ValueError("`batches` must have batch size >= 2 to hold pairs.")
  if not isinstance(reference, str):
    raise TypeError(f"`reference` must be 'uniform' or 'marginal'; got {reference!r}.")
  if reference not in ("uniform", "marginal"):
    raise ValueError(f"`reference` must be 'uniform' or 'marginal'; got {reference!r}.")
  max_reference_pairs = _checks.integer(max_reference_pairs, "max_reference_pairs", 1)
  seed = _checks.integer(seed, "seed", 0)
  edges = None  # for a bin count: known once the distances are
  if isinstance(r_bins, numbers.Integral) and not isinstance(r_bins, bool):
    num_bins = _checks.integer(r_bins, "r_bins", 1)
  elif isinstance(r_bins, (str, bool, numbers.Number)):
    raise TypeError(f"`r_bins` must be a bin count or a sequence of bin edges; got {r_bins!r}.")
  else:
    edges = np.asarray(r_bins, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 2 or not np.all(np.isfinite(edges)) or edges[0] < 0 \
        or np.any(np.diff(edges) <= 0):
      raise ValueError(
          f"`r_bins` edges must be finite, >= 0, strictly increasing, at least 2; got {r_bins!r}.")

  first, second = np.triu_indices(batches.shape[1], 1)
  batch_distances = _pair_distances(points, batches[:, first].ravel(), batches[:, second].ravel())

  inclusion = np.bincount(batches.ravel(), minlength=num_points).astype(np.float64)
  num_all_pairs = num_points * (num_points - 1) // 2
  if num_all_pairs <= max_reference_pairs:
    left, right = np.triu_indices(num_points, 1)
    weights = None if reference == "uniform" else inclusion[left] * inclusion[right]
  else:
    rng = np.random.default_rng(seed)
    if reference == "uniform":
      left = rng.integers(num_points, size=max_reference_pairs)
      right = (left + 1 + rng.integers(num_points - 1, size=max_reference_pairs)) % num_points
    else:
      # Sampling i and j from p̂ weights each pair by p̂_i p̂_j; pairs i == j are not pairs.
      left, right = rng.choice(num_points, size=(2, max_reference_pairs), p=inclusion / inclusion.sum())
      distinct = left != right
      left, right = left[distinct], right[distinct]
    weights = None
  reference_distances = _pair_distances(points, left, right)

  if edges is None:
    top = max(float(batch_distances.max()), float(reference_distances.max()))
    edges = np.linspace(0.0, top if top > 0 else 1.0, num_bins + 1)
  counts = np.histogram(batch_distances, edges)[0]
  reference_mass = np.histogram(reference_distances, edges, weights=weights)[0].astype(np.float64)
  total_mass = reference_distances.size if weights is None else weights.sum()
  reference_fraction = reference_mass / total_mass
  batch_fraction = counts / batch_distances.size
  g = np.full(counts.shape, np.nan)
  np.divide(batch_fraction, reference_fraction, out=g, where=reference_fraction > 0)
  return PairCorrelation(bin_edges=edges, g=g, counts=counts, reference_fraction=reference_fraction,
                         num_pairs=int(batch_distances.size), reference=reference)


# ----------------------------------------------------------------------------- TensorFlow glue


def _resolve_variables(model: keras.Model, variables: str | Sequence[Any]) -> list[Any]:
  """The variables whose gradients are taken: "all", "last_layer" or an explicit list."""
  if isinstance(variables, str):
    if variables == "all":
      chosen = list(model.trainable_variables)
    elif variables == "last_layer":
      layers = [layer for layer in model.layers if layer.trainable_variables]
      chosen = list(layers[-1].trainable_variables) if layers else []
    else:
      raise ValueError(
          f"`variables` must be 'all', 'last_layer' or a list of variables; got {variables!r}.")
  else:
    try:
      chosen = list(variables)
    except TypeError:
      raise TypeError(
          f"`variables` must be 'all', 'last_layer' or a list of variables; got {variables!r}.") from None
    for variable in chosen:
      if not isinstance(variable, (keras.Variable, tf.Variable)):
        raise TypeError(f"`variables` must hold keras / tf Variables; got {variable!r}.")
  if not chosen:
    raise ValueError(
        "`variables` selects no trainable variables; build the model (call it once or give it an "
        "Input) before taking gradients.")
  return chosen


def _count_sketch(num_parameters: int, sketch_dim: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
  """Bucket in [0, m) and sign ±1 of every parameter: S g sums sign·g per bucket."""
  rng = np.random.default_rng(seed)
  buckets = rng.integers(0, sketch_dim, size=num_parameters).astype(np.int32)
  signs = (2 * rng.integers(0, 2, size=num_parameters) - 1).astype(np.float32)
  return tf.constant(buckets), tf.constant(signs)


def per_example_gradients(model: keras.Model, loss_fn: Callable[[Any, Any], Any], x: Any, y: Any, *,
                          variables: str | Sequence[Any] = "all", sketch_dim: int | None = None,
                          seed: int = 0, chunk_size: int | None = None) -> np.ndarray:
  """g_i = ∇ loss(y_i, model(x_i)) for every example, flattened over the chosen variables.

  The model is called with `training=False` (dropout off, batch norm in inference mode), so g_i
  is a function of the parameters and example i alone and the diagnostics measure the variance
  the choice of batch causes. Regularisation losses (`model.losses`) are not included: they add
  the same vector to every g_i and do not change the variance. Computed with `tf.vectorized_map`
  over chunks of examples (ops without a vectorised rule fall back to a loop with a warning).

  Memory and the trade-off between the options: the exact gradients take N × P floats (P the
  number of parameters in `variables`). `variables="last_layer"` keeps only the last layer with
  variables (exact, cheap, but it is the variance of a part of the gradient, which can behave
  differently from the whole). `sketch_dim=m` keeps all of P but stores S g_i, a count sketch (each
  parameter added with a random sign into one of m buckets, fixed by `seed`): E[S a · S b] = a·b,
  so every quantity of `variance_split` (linear in the gradients' dot products) is unbiased over
  sketches, with relative error up to about sqrt(2/m) for one sketch (2% at m = 4096); all samplers
  compared with one sketch share S, so their ratios are more precise than that. Cost O(P) per
  example, unlike a dense Gaussian projection (O(m P) time and memory).

  Args:
    model: a built Keras model.
    loss_fn: `loss_fn(y_true, y_pred)` of a single-example batch, reducing to one value, e.g.
      `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`: the loss whose batch mean is
      trained on.
    x: `[N, ...]` model inputs.
    y: `[N, ...]` targets.
    variables: "all" (the model's trainable variables), "last_layer", or a list of variables.
    sketch_dim: m, to return count sketches `[N, m]` instead of `[N, P]`; None for exact.
    seed: seed of the sketch.
    chunk_size: examples per vectorised call; None: as many as fit 256 MiB of gradients (<= 256).

  Returns:
    `[N, P]` (or `[N, m]`) float32 per-example gradients, parameters in the order of `variables`,
    each flattened row-major.

  Raises:
    TypeError: for a non-Keras model, a non-callable loss, bad `variables` entries, non-int sizes.
    ValueError: for mismatched x / y, unknown `variables`, a model without variables, a loss that
      does not reduce to one value per example.
  """
  if not isinstance(model, keras.Model):
    raise TypeError(f"`model` must be a keras.Model; got {type(model).__name__}.")
  if not callable(loss_fn):
    raise TypeError(f"`loss_fn` must be callable (y_true, y_pred) -> loss; got {loss_fn!r}.")
  x, y = np.asarray(x), np.asarray(y)
  if x.ndim < 1 or x.shape[0] < 1:
    raise ValueError(f"`x` must be [N, ...] with N >= 1; got shape {x.shape}.")
  if y.ndim < 1 or y.shape[0] != x.shape[0]:
    raise ValueError(f"`y` must have one target per example ({x.shape[0]}); got shape {y.shape}.")
  if sketch_dim is not None:
    sketch_dim = _checks.integer(sketch_dim, "sketch_dim", 1)
  seed = _checks.integer(seed, "seed", 0)
  chosen = _resolve_variables(model, variables)
  num_parameters = sum(int(np.prod(variable.shape)) for variable in chosen)
  if chunk_size is None:
    chunk_size = max(1, min(_MAX_GRADIENT_CHUNK, _GRADIENT_CHUNK_BYTES // (4 * num_parameters)))
  chunk_size = _checks.integer(chunk_size, "chunk_size", 1)
  sketch = None if sketch_dim is None else _count_sketch(num_parameters, sketch_dim, seed)

  def example_gradient(example):
    example_x, example_y = example
    with tf.GradientTape() as tape:
      loss = loss_fn(example_y[None], model(example_x[None], training=False))
      if loss.shape.num_elements() not in (None, 1):
        raise ValueError(
            f"`loss_fn` must reduce a single-example batch to one loss; it returned shape {loss.shape}.")
      loss = tf.reshape(loss, [])
    gradients = tape.gradient(loss, chosen, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) for g in gradients], axis=0)

  @tf.function(input_signature=[tf.TensorSpec([None, *x.shape[1:]], tf.as_dtype(x.dtype)),
                                tf.TensorSpec([None, *y.shape[1:]], tf.as_dtype(y.dtype))])
  def chunk_gradients(chunk_x, chunk_y):
    flat = tf.vectorized_map(example_gradient, (chunk_x, chunk_y))
    if sketch is None:
      return flat
    buckets, signs = sketch
    return tf.transpose(tf.math.unsorted_segment_sum(
        tf.transpose(flat) * signs[:, None], buckets, num_segments=sketch_dim))

  return np.concatenate([chunk_gradients(x[start:start + chunk_size], y[start:start + chunk_size]).numpy()
                         for start in range(0, x.shape[0], chunk_size)])


def draw_batches(batcher: _pipeline.RepulsiveBatcher, num_batches: int, *, start_step: int = 0) -> np.ndarray:
  """The indices of the batches `batcher` draws at steps start_step, ..., + num_batches − 1.

  Batches are a pure function of (seed, step), so this does not disturb the pipeline (see
  `RepulsiveBatcher.batch_indices`).

  Args:
    batcher: a `repulsive_batch` batcher already applied to a dataset.
    num_batches: M >= 1.
    start_step: the first global step (>= 0); matters for step-dependent samplers (Anneal PDS).

  Returns:
    `[M, k]` int64 indices into the dataset.

  Raises:
    TypeError: for a non-batcher or non-int counts.
    ValueError: for counts out of range, or a batcher not applied to a dataset.
  """
  if not isinstance(batcher, _pipeline.RepulsiveBatcher):
    raise TypeError(f"`batcher` must be what tf_repulsive.repulsive_batch(...) returned; got {batcher!r}.")
  num_batches = _checks.integer(num_batches, "num_batches", 1)
  start_step = _checks.integer(start_step, "start_step", 0)
  return np.stack([batcher.batch_indices(step)
                   for step in range(start_step, start_step + num_batches)]).astype(np.int64)


def batch_weights(batcher: _pipeline.RepulsiveBatcher, batches: Any) -> np.ndarray:
  """The sample weights an `inclusion_weights=True` stream gives the elements of `batches`.

  Each element's 1 / `batcher.inclusion_probabilities`, scaled to average 1 over its batch.

  Args:
    batcher: a batcher built with `inclusion_weights=True` and applied to a dataset.
    batches: `[M, k]` indices of its batches (from `draw_batches`).

  Returns:
    `[M, k]` float64 weights.

  Raises:
    ValueError: for a batcher without inclusion weights.
  """
  if not isinstance(batcher, _pipeline.RepulsiveBatcher):
    raise TypeError(f"`batcher` must be what tf_repulsive.repulsive_batch(...) returned; got {batcher!r}.")
  probabilities = batcher.inclusion_probabilities
  if probabilities is None:
    raise ValueError(
        "this batcher has no inclusion weights: build it with repulsive_batch(..., inclusion_weights=True).")
  batches = _check_batches(batches, len(probabilities), "batches", 1)
  inverse = _inclusion_weights.inverse_inclusion(probabilities)[batches]
  return inverse * (batches.shape[1] / inverse.sum(axis=1, keepdims=True))


def _gradient_space(num_parameters: int, variables: str | Sequence[Any], sketch_dim: int | None) -> str:
  if isinstance(variables, str):
    which = "all trainable variables" if variables == "all" else "last layer"
  else:
    which = "selected variables"
  sketch = "exact" if sketch_dim is None else f"count sketch to {sketch_dim} dims"
  return f"{which} ({num_parameters:,} parameters), {sketch}, training=False"


def _sampling_data(model: keras.Model, x: Any, y: Any, features: SamplingFeatures) -> tuple[tf.data.Dataset, str]:
  """The dataset the samplers are built over (features first, labels second) and what the features are."""
  labels = np.asarray(y)
  if features is None:
    return tf.data.Dataset.from_tensor_slices((np.asarray(x), labels)), "inputs, flattened"
  if isinstance(features, _contract.FeatureSource):
    computed = _model_features.compute_features(features, model, x, y, verbose=False)
    return (tf.data.Dataset.from_tensor_slices((computed, labels)),
            f"{features!r} of the model at these parameters ({computed.shape[1]} dims)")
  if hasattr(features, "__array__"):  # numpy arrays, eager tensors
    given = np.asarray(features)
    if given.ndim != 2 or given.shape[0] != labels.shape[0] or given.dtype.kind not in "fiu":
      raise ValueError(f"`features` as an array must be numeric [N, d] with N = {labels.shape[0]}; got "
                       f"{given.dtype} {given.shape}.")
    return tf.data.Dataset.from_tensor_slices((given, labels)), f"given features ({given.shape[1]} dims)"
  raise TypeError(f"`features` must be None (the inputs), a tf_repulsive.FeatureSource such as "
                  f"GradientFeatures(), or an [N, d] array; got {features!r}.")


def gradient_variance(model: keras.Model, loss_fn: Callable[[Any, Any], Any], x: Any, y: Any,
                      samplers: Mapping[str, _contract.Sampler | SamplerFactory], batch_size: int, *,
                      num_batches: int = 200, seed: int = 0, start_step: int = 0,
                      variables: str | Sequence[Any] = "all", sketch_dim: int | None = None,
                      chunk_size: int | None = None, features: SamplingFeatures = None,
                      inclusion_weights: bool = False) -> GradientVarianceResult:
  """Theorem-1 variance split of the mini-batch gradient for each sampler, at the model's parameters.

  For each sampler: builds its `repulsive_batch` pipeline over the data (distances measured on
  `features`, labels y), draws `num_batches` batches at consecutive steps, and estimates
  tr Cov(Ĝ), its intensity and pair parts and the bias with `variance_split`, from per-example
  gradients computed once (`per_example_gradients`). Compare `total` with
  `result.uniform_exact.total`.

  Args:
    model: a built Keras model (its current parameters are used).
    loss_fn: per-example loss, see `per_example_gradients`.
    x: `[N, ...]` inputs (the sampling features, flattened, unless `features` says otherwise).
    y: `[N]` integer labels (needed by the mingling-index samplers) or other targets.
    samplers: name -> a sampler, or a factory returning one (such as `tf_repulsive.VanillaPDS`).
    batch_size: `k`.
    num_batches: M >= 3 draws per sampler (the standard errors scale as 1/sqrt(M)).
    seed: seed of the pipelines and of the sketch.
    start_step: first global step of the draws (for Anneal PDS: where in its schedule to look).
    variables: "all", "last_layer" or a list of variables, see `per_example_gradients`.
    sketch_dim: count-sketch dimension, or None for exact gradients.
    chunk_size: examples per vectorised gradient call; None: automatic.
    features: where the samplers measure distances (and mingling values): None for the inputs
      x, flattened; a `tf_repulsive.FeatureSource` (`GradientFeatures()`, `EmbeddingFeatures()`)
      for the model's own space at its current parameters; or an `[N, d]` array.
    inclusion_weights: weight each sampler's elements as `repulsive_batch(...,
      inclusion_weights=True)` streams do (1 / inclusion probability, scaled to average 1 per
      batch): the reports are then those of the weighted estimate (intensity and pair NaN).

  Returns:
    One report per sampler, the closed-form uniform reference and the draws (`result.batches`);
    `print(result)` shows the table.

  Raises:
    TypeError: for a bad model, loss, sampler entry, feature source or argument types.
    ValueError: for bad sizes, an empty `samplers`, or anything `repulsive_batch` rejects.
  """
  if not isinstance(samplers, Mapping):
    raise TypeError(f"`samplers` must be a mapping name -> sampler or factory; got {samplers!r}.")
  if not samplers:
    raise ValueError("`samplers` is empty; give at least one sampler.")
  batch_size = _checks.integer(batch_size, "batch_size", 1)
  num_batches = _checks.integer(num_batches, "num_batches", 3)
  seed = _checks.integer(seed, "seed", 0)
  start_step = _checks.integer(start_step, "start_step", 0)
  instances = {}
  for name, entry in samplers.items():
    sampler = entry if isinstance(entry, _contract.Sampler) else entry() if callable(entry) else None
    if not isinstance(sampler, _contract.Sampler):
      raise TypeError(
          f"`samplers[{name!r}]` must be a tf_repulsive sampler or a factory of one; got {entry!r}.")
    instances[str(name)] = sampler
  data, sampling_space = _sampling_data(model, x, y, features)
  gradients = per_example_gradients(model, loss_fn, x, y, variables=variables, sketch_dim=sketch_dim,
                                    seed=seed, chunk_size=chunk_size)
  batches, radii, weights = {}, {}, {}
  for name, sampler in instances.items():
    batcher = _pipeline.repulsive_batch(batch_size, sampler, seed=seed, start_step=start_step,
                                        inclusion_weights=inclusion_weights)
    data.apply(batcher)
    batches[name] = draw_batches(batcher, num_batches, start_step=start_step)
    radii[name] = batcher.stats().report.get("radius")
    if inclusion_weights:
      weights[name] = batch_weights(batcher, batches[name])
  num_parameters = sum(int(np.prod(v.shape)) for v in _resolve_variables(model, variables))
  result = variance_split(gradients, batches, radii=radii, weights=weights,
                          gradient_space=_gradient_space(num_parameters, variables, sketch_dim))
  return dataclasses.replace(result, sampling_space=sampling_space)


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
  variance: GradientVarianceReport
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
  uniform_exact: GradientVarianceReport
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
                 chunk_size: int | None = None, features: SamplingFeatures = None) -> RadiusSweepResult:
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
  data, sampling_space = _sampling_data(model, x, y, features)

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
  gradients = per_example_gradients(model, loss_fn, x, y, variables=variables, sketch_dim=sketch_dim,
                                    seed=seed, chunk_size=chunk_size)
  draws = {label: draw_batches(batcher, num_batches, start_step=start_step) for label, batcher in batchers.items()}
  split = variance_split(gradients, draws)
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
