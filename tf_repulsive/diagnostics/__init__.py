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

`variance_split`, `uniform_variance` and `pair_correlation` are numpy estimators. They take the
gradients and the draws as arrays, wherever these come from. `per_example_gradients`,
`draw_batches` and `batch_weights` compute them from a Keras model and a batcher.
"""

from tf_repulsive.diagnostics._gradient_variance import SamplerFactory
from tf_repulsive.diagnostics._gradient_variance import gradient_variance
from tf_repulsive.diagnostics._gradients import per_example_gradients
from tf_repulsive.diagnostics._pair_correlation import PairCorrelation
from tf_repulsive.diagnostics._pair_correlation import pair_correlation
from tf_repulsive.diagnostics._radius_sweep import RadiusReport
from tf_repulsive.diagnostics._radius_sweep import RadiusSweepResult
from tf_repulsive.diagnostics._radius_sweep import radius_sweep
from tf_repulsive.diagnostics._sampling import batch_weights
from tf_repulsive.diagnostics._sampling import draw_batches
from tf_repulsive.diagnostics._variance_split import GradientVarianceReport
from tf_repulsive.diagnostics._variance_split import GradientVarianceResult
from tf_repulsive.diagnostics._variance_split import uniform_variance
from tf_repulsive.diagnostics._variance_split import variance_split

__all__ = (
    "GradientVarianceReport",
    "GradientVarianceResult",
    "PairCorrelation",
    "RadiusReport",
    "RadiusSweepResult",
    "SamplerFactory",
    "batch_weights",
    "draw_batches",
    "gradient_variance",
    "pair_correlation",
    "per_example_gradients",
    "radius_sweep",
    "uniform_variance",
    "variance_split",
)

# Names the module does not have, and what to use instead.
_REMOVED = {
    "SamplingFeatures": "`features=` of gradient_variance and radius_sweep takes None, a FeatureSource or "
                        "an [N, d] array",
}


def __getattr__(name: str):
  if name in _REMOVED:
    raise AttributeError(f"module 'tf_repulsive.diagnostics' has no attribute {name!r}: {_REMOVED[name]}.")
  raise AttributeError(f"module 'tf_repulsive.diagnostics' has no attribute {name!r}")
