"""ActiveBias (Chang, Learned-Miller, McCallum 2017): sampling by prediction variance.

SGD-SPV: example i is drawn with probability ∝ sqrt(var_i + var_i^2 / (n_i - 1)) + smoothness,
where var_i is the sample variance of the history of the model's predicted probability of i's
true label and n_i the history length; uniform during warm-up. The history lives in variables
that `ActiveBiasCallback` updates once per epoch with one inference pass over the training set.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np
import tensorflow as tf

from tf_repulsive import _callback
from tf_repulsive import _pipeline
from tf_repulsive import _samplers


class ActiveBiasState(tf.Module):
  """The per-example prediction history and the sampling weights, as checkpointable variables.

  Save it with the model (`tf.train.Checkpoint(model=model, active_bias=state)`): it is not part
  of the data iterator's checkpoint, and the weights decide which batches are drawn.
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


class _WeightedDrawer(_samplers.BatchDrawer):
  """k distinct points, successively with probability ∝ weights (Gumbel top-k); O(N) per batch."""


  def __init__(self, state: ActiveBiasState, batch_size: int):
    self.state = state
    self._k = batch_size

  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    step_key = tf.random.experimental.stateless_fold_in(key, first_step)
    uniform = tf.random.stateless_uniform(tf.shape(self.state.weights), step_key, dtype=tf.float64,
                                          minval=np.finfo(np.float64).tiny, maxval=1.0)
    gumbel = -tf.math.log(-tf.math.log(uniform))
    indices = tf.math.top_k(tf.math.log(self.state.weights.read_value()) + gumbel, k=self._k).indices
    return indices[None], tf.zeros([1], tf.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class ActiveBias(_samplers.Sampler):
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
    if isinstance(self.smoothness, bool) or not isinstance(self.smoothness, numbers.Real):
      raise TypeError(f"`smoothness` must be a number; got {self.smoothness!r}.")
    if not np.isfinite(self.smoothness) or self.smoothness <= 0:
      raise ValueError(f"`smoothness` must be finite and > 0; got {self.smoothness}.")
    if isinstance(self.warmup_epochs, bool) or not isinstance(self.warmup_epochs, numbers.Integral):
      raise TypeError(f"`warmup_epochs` must be an int; got {self.warmup_epochs!r}.")
    if self.warmup_epochs < 2:
      raise ValueError(f"`warmup_epochs` must be >= 2 (a variance needs two predictions); got {self.warmup_epochs}.")

  def build(self, context):
    return _WeightedDrawer(ActiveBiasState(context.features.shape[0]), context.batch_size)


class ActiveBiasCallback(_callback.BatchStreamCallback):
  """Records p(true label | x) for every training example after each epoch; updates the weights.

  Also starts the batch stream at the optimizer's step (see `BatchStreamCallback`), so it is the
  only callback an ActiveBias pipeline needs.

  Differs from the paper in when predictions are recorded: once per epoch for all examples, in
  inference mode, rather than for the examples of each mini-batch during its training step. Every
  example then has the same history length and the weights change only between epochs, so all
  batches of an epoch are drawn with one set of weights, except those drawn ahead of the epoch's
  end by prefetching, which use the old weights.
  """

  def __init__(self, batcher: _pipeline.RepulsiveBatcher, from_logits: bool = True, batch_size: int = 1024,
               inputs: np.ndarray | tf.Tensor | None = None):
    """Args:
      batcher: the `repulsive_batch(..., ActiveBias())` batcher whose stream feeds `fit`.
      from_logits: whether the model outputs logits (else probabilities).
      batch_size: inference batch size for the per-epoch pass.
      inputs: the model inputs of the training examples, in dataset order, for the per-epoch
        pass. By default the first component of the dataset's (x, y[, ...]) elements; pass them
        when the pipeline transforms batches after sampling (feature extraction, augmentation),
        so that the stored elements are not what the model takes.

    Raises:
      TypeError: if `batcher` is not a batcher of an ActiveBias sampler.
    """
    super().__init__(batcher)
    if not isinstance(batcher.sampler, ActiveBias):
      raise TypeError(f"`batcher` must sample with ActiveBias(); it samples with {batcher.sampler!r}.")
    if batcher.start_step is not None:
      # The weights live in this process: the stream must run here, which the callback checks
      # only for a stream it starts itself.
      raise ValueError(
          "ActiveBiasCallback needs a batcher built with start_step=None: the sampling weights it "
          "updates live in this process, and it checks that the stream it starts runs here.")
    self._from_logits = from_logits
    self._batch_size = batch_size
    self._inputs = inputs

  @property
  def state(self) -> ActiveBiasState:
    """The checkpointable history and weights (available once the pipeline is built)."""
    drawer = self._batcher.drawer
    assert isinstance(drawer, _WeightedDrawer)  # the constructor checked the sampler
    return drawer.state

  def on_train_begin(self, logs=None):
    super().on_train_begin(logs)
    self._training_inputs()  # Fails before the first epoch rather than after it.

  def _training_inputs(self):
    batcher = self._batcher
    if self._inputs is None:
      if not isinstance(batcher.elements, tuple) or len(batcher.elements) < 2:
        raise ValueError("ActiveBiasCallback needs (x, y) elements with the model input first, or "
                         "the model inputs of the training examples as `inputs`.")
      return batcher.elements[0]
    num_inputs = int(tf.nest.flatten(self._inputs)[0].shape[0])
    if num_inputs != len(batcher.labels):
      raise ValueError(f"`inputs` holds {num_inputs} examples but the sampled dataset has "
                       f"{len(batcher.labels)}; pass the model inputs of every training example, "
                       "in dataset order.")
    return self._inputs

  def on_epoch_end(self, epoch, logs=None):
    inputs, labels = self._training_inputs(), self._batcher.labels
    outputs = self.model.predict(inputs, batch_size=self._batch_size, verbose=0)
    probabilities = tf.nn.softmax(outputs).numpy() if self._from_logits else np.asarray(outputs)
    true_class = probabilities[np.arange(len(labels)), labels].astype(np.float64)
    state = self.state
    state.count.assign_add(np.ones_like(true_class))
    state.total.assign_add(true_class)
    state.total_sq.assign_add(true_class**2)
    state.epochs.assign_add(1)
    if int(state.epochs.numpy()) >= self._batcher.sampler.warmup_epochs:
      state.weights.assign(prediction_variance_weights(
          state.count.numpy(), state.total.numpy(), state.total_sq.numpy(), self._batcher.sampler.smoothness))
    if logs is not None:
      weights = state.weights.numpy()
      logs["active_bias_max_probability"] = float(weights.max() / weights.sum())
