"""k-DPP baselines: exact k-DPP (Kulesza & Taskar) and a fast MCMC approximation.

The L-ensemble kernel is built from the same feature vectors the PDS samplers use: RBF
exp(-|x - y|^2 / (2 sigma^2)) with the median heuristic for sigma by default, or linear x.y.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _arrays
from tf_repulsive import _progress
from tf_repulsive import _radius
from tf_repulsive import _contract

_KERNELS = ("rbf", "linear")
# Added to the diagonal of the k x k kernel blocks the MCMC chain inverts: RBF blocks of nearby
# points are nearly singular, and the ridge changes determinant ratios by a relative ~1e-6.
_MCMC_RIDGE = 1e-6


def _check_kernel(kernel: str, bandwidth: float | None) -> None:
  if kernel not in _KERNELS:
    raise ValueError(f"`kernel` must be one of {_KERNELS}; got {kernel!r}.")
  if bandwidth is not None:
    _checks.real(bandwidth, "bandwidth", positive=True, type_hint="a number or None (median heuristic)")


def rbf_bandwidth(features: np.ndarray, bandwidth: float | None) -> float:
  """The configured bandwidth, or the median pairwise distance (median heuristic)."""
  if bandwidth is not None:
    return float(bandwidth)
  median = 2.0 * _radius.half_median_distance(features)
  if median <= 0:
    raise ValueError("the features have (almost) no spread: pass an explicit `bandwidth`.")
  return median


def kernel_matrix(rows: np.ndarray, cols: np.ndarray, kernel: str, bandwidth: float) -> np.ndarray:
  """float64 L-ensemble kernel between two sets of feature vectors."""
  rows = rows.astype(np.float64)
  cols = cols.astype(np.float64)
  gram = rows @ cols.T
  if kernel == "linear":
    return gram
  sq_dist = np.einsum("ij,ij->i", rows, rows)[:, None] + np.einsum("ij,ij->i", cols, cols)[None, :] - 2 * gram
  return np.exp(-np.maximum(sq_dist, 0.0) / (2.0 * bandwidth**2))


def log_elementary_symmetric(eigenvalues: np.ndarray, k: int) -> np.ndarray:
  """log e_l(lambda_1..lambda_n) for l = 0..k, n = 0..N, as a `[k + 1, N + 1]` float64 table.

  The recursion e_l(n) = e_l(n - 1) + lambda_n e_{l-1}(n - 1) in log space, so large N and k do
  not overflow.
  """
  num = eigenvalues.size
  with np.errstate(divide="ignore"):
    log_lambda = np.log(eigenvalues)
  table = np.full((k + 1, num + 1), -np.inf)
  table[0, :] = 0.0
  for n in range(1, num + 1):
    table[1:, n] = np.logaddexp(table[1:, n - 1], log_lambda[n - 1] + table[:-1, n - 1])
  return table


def _sample_categorical(log_weights: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
  """One index with probability ∝ exp(log_weights), by inverse CDF (entries of -inf never drawn)."""
  weights = tf.exp(log_weights - tf.reduce_max(log_weights))
  cumulative = tf.cumsum(weights)
  target = tf.random.stateless_uniform([], key, dtype=tf.float64) * cumulative[-1]
  index = tf.searchsorted(cumulative, target[None], side="right")[0]
  return tf.minimum(tf.cast(index, tf.int32), tf.size(weights, tf.int32) - 1)


class _SpectralKDPPDrawer(_contract.BatchDrawer):
  """Exact k-DPP: choose k eigenvectors by elementary symmetric polynomials, then a projection DPP."""


  def __init__(self, eigenvalues: np.ndarray, eigenvectors: np.ndarray, batch_size: int):
    self._k = batch_size
    self._num_points = eigenvectors.shape[0]
    with np.errstate(divide="ignore"):
      self._log_lambda = tf.constant(np.log(eigenvalues))
    self._log_esp = tf.constant(log_elementary_symmetric(eigenvalues, batch_size))
    self._eigenvectors = _arrays.to_tensor(_arrays.aligned_copy(eigenvectors, np.float32))

  @tf.autograph.experimental.do_not_convert
  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    step_key = tf.random.experimental.stateless_fold_in(key, first_step)
    chosen = self._choose_eigenvectors(tf.random.experimental.stateless_fold_in(step_key, 0))
    basis = tf.gather(tf.cast(self._eigenvectors, tf.float64), chosen, axis=1)
    indices = self._projection_dpp(basis, tf.random.experimental.stateless_fold_in(step_key, 1))
    return indices[None], tf.zeros([1], tf.int32)

  def _choose_eigenvectors(self, key: tf.Tensor) -> tf.Tensor:
    """k eigenvector indices J with P(J) ∝ prod_{n in J} lambda_n.

    Going down from n = N, the next included eigenvector m <= n, given l still to choose, has
    probability lambda_m e_{l-1}(m - 1) / e_l(n) (the skipped ones telescope), so each of the k
    choices is one categorical draw instead of N coin flips.
    """
    positions = tf.range(1, self._num_points + 1)

    def choose(order, upper, chosen):  # order: l, the eigenvectors still to choose
      log_weights = self._log_lambda + self._log_esp[order - 1, :-1]
      log_weights = tf.where(positions <= upper, log_weights, -np.inf)
      m = _sample_categorical(log_weights, tf.random.experimental.stateless_fold_in(key, tf.cast(order, tf.int64))) + 1
      chosen = tf.tensor_scatter_nd_update(chosen, [[self._k - order]], [m - 1])
      return order - 1, m - 1, chosen

    _, _, chosen = tf.while_loop(
        lambda order, upper, chosen: order > 0, choose,
        (tf.constant(self._k), tf.constant(self._num_points), tf.zeros([self._k], tf.int32)),
        maximum_iterations=self._k)
    return chosen

  def _projection_dpp(self, basis: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    """k points from the projection DPP with kernel basis basis^T, by sequential conditioning.

    P(next = j | chosen S) ∝ the squared norm of row j of `basis` outside the span of the chosen
    rows; `directions` holds an orthonormal basis of that span.
    """
    residual = tf.reduce_sum(tf.square(basis), axis=1)

    def pick(t, residual, directions, indices):
      log_weights = tf.math.log(tf.maximum(residual, 0.0))
      j = _sample_categorical(log_weights, tf.random.experimental.stateless_fold_in(key, tf.cast(t, tf.int64)))
      row = basis[j]
      orthogonal = row - tf.linalg.matvec(directions, tf.linalg.matvec(directions, row, transpose_a=True))
      direction = orthogonal / tf.norm(orthogonal)
      directions = tf.tensor_scatter_nd_update(
          tf.transpose(directions), [[t]], [direction])
      directions = tf.transpose(directions)
      residual = residual - tf.square(tf.linalg.matvec(basis, direction))
      residual = tf.tensor_scatter_nd_update(residual, [[j]], [0.0])
      indices = tf.tensor_scatter_nd_update(indices, [[t]], [j])
      return t + 1, residual, directions, indices

    _, _, _, indices = tf.while_loop(
        lambda t, *_: t < self._k, pick,
        (tf.constant(0), residual, tf.zeros([self._k, self._k], tf.float64), tf.zeros([self._k], tf.int32)),
        maximum_iterations=self._k)
    return indices


class _ExchangeChainDrawer(_contract.BatchDrawer):
  """Approximate k-DPP: a Metropolis exchange chain of `swaps` proposals from a uniform k-set."""


  def __init__(self, features: np.ndarray, kernel: str, bandwidth: float, batch_size: int, swaps: int):
    self._k = batch_size
    self._num_points = features.shape[0]
    self._swaps = swaps
    self._kernel = kernel
    self._bandwidth = bandwidth
    features = _arrays.aligned_copy(features, np.float64)
    self._sq_norms = tf.constant(np.einsum("ij,ij->i", features, features))
    self._features = _arrays.to_tensor(features)

  def _kernel_from_gram(self, gram: tf.Tensor, row_sq: tf.Tensor, col_sq: tf.Tensor) -> tf.Tensor:
    if self._kernel == "linear":
      return gram
    sq_dist = tf.maximum(row_sq + col_sq - 2.0 * gram, 0.0)
    return tf.exp(-sq_dist / (2.0 * self._bandwidth**2))

  @tf.autograph.experimental.do_not_convert
  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    step_key = tf.random.experimental.stateless_fold_in(key, first_step)
    # The start: k distinct points uniformly at random (top-k of uniform scores).
    start_scores = tf.random.stateless_uniform(
        [self._num_points], tf.random.experimental.stateless_fold_in(step_key, 0))
    members = tf.math.top_k(start_scores, self._k).indices
    member_x = tf.gather(self._features, members)
    member_sq = tf.gather(self._sq_norms, members)
    block = self._kernel_from_gram(tf.matmul(member_x, member_x, transpose_b=True),
                                   member_sq[:, None], member_sq[None, :])
    ridge = _MCMC_RIDGE * tf.eye(self._k, dtype=tf.float64)

    # Swapping member s for outsider t multiplies det(L_S) by c A_ss + (A u)_s^2, where A = L_S^-1,
    # u = L_{S,t} and c = L_tt - u^T A u (bordering by t, then removing s). The chain carries the
    # members' features and kernel block, so a proposal costs O(k d + k^2) and an accepted swap
    # one k x k inverse.
    def propose(proposal, members, member_x, member_sq, block, inverse):
      proposal_key = tf.random.experimental.stateless_fold_in(step_key, tf.cast(proposal, tf.int64) + 1)
      draws = tf.random.stateless_uniform([3], proposal_key, dtype=tf.float64)
      slot = tf.minimum(tf.cast(draws[0] * self._k, tf.int32), self._k - 1)
      outsider = tf.minimum(tf.cast(draws[1] * self._num_points, tf.int32), self._num_points - 1)
      outsider_x = self._features[outsider]
      outsider_sq = self._sq_norms[outsider]
      coupling = self._kernel_from_gram(tf.linalg.matvec(member_x, outsider_x), member_sq, outsider_sq)
      self_kernel = self._kernel_from_gram(outsider_sq, outsider_sq, outsider_sq) + _MCMC_RIDGE
      projected = tf.linalg.matvec(inverse, coupling)
      schur = self_kernel - tf.tensordot(coupling, projected, 1)
      ratio = schur * inverse[slot, slot] + tf.square(projected[slot])
      is_outsider = tf.logical_not(tf.reduce_any(tf.equal(members, outsider)))
      accept = tf.logical_and(is_outsider, draws[2] < ratio)

      def swap():
        new_row = tf.tensor_scatter_nd_update(coupling, [[slot]], [self_kernel - _MCMC_RIDGE])
        new_block = tf.tensor_scatter_nd_update(block, [[slot]], [new_row])
        new_block = tf.transpose(tf.tensor_scatter_nd_update(tf.transpose(new_block), [[slot]], [new_row]))
        return (tf.tensor_scatter_nd_update(members, [[slot]], [outsider]),
                tf.tensor_scatter_nd_update(member_x, [[slot]], [outsider_x]),
                tf.tensor_scatter_nd_update(member_sq, [[slot]], [outsider_sq]),
                new_block, tf.linalg.inv(new_block + ridge))

      return (proposal + 1, *tf.cond(accept, swap,
                                     lambda: (members, member_x, member_sq, block, inverse)))

    outputs = tf.while_loop(
        lambda proposal, *_: proposal < self._swaps, propose,
        (tf.constant(0), members, member_x, member_sq, block, tf.linalg.inv(block + ridge)),
        maximum_iterations=self._swaps)
    return outputs[1][None], tf.zeros([1], tf.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class KDPP(_contract.Sampler):
  """Exact k-DPP over the dataset (Kulesza & Taskar), the paper's DPP baseline.

  One-time: the N x N L-ensemble kernel and its eigendecomposition (O(N^3) time, ~20 N^2 bytes).
  Per batch: k categorical draws over the N eigenvalues (elementary symmetric polynomials), then
  a projection DPP draw, O(N k^2).

  Attributes:
    kernel: "rbf" (default) or "linear" (x.y; its rank caps k at the feature dimension).
    bandwidth: RBF sigma; None: the median pairwise distance (median heuristic).
    max_kernel_bytes: refuse datasets whose kernel and eigenvectors would need more memory.
  """

  kernel: str = "rbf"
  bandwidth: float | None = None
  max_kernel_bytes: int = 4 * 2**30

  def __post_init__(self):
    _check_kernel(self.kernel, self.bandwidth)
    _checks.count_fields(self, "max_kernel_bytes")

  def build(self, context):
    features = context.features
    num_points, dim = features.shape
    needed = 20 * num_points**2
    if needed > self.max_kernel_bytes:
      raise ValueError(
          f"exact k-DPP needs the {num_points} x {num_points} kernel and its eigenvectors, about "
          f"{needed / 2**30:.1f} GiB > `max_kernel_bytes` = {self.max_kernel_bytes / 2**30:.1f} GiB; "
          "use FastKDPP, a subsample, or raise max_kernel_bytes.")
    if self.kernel == "linear" and context.batch_size > dim:
      raise ValueError(
          f"a linear kernel on {dim}-dimensional features has rank <= {dim} < batch_size = "
          f"{context.batch_size}; use kernel='rbf' or a smaller batch.")
    bandwidth = rbf_bandwidth(features, self.bandwidth) if self.kernel == "rbf" else 0.0
    with _progress.elapsed(f"k-DPP kernel and eigendecomposition ({num_points} x {num_points})", context.verbose):
      eigenvalues, eigenvectors = np.linalg.eigh(kernel_matrix(features, features, self.kernel, bandwidth))
    eigenvalues = np.maximum(eigenvalues, 0.0)
    positive = int(np.sum(eigenvalues > eigenvalues.max() * 1e-12))
    if positive < context.batch_size:
      raise ValueError(
          f"the kernel has only {positive} non-zero eigenvalues < batch_size = {context.batch_size}: "
          "no k-subset has positive probability. Use an RBF kernel or a smaller batch.")
    return _SpectralKDPPDrawer(eigenvalues, eigenvectors, context.batch_size)


@dataclasses.dataclass(frozen=True, eq=False)
class FastKDPP(_contract.Sampler):
  """Approximate k-DPP by a Metropolis exchange chain (Anari et al. 2016; Li et al. 2016).

  Each batch starts from k distinct points uniformly at random and makes `swaps` proposals: swap a
  uniformly chosen member for a uniformly chosen point, accepted with probability
  min(1, det(L_S') / det(L_S)). No N x N matrix: per batch O(swaps (k d + k^2) + accepted k^3).
  More swaps approach the exact k-DPP (the chain's mixing time grows with N and k).

  Attributes:
    kernel: "rbf" (default) or "linear".
    bandwidth: RBF sigma; None: the median pairwise distance.
    swaps: proposals per batch; None: 10 k.
  """

  kernel: str = "rbf"
  bandwidth: float | None = None
  swaps: int | None = None

  def __post_init__(self):
    _check_kernel(self.kernel, self.bandwidth)
    _checks.count_fields(self, "swaps")

  def build(self, context):
    features = context.features
    if self.kernel == "linear" and context.batch_size > features.shape[1]:
      raise ValueError(
          f"a linear kernel on {features.shape[1]}-dimensional features has rank < batch_size = "
          f"{context.batch_size}; use kernel='rbf' or a smaller batch.")
    bandwidth = rbf_bandwidth(features, self.bandwidth) if self.kernel == "rbf" else 0.0
    return _ExchangeChainDrawer(features, self.kernel, bandwidth, context.batch_size,
                                self.swaps or 10 * context.batch_size)
