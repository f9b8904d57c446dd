"""ActiveBias (Chang, Learned-Miller, McCallum 2017): sampling by prediction variance.

SGD-SPV: example i is drawn with probability ∝ sqrt(var_i + var_i^2 / (n_i - 1)) + smoothness,
where var_i is the sample variance of the history of the model's predicted probability of i's
true label and n_i the history length; uniform during warm-up. The history lives in variables
that `ActiveBiasCallback` (in `_callback`) updates once per epoch with one inference pass over the training set.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _contract


class ActiveBiasState(tf.Module):
  """The per-example prediction history and the sampling weights, as checkpointable variables.

  Save it with the model (`tf.train.Checkpoint(model=model, active_bias=state)`): it is not part
  of the data iterator's checkpoint, and the weights decide which batches are drawn.

  Attributes:
    count: `[N]` float64 variable, per example the length n of its prediction history.
    total: `[N]` float64 variable, per example the sum of its recorded probabilities of the true
      label.
    total_sq: `[N]` float64 variable, the sums of their squares.
    weights: `[N]` float64 variable, the unnormalised sampling weights (all ones until the
      warm-up ends).
    epochs: int64 scalar variable, the epochs recorded.
  """

  def __init__(self, num_points: int):
    super().__init__(name="active_bias_state")
    self.count = tf.Variable(tf.zeros([num_points], tf.float64), trainable=False)
    self.total = tf.Variable(tf.zeros([num_points], tf.float64), trainable=False)
    self.total_sq = tf.Variable(tf.zeros([num_points], tf.float64), trainable=False)
    self.weights = tf.Variable(tf.ones([num_points], tf.float64), trainable=False)
    self.epochs = tf.Variable(0, dtype=tf.int64, trainable=False)


def prediction_variance_weights(count: np.ndarray, total: np.ndarray, total_sq: np.ndarray,
                                smoothness: float) -> np.ndarray:
  """sqrt(var + var^2 / (n - 1)) + smoothness per example, from running sums of its history.

  Args:
    count: `[N]` history lengths n (>= 2).
    total: `[N]` sums of the recorded probabilities.
    total_sq: `[N]` sums of their squares.
    smoothness: the constant added to every weight (keeps every example reachable).

  Returns:
    `[N]` float64 unnormalised sampling weights.
  """
  variance = np.maximum(total_sq - total**2 / count, 0.0) / (count - 1)
  return np.sqrt(variance + variance**2 / (count - 1)) + smoothness


class WeightedDrawer(_contract.BatchDrawer):
  """k distinct points, successively with probability ∝ weights (Gumbel top-k); O(N) per batch."""

  state: ActiveBiasState

  def __init__(self, state: ActiveBiasState, batch_size: int):
    self.state = state
    self._k = batch_size

  @tf.autograph.experimental.do_not_convert
  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    step_key = tf.random.experimental.stateless_fold_in(key, first_step)
    uniform = tf.random.stateless_uniform(tf.shape(self.state.weights), step_key, dtype=tf.float64,
                                          minval=np.finfo(np.float64).tiny, maxval=1.0)
    gumbel = -tf.math.log(-tf.math.log(uniform))
    indices = tf.math.top_k(tf.math.log(self.state.weights.read_value()) + gumbel, k=self._k).indices
    return indices[None], tf.zeros([1], tf.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class ActiveBias(_contract.Sampler):
  """ActiveBias (SGD-SPV) baseline; needs `ActiveBiasCallback` in `fit` to learn its weights.

  Attributes:
    smoothness: the constant added to every weight. 0.2 follows a public re-implementation; the
      paper tunes it per dataset.
    warmup_epochs: epochs of uniform sampling before the weights are used (at least 2, so that
      every example has a variance).
  """

  smoothness: float = 0.2
  warmup_epochs: int = 2
  needs_labels = True

  def __post_init__(self):
    _checks.real(self.smoothness, "smoothness", positive=True)
    object.__setattr__(self, "warmup_epochs", _checks.integer(
        self.warmup_epochs, "warmup_epochs", 2, hint="A variance needs two predictions."))

  def build(self, context):
    return WeightedDrawer(ActiveBiasState(context.features.shape[0]), context.batch_size)
