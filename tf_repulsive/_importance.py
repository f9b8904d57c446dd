"""Importance samplers: darts in proportion to a score, without disks (`Importance`) or with them (`ImportancePDS`).

`Marginals` draws with the same machinery in proportion to another sampler's inclusion
probabilities: the disks' skew without their repulsion.

The score of an element is the norm of its feature vector. In the model's space that is what
the features measure: with `GradientFeatures`, the norm of the element's last-layer gradient
(Katharopoulos and Fleuret's bound on its full gradient norm, 2018); with `LossFeatures`, its
loss. The darts hit element i with probability

    p_i = (1 - mixing) * s_i / sum(s) + mixing / N,

a mixture with uniform darts ("defensive" importance sampling, Hesterberg 1995). The mixture
keeps every element reachable, also those whose score is 0 now and may grow later. It also
bounds each inclusion weight (`repulsive_batch(..., inclusion_weights=...)`) at about
1 / mixing times uniform sampling's, which bounds the variance those weights add.

With an `irreducible_loss`, s_i is the norm less the element's irreducible loss, stopped at 0:
with `LossFeatures`, RHO-LOSS's reducible loss (Mindermann et al., 2022).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _dart_throwing
from tf_repulsive._contract import BatchDrawer
from tf_repulsive._contract import Sampler
from tf_repulsive._contract import SamplingContext
from tf_repulsive._samplers import DiskSampler
from tf_repulsive._samplers import check_radius
from tf_repulsive._samplers import dart_budget

# Rows whose norms are computed per numpy step: the float64 copy stays small.
_ROW_BLOCK = 16384


def _checked_mixing(mixing: float) -> float:
  mixing = _checks.real(mixing, "mixing", positive=True, type_hint="a number in (0, 1]")
  if not 0.0 < mixing <= 1.0:
    raise ValueError(
        f"`mixing` must be in (0, 1]: the share of uniform darts, which keeps every element reachable; "
        f"got {mixing}. Use 1 for uniform sampling.")
  return mixing


def dart_weights(features: np.ndarray, mixing: float, irreducible: np.ndarray | None = None) -> np.ndarray:
  """`[N]` float64 each element's dart probability: its score's share, mixed with uniform.

  Args:
    features: `[N, d]` the elements' features; the score is each row's Euclidean norm.
    mixing: the share of uniform darts, in (0, 1].
    irreducible: None, or `[N]` amounts subtracted from the scores, which stop at 0.
  """
  num_points = features.shape[0]
  scores = np.empty(num_points)
  for start in range(0, num_points, _ROW_BLOCK):
    # In the features' own precision: a float64 pass would cost more than the rest of a refresh,
    # and float32's relative error, about d * 6e-8, does not matter to a dart's probability.
    rows = np.asarray(features[start:start + _ROW_BLOCK])
    scores[start:start + _ROW_BLOCK] = np.sqrt(np.einsum("ij,ij->i", rows, rows))
  if not np.all(np.isfinite(scores)):
    raise ValueError("the features hold NaN or infinite values, so their norms give no score; check the features.")
  if irreducible is not None:
    scores = np.maximum(scores - irreducible, 0.0)
  total = scores.sum()
  share = scores / total if total > 0 else np.full(num_points, 1.0 / num_points)
  return (1.0 - mixing) * share + mixing / num_points


def _report(weights: np.ndarray, mixing: float) -> dict[str, float]:
  """What the build reports: the mixing, and the spread of the dart probabilities over uniform's."""
  uniform = 1.0 / weights.size
  return {"mixing": mixing, "max_dart_ratio": float(weights.max() / uniform),
          "min_dart_ratio": float(weights.min() / uniform)}


@dataclasses.dataclass(frozen=True, eq=False)
class Importance(Sampler):
  """Importance sampling: k distinct elements, darts in proportion to each element's score.

  Darts hit element i with probability p_i (the module's formula: its feature norm's share,
  mixed with uniform); a dart that repeats an element of the batch is thrown again. That is
  successive sampling without replacement, the law of Gumbel top-k on log p. Plain means of the
  batch's losses are then biased towards high scores. `inclusion_weights="unbiased"` weights
  each element by k / (N pi_i), pi_i its probability of being in a batch, which removes the bias.

  Use it in the model's space (`ModelSpace`), where the score follows the model: with
  `GradientFeatures` the darts follow the last-layer gradient norm, with `LossFeatures` the loss.
  On fixed features the score is the norm of the input.

  Attributes:
    mixing: the share of uniform darts, in (0, 1]: every element's dart probability is at least
      mixing / N, and 1 gives uniform sampling.
    max_darts: darts thrown per batch before the fallback fill; None: max(16 k, 256).
    irreducible_loss: None, or each element's loss under a model trained on held-out data, `[N]`
      in dataset order, subtracted from the score (which stops at 0). With `LossFeatures` the
      score is then RHO-LOSS's reducible loss: elements no model fits (mislabelled, ambiguous)
      are not chased. `compute_features(LossFeatures(), held_out_model, x, y)[:, 0]` gives it.

  Example:

  >>> import numpy as np, tensorflow as tf, tf_repulsive
  >>> features = np.array([[3.0]] * 10 + [[0.1]] * 90, np.float32)
  >>> batcher = tf_repulsive.repulsive_batch(8, tf_repulsive.Importance(mixing=0.1), seed=0, start_step=0)
  >>> _ = tf.data.Dataset.from_tensor_slices(features).apply(batcher)
  >>> draws = np.concatenate([batcher.batch_indices(step) for step in range(200)])
  >>> bool(np.mean(draws < 10) > 0.5)  # 10% of the elements, three quarters of the score
  True
  """

  mixing: float = 0.2
  max_darts: int | None = None
  irreducible_loss: Any = None

  def __post_init__(self):
    object.__setattr__(self, "mixing", _checked_mixing(self.mixing))
    _checks.count_fields(self, "max_darts")
    _checks.irreducible_loss(self.irreducible_loss)

  def build(self, context: SamplingContext) -> BatchDrawer:
    weights = dart_weights(context.features, self.mixing,
                           _checks.irreducible_for(self.irreducible_loss, context.features.shape[0]))
    plan = _dart_throwing.DartPlan(point_radius=None, pi=None, mingling_values=None, num_mingling_values=0,
                                   max_darts=dart_budget(self.max_darts, context.batch_size), point_weights=weights)
    thrower = _dart_throwing.DartThrower(context.features, plan, context.batch_size, context.distance_cache_bytes,
                                         verbose=context.verbose, max_steps_per_draw=context.max_steps_per_draw)
    return thrower.described(_report(weights, self.mixing))


@dataclasses.dataclass(frozen=True, eq=False)
class ImportancePDS(DiskSampler):
  """Poisson disks whose density is set by importance: darts by score, then the disk test.

  The paper's Dense PDS sets where darts land by the mingling value. Here each dart lands on
  element i with probability p_i, as in `Importance`, and is accepted unless it lies within
  `radius` of an element already in the batch, as in `VanillaPDS`. So a batch holds many
  high-score elements, but never two near-duplicates of one. Distances and scores come from the
  same features: in the model's space, `GradientFeatures` gives both.

  Attributes:
    radius: disk radius in feature space; None: half the median pairwise distance; "auto": the
      largest radius at which the darts fill the batch (as `VanillaPDS`).
    mixing: the share of uniform darts, in (0, 1] (as `Importance`).
    max_darts: darts thrown per batch before the fallback fill; None: max(16 k, 256).
    irreducible_loss: None, or `[N]` amounts subtracted from the scores (as `Importance`).
  """

  radius: float | str | None = "auto"
  mixing: float = 0.2
  max_darts: int | None = None
  irreducible_loss: Any = None

  def __post_init__(self):
    check_radius(self.radius)
    object.__setattr__(self, "mixing", _checked_mixing(self.mixing))
    _checks.count_fields(self, "max_darts")
    _checks.irreducible_loss(self.irreducible_loss)

  def plan(self, *, batch_size, radius, mingling_values, num_points):
    del mingling_values
    return _dart_throwing.DartPlan(
        point_radius=np.full([num_points], radius), pi=None, mingling_values=None, num_mingling_values=0,
        max_darts=dart_budget(self.max_darts, batch_size), one_radius=True)

  def _dart_weights(self, context: SamplingContext) -> tuple[np.ndarray, dict[str, float]]:
    weights = dart_weights(context.features, self.mixing,
                           _checks.irreducible_for(self.irreducible_loss, context.features.shape[0]))
    return weights, _report(weights, self.mixing)


# The key of the inner sampler's inclusion estimate: a property of the data, like the radius.
_MARGINALS_KEY = (20180529, 0x3A6)
# Inclusion probabilities are kept below 1 by this much, so that their weights stay finite.
_MAX_INCLUSION = 1.0 - 1e-6


@dataclasses.dataclass(frozen=True, eq=False)
class Marginals(Sampler):
  """The marginals of another sampler without its repulsion: a control for the disks.

  Estimates each element's probability pi_i of being in a batch of `sampler` (as
  `inclusion_weights` does), then draws k distinct elements by darts in proportion to
  w_i = −log(1 − pi_i). For such darts an element's probability of being in the batch is close
  to 1 − exp(−w_i t), with t set by the batch size (Rosén, 1997); here t = 1 and that is pi_i.
  So each element comes about as often as under `sampler`, but the elements of a batch do not
  repel: what the disks add beyond their skew shows as the difference between the two.

  Attributes:
    sampler: a sampler whose drawer gives its inclusion probabilities (Uniform, Vanilla, Easy or
      Dense PDS, `Importance`, `ImportancePDS`).
    max_darts: darts thrown per batch before the fallback fill; None: max(16 k, 256).
  """

  sampler: Sampler
  max_darts: int | None = None

  def __post_init__(self):
    if not isinstance(self.sampler, Sampler):
      raise TypeError(f"`sampler` must be a tf_repulsive.Sampler, such as VanillaPDS(); got {self.sampler!r}.")
    _checks.count_fields(self, "max_darts")

  @property
  def needs_labels(self) -> bool:  # type: ignore[override]
    return self.sampler.needs_labels

  @property
  def label_kind(self) -> str:  # type: ignore[override]
    return self.sampler.label_kind

  def build(self, context: SamplingContext) -> BatchDrawer:
    inner = self.sampler.build(context)
    probabilities = inner.inclusion_probabilities(tf.constant(_MARGINALS_KEY, tf.int64), context.verbose)
    if probabilities is None:
      raise ValueError(
          f"Marginals needs each element's probability of being in a batch of {type(self.sampler).__name__}, "
          "which its drawer does not give (inclusion_probabilities() is None); use Uniform, VanillaPDS, "
          "EasyPDS, DensePDS, Importance or ImportancePDS.")
    weights = -np.log1p(-np.clip(np.asarray(probabilities, np.float64), 0.0, _MAX_INCLUSION))
    if not weights.sum() > 0:
      raise ValueError(f"{type(self.sampler).__name__} gave no element a positive inclusion probability.")
    plan = _dart_throwing.DartPlan(point_radius=None, pi=None, mingling_values=None, num_mingling_values=0,
                                   max_darts=dart_budget(self.max_darts, context.batch_size), point_weights=weights)
    thrower = _dart_throwing.DartThrower(context.features, plan, context.batch_size, context.distance_cache_bytes,
                                         verbose=context.verbose, max_steps_per_draw=context.max_steps_per_draw)
    return thrower.described({**inner.report, "max_inclusion": float(np.max(probabilities)),
                              "min_inclusion": float(np.min(probabilities))}, inner.groups)
