"""`OnlineImportance`: Katharopoulos and Fleuret's importance sampling with a presample and a switch, in Keras 3.

Each step receives a presample of B elements (the stream's batch) and trains on k of them. While
the variance reduction tau that importance sampling would bring stays below the break-even
tau_th = (B + 3k) / (3k), the step trains on the first k elements with weight 1, which costs what
a plain step costs, and tracks tau from the scores of its own forward pass. Above it, the step
scores all B in inference mode, draws k of them with replacement in proportion to their scores
g_i, and weighs each 1 / (B g_i), which keeps the gradient an unbiased estimate of the
presample's. The score is the norm of the loss's gradient with respect to the model's outputs,
||softmax(z) - y|| for cross-entropy: the paper's bound on the full gradient norm, up to a
factor common to all elements.

    tau = sqrt(n sum_i g_i^2), g the scores normalised to sum 1 over n elements,

is 1 for equal scores and grows with their spread; it is smoothed over steps. Everything runs in
the traced training step, one `tf.cond`; the draw is keyed by (seed, optimizer step).
"""

from __future__ import annotations

import types
from typing import Any, Callable

import keras
import tensorflow as tf

from tf_repulsive import _checks


def _variance_reduction(scores: tf.Tensor) -> tf.Tensor:
  """sqrt(n sum g^2) for the scores normalised to sum 1: 1 when they are equal (or all 0)."""
  scores = tf.cast(scores, tf.float32)
  count = tf.cast(tf.shape(scores)[0], tf.float32)
  total = tf.reduce_sum(scores)
  shares = tf.math.divide_no_nan(scores, total)
  return tf.where(total > 0, tf.sqrt(count * tf.reduce_sum(tf.square(shares))), 1.0)


class OnlineImportance(keras.Model):
  """Trains `model` on k elements of each batch of B, drawn by importance when that pays.

  Give `fit` batches of B elements (the presample): a stream of `repulsive_batch(B, Uniform())`,
  or any uniform batches of B. Each step trains on k = `batch_size` of them. While importance
  sampling would not save time, the step takes the first k at weight 1 and costs what a plain
  step costs. Once the variance reduction tau it would bring passes `tau_threshold`, the step
  first scores all B in inference mode (dropout and batch norm off), then trains on k drawn in
  proportion to the scores, each weighed 1 / (B g_i). The logs hold `tau` and `importance`, the
  share of steps that sampled by importance. TensorFlow backend, classification with
  cross-entropy unless `score_fn` says otherwise.

  Args:
    model: the Keras model to train (its weights are this model's).
    batch_size: k, the elements each step trains on; B, the stream's batch, must be at least k.
    from_logits: whether `model` outputs logits (else probabilities), for the default score.
    score_fn: None, or a function `(y_true, y_pred) -> [n]` scores >= 0 of n elements.
    tau_threshold: tau above which the steps sample by importance; None: (B + 3k) / (3k), where
      scoring B elements costs what the smaller variance saves.
    smoothing: the weight of the last tau in its moving average, in [0, 1).
    seed: the seed of the draws.

  Example:

  >>> import keras, numpy as np, tensorflow as tf, tf_repulsive
  >>> x = np.random.default_rng(0).normal(size=(300, 2)).astype("float32")
  >>> y = (x[:, 0] > 0).astype("int64")
  >>> batcher = tf_repulsive.repulsive_batch(30, tf_repulsive.Uniform(), seed=0)  # B = 3k
  >>> stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
  >>> trainer = tf_repulsive.OnlineImportance(model, batch_size=10, seed=0)
  >>> trainer.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  >>> history = trainer.fit(stream, epochs=2, steps_per_epoch=10, verbose=0,
  ...                       callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  >>> sorted(key for key in history.history if key != "loss")
  ['importance', 'tau']

  Raises:
    TypeError: for a `model` that is not a Keras model, a `score_fn` that is not a function, or
      another backend than TensorFlow.
    ValueError: for a `batch_size` below 1, a `tau_threshold` below 1, a `smoothing` outside
      [0, 1), or (when fit traces its step) batches of fewer than k elements.
  """

  def __init__(self, model: keras.Model, batch_size: int, *, from_logits: bool = True,
               score_fn: Callable[[Any, Any], Any] | None = None, tau_threshold: float | None = None,
               smoothing: float = 0.9, seed: int = 0, **kwargs):
    if keras.backend.backend() != "tensorflow":
      raise TypeError(f"OnlineImportance samples inside TensorFlow's training step; this is the "
                      f"{keras.backend.backend()!r} backend. Use the TensorFlow backend.")
    if not isinstance(model, keras.Model):
      raise TypeError(f"`model` must be the keras.Model to train; got {model!r}.")
    if score_fn is not None and not callable(score_fn):
      raise TypeError(f"`score_fn` must be a function (y_true, y_pred) -> [n] scores, or None; got {score_fn!r}.")
    if not isinstance(from_logits, bool):
      raise TypeError(f"`from_logits` must be True or False; got {from_logits!r}.")
    if tau_threshold is not None and _checks.real(tau_threshold, "tau_threshold", positive=True) < 1:
      raise ValueError(f"`tau_threshold` must be >= 1 (tau is 1 for equal scores) or None; got {tau_threshold}.")
    if not _checks.real(smoothing, "smoothing", positive=False) < 1:
      raise ValueError(f"`smoothing` must be in [0, 1), the weight of the last tau in its average; got {smoothing}.")
    super().__init__(name=kwargs.pop("name", f"online_importance_{model.name}"), **kwargs)
    self.trained_model = model
    self.batch_size = _checks.integer(batch_size, "batch_size", 1)
    self.from_logits = from_logits
    self.tau_threshold = tau_threshold
    self.smoothing = float(smoothing)
    self.seed = _checks.integer(seed, "seed")
    self._score_fn = score_fn
    # Saved with the model's weights, so that a resumed run switches as the uninterrupted one.
    self.tau = self.add_weight(shape=(), initializer="zeros", trainable=False, name="tau")
    self.importance_steps = self.add_weight(shape=(), initializer="zeros", trainable=False, name="importance_steps",
                                            dtype="int64")
    self.built = model.built
    # What `train_step` hands its `compute_loss` while Keras' step runs between them: the
    # selection of the step being traced (a namespace, so that Keras tracks none of it).
    self._traced = types.SimpleNamespace(selection=None)

  def call(self, inputs, training=None):
    return self.trained_model(inputs, training=training)

  def scores(self, y_true, y_pred) -> tf.Tensor:
    """`[n]` each element's score: ||softmax(z) - y|| (or `score_fn`'s), without gradient."""
    if self._score_fn is not None:
      scores = tf.convert_to_tensor(self._score_fn(y_true, y_pred))
    else:
      y_pred = tf.cast(y_pred, tf.float32)
      probabilities = tf.nn.softmax(y_pred) if self.from_logits else y_pred
      y_true = tf.convert_to_tensor(y_true)
      if y_true.shape.rank == probabilities.shape.rank and y_true.shape[-1] == probabilities.shape[-1]:
        targets = tf.cast(y_true, tf.float32)
      else:
        targets = tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), tf.shape(probabilities)[-1])
      scores = tf.norm(probabilities - targets, axis=-1)
    if scores.shape.rank != 1:
      raise ValueError(f"the scores must be [n], one per element; got shape {scores.shape}.")
    return tf.stop_gradient(tf.cast(scores, tf.float32))

  def threshold(self, presample: int) -> float:
    """tau_th for a presample of B elements: `tau_threshold`, or (B + 3k) / (3k)."""
    if self.tau_threshold is not None:
      return float(self.tau_threshold)
    return (presample + 3 * self.batch_size) / (3 * self.batch_size)

  def select(self, x: Any, y: Any, sample_weight: Any = None, *,
             step: Any) -> tuple[Any, Any, tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
    """The k elements of a presample `(x, y, sample_weight)` that step `step` trains on, and their weights.

    What `fit`'s step does first. A custom loop calls it in its traced step with the optimizer's
    step, trains on the result with the weights as sample weights, then calls `observe`.

    Returns:
      `(x_k, y_k, weights, selection)`: the k elements, their sample weights (the presample's
      times 1 / (B g_i), or 1), and what `observe` needs of the selection.
    """
    if tf.distribute.get_strategy().num_replicas_in_sync > 1:
      raise ValueError("OnlineImportance selects from the whole presample and runs on one replica.")
    presample = tf.nest.flatten(x)[0].shape[0]
    if presample is None:
      raise ValueError("OnlineImportance needs batches of a static size B (the presample): give the stream's "
                       "batches a static shape (repulsive_batch does; Dataset.batch(B, drop_remainder=True)).")
    if presample < self.batch_size:
      raise ValueError(f"the batches hold {presample} elements and `batch_size` is {self.batch_size}: the presample "
                       "B must hold at least k elements. Give fit batches of B >= k.")
    key = tf.random.experimental.stateless_fold_in(tf.constant([self.seed, 0x1F5], tf.int64),
                                                   tf.cast(step, tf.int64))
    use = self.tau > self.threshold(presample)

    def importance():
      scores = self.scores(y, self.trained_model(x, training=False))
      shares = tf.math.divide_no_nan(scores, tf.reduce_sum(scores))
      shares = tf.where(tf.reduce_sum(scores) > 0, shares, 1.0 / presample)
      chosen = tf.random.stateless_categorical(tf.math.log(shares)[None], self.batch_size, key,
                                               dtype=tf.int32)[0]
      return chosen, 1.0 / (presample * tf.gather(shares, chosen)), _variance_reduction(scores)

    def first():
      return tf.range(self.batch_size), tf.ones([self.batch_size]), tf.constant(0.0)

    chosen, weights, presample_tau = tf.cond(use, importance, first)
    x_k, y_k = tf.nest.map_structure(lambda values: tf.gather(values, chosen), (x, y))
    if sample_weight is not None:
      weights = weights * tf.cast(tf.gather(sample_weight, chosen), tf.float32)
    return x_k, y_k, weights, (use, presample_tau)

  def observe(self, y_true: Any, y_pred: Any, selection: tuple[tf.Tensor, tf.Tensor]) -> tf.Operation:
    """Updates tau after a step: from the presample's scores, or (a step at weight 1) from the step's own.

    Args:
      y_true: the labels of the k elements trained on.
      y_pred: the model's outputs for them in the training step.
      selection: what `select` returned last.
    """
    importance, presample_tau = selection
    step_tau = tf.cond(importance, lambda: presample_tau, lambda: _variance_reduction(self.scores(y_true, y_pred)))
    return tf.group(self.tau.assign(self.smoothing * self.tau + (1 - self.smoothing) * step_tau),
                    self.importance_steps.assign_add(tf.cast(importance, tf.int64)))

  def train_step(self, data):
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    x_k, y_k, weights, self._traced.selection = self.select(x, y, sample_weight, step=self.optimizer.iterations)
    logs = super().train_step((x_k, y_k, weights))
    steps = tf.cast(self.optimizer.iterations, tf.float32)
    return {**logs, "tau": self.tau.value,
            "importance": tf.cast(self.importance_steps.value, tf.float32) / tf.maximum(steps, 1.0)}

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    loss = super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)
    if not training:
      return loss
    with tf.control_dependencies([self.observe(y, y_pred, self._traced.selection)]):
      return tf.identity(loss)
