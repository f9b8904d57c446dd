"""`RecordingModel`: a Keras model that trains the user's model and records what the batcher draws on.

A wrapper, not a patch: the user's model is a layer of it, untouched, and trains in place. Two
kinds of batcher draw on the training steps:
- a sampler that learns from losses (`EpochPruning`, `RandomPruning`): `compute_loss` runs
  Keras' own, then, in training only, records the per-element losses of the batch of
  `optimizer.iterations` (the step that trains on it, as the callbacks align them) with
  `batcher.record_losses`;
- `ModelSpace(..., from_training_step=True)`: `call` runs the model through a functional view
  of the same layers that also returns its last layer's input, and, in training only, writes
  the batch's features into `batcher.training_features`.
The ops run inside the traced training step: no Python per step.

The batcher's state (`batcher.sampler_state` or `batcher.training_features`) is part of this
model's own variables when Keras saves it (`save_weights`, `BackupAndRestore`,
`ModelCheckpoint`), and an attribute that `tf.train.Checkpoint(model=...)` tracks, so that a
resumed run draws the batches the uninterrupted one drew.
"""

from __future__ import annotations

from typing import Any, Callable

import keras
import tensorflow as tf

from tf_repulsive import _model_features
from tf_repulsive import _pipeline
from tf_repulsive import _pruning


class RecordingModel(keras.Model):
  """Trains `model` and records, in each training step, what the batcher draws on.

  Compile and fit this model instead of `model`: its weights are `model`'s, so `model` is the
  trained one afterwards (save and evaluate it as usual). Each training step records, for the
  elements of its batch:

  * their unweighted losses, for `EpochPruning` and `RandomPruning`;
  * their features, computed from the input and output of `model`'s last layer, for a
    `ModelSpace(..., from_training_step=True)` batcher (`model` must then be that
    ModelSpace's Sequential or functional model).

  Evaluation and prediction record nothing. TensorFlow backend, one replica.

  Args:
    model: the Keras model to train.
    batcher: the `repulsive_batch` batcher whose stream `fit` trains on, applied to the data.
    per_element_loss: a function `(y_true, y_pred) -> [k]` losses. None: the loss given to
      `compile`, unreduced (a single loss: a `keras.losses.Loss`, a name or a function).

  Example:

  >>> import keras, numpy as np, tensorflow as tf, tf_repulsive
  >>> x = np.random.default_rng(0).normal(size=(100, 3)).astype("float32")
  >>> y = (x[:, 0] > 0).astype("int64")
  >>> batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.EpochPruning(total_steps=30), seed=0)
  >>> stream = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  >>> trainer = tf_repulsive.RecordingModel(model, batcher)
  >>> trainer.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  >>> _ = trainer.fit(stream, epochs=3, steps_per_epoch=10, verbose=0,
  ...                 callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  >>> int(batcher.sampler_state.recorded_through.numpy())
  29

  Raises:
    TypeError: for a `model` that is not a Keras model, a `batcher` that `repulsive_batch` did
      not return, or another backend than TensorFlow.
    ValueError: for a batcher not applied yet, or one that draws on nothing a training step
      records.
  """

  def __init__(self, model: keras.Model, batcher: _pipeline.RepulsiveBatcher,
               per_element_loss: Callable[[Any, Any], Any] | None = None, **kwargs):
    if keras.backend.backend() != "tensorflow":
      raise TypeError(f"RecordingModel records inside TensorFlow's training step; this is the "
                      f"{keras.backend.backend()!r} backend. Use the TensorFlow backend.")
    if not isinstance(model, keras.Model):
      raise TypeError(f"`model` must be the keras.Model to train; got {model!r}.")
    if not isinstance(batcher, _pipeline.RepulsiveBatcher):
      raise TypeError(f"`batcher` must be what tf_repulsive.repulsive_batch(...) returned; got {batcher!r}.")
    if not records_training(batcher):
      raise ValueError(
          f"this batcher ({type(batcher.sampler).__name__}) draws on nothing a training step records: "
          "RecordingModel is for EpochPruning and RandomPruning batchers and for "
          "ModelSpace(..., from_training_step=True). Train the model itself.")
    space = _pipeline.hooks(batcher).space
    if space is not None and space.model is not model:
      raise ValueError("the batcher's ModelSpace computes its features from another model: give RecordingModel "
                       "the ModelSpace's model.")
    if per_element_loss is not None and not callable(per_element_loss):
      raise TypeError(f"`per_element_loss` must be a function (y_true, y_pred) -> [k] losses, or None; "
                      f"got {per_element_loss!r}.")
    super().__init__(name=kwargs.pop("name", f"recording_{model.name}"), **kwargs)
    self.trained_model = model
    self.batcher = batcher
    self._per_element_loss = per_element_loss
    # Tracked by tf.train.Checkpoint as an attribute; Keras' saving takes it through
    # save_own_variables.
    if batcher.drawer.learns_from_losses:
      self.sampler_state = batcher.sampler_state
    else:
      self.training_features = batcher.training_features
      inputs = _model_features._model_inputs(model, "ModelSpace(..., from_training_step=True)")
      # The same layers (the same weights), and the last layer's input beside the output. Kept
      # out of Keras' tracking in a tuple: its weights are `model`'s, listed once.
      self._with_last_input = (keras.Model(inputs, [model.layers[-1].input, model.layers[-1].output]),)
    # No weights of its own: built when the model is (so that weights load before a first call).
    self.built = model.built

  def call(self, inputs, training=None):
    if self.batcher.drawer.learns_from_losses:
      return self.trained_model(inputs, training=training)
    last_input, outputs = self._with_last_input[0](inputs, training=training)
    # Training calls on tensors only: not inference, nor Keras' symbolic build.
    if training and isinstance(outputs, tf.Tensor) and not isinstance(outputs, keras.KerasTensor):
      _check_one_replica()
      self.training_features.record(last_input, outputs)
    return outputs

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    loss = super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)
    if not training or not self.batcher.drawer.learns_from_losses:
      return loss
    _check_one_replica()
    losses = tf.stop_gradient(self._element_losses(y, y_pred))
    recorded = self.batcher.record_losses(self.optimizer.iterations, losses)
    with tf.control_dependencies([recorded]):
      return tf.identity(loss)

  def _element_losses(self, y, y_pred) -> tf.Tensor:
    """`[k]` per-element losses of the batch, unweighted."""
    if self._per_element_loss is not None:
      losses = self._per_element_loss(y, y_pred)
    else:
      loss = keras.losses.get(self.loss) if isinstance(self.loss, str) else self.loss
      if loss is None or isinstance(loss, (dict, list, tuple)):
        raise TypeError(
            "RecordingModel reads each element's loss from the loss given to compile, which must be one loss "
            f"(a keras.losses.Loss, a name or a function); got {self.loss!r}. Pass per_element_loss=(y_true, "
            "y_pred) -> [k] losses.")
      if isinstance(loss, keras.losses.Loss):
        y_true = tf.convert_to_tensor(y)
        losses = loss.call(y_true, tf.convert_to_tensor(y_pred))
      else:
        losses = loss(y, y_pred)
    losses = tf.convert_to_tensor(losses)
    if losses.shape.rank == 0:
      raise ValueError(
          "RecordingModel needs one loss per element, and the loss gave one number for the batch (a reduced loss): "
          "pass per_element_loss=(y_true, y_pred) -> [k] losses, unreduced.")
    if losses.shape.rank is not None and losses.shape.rank > 1:
      losses = tf.reduce_mean(tf.reshape(losses, [tf.shape(losses)[0], -1]), axis=1)
    return losses

  def _batcher_state(self) -> tuple[tf.Variable, ...]:
    if self.batcher.drawer.learns_from_losses:
      return tuple(self.sampler_state.variables)
    return tuple(self.training_features.variables)

  def save_own_variables(self, store):
    super().save_own_variables(store)
    own = len(store.keys())
    for i, variable in enumerate(self._batcher_state()):
      store[f"{own + i}"] = variable.numpy()

  def load_own_variables(self, store):
    state = self._batcher_state()
    own = {key: store[key] for key in sorted(store.keys(), key=int)[:len(store.keys()) - len(state)]}
    super().load_own_variables(own)
    for i, variable in enumerate(state):
      variable.assign(store[f"{len(own) + i}"])


def _check_one_replica() -> None:
  replicas = tf.distribute.get_strategy().num_replicas_in_sync
  if replicas > 1:
    raise ValueError(f"RecordingModel records what whole batches computed and runs on one replica; the strategy "
                     f"has {replicas}.")


def records_training(batcher: _pipeline.RepulsiveBatcher) -> bool:
  """Whether `batcher` draws on what the training steps record (losses, or features from the training step)."""
  space = _pipeline.hooks(batcher).space
  return batcher.drawer.learns_from_losses or (space is not None and space.from_training_step)


def check_fit(batcher: _pipeline.RepulsiveBatcher, model: keras.Model) -> None:
  """Refuses a fit of `model` whose training steps would not record what `batcher` draws on."""
  if batcher.drawer.learns_from_losses:
    name, what = type(batcher.sampler).__name__, "draws each pass on the losses the training steps record"
  else:
    name, what = "ModelSpace(..., from_training_step=True)", "draws on the features the training steps record"
  if not (isinstance(model, RecordingModel) and model.batcher is batcher):
    raise ValueError(
        f"{name} {what}: fit tf_repulsive.RecordingModel(model, batcher), compiled, instead of the model itself.")
  if int(getattr(model, "steps_per_execution", 1) or 1) > 1:
    raise ValueError(f"{name} needs steps_per_execution=1: it reads each step's record before the next step's "
                     "draw.")


def epoch_logs(batcher: _pipeline.RepulsiveBatcher, name: str) -> dict[str, float]:
  """The logs of the pass in force: `<name>_pass`, its index, and `<name>_pass_share`, the share of the data."""
  state = batcher.sampler_state
  if not isinstance(state, _pruning.PassState):
    return {}
  return {f"{name}_pass": float(state.pass_index.numpy()),
          f"{name}_pass_share": float(state.pass_size.numpy()) / batcher.num_points}
