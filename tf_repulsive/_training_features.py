"""Features from the training step: the table of a `ModelSpace(..., from_training_step=True)` batcher.

The training step's forward pass already computes, for the k elements it trains on, what the
built-in feature sources need: the input h of the model's last layer and that layer's output.
A tap on the last layer keeps them (training calls only). After the step, `record` computes the
batch's features from them (`FeatureSource.last_layer_fn`) and writes them into an `[N, d]`
table at the batch's indices; the elements not trained on keep their last features. A refresh
builds the sampler on the table instead of a pass over the data.

The table and the step it holds are state. With the `ModelSpace`'s `directory`, every step's
record is appended to a log beside the refresh's features: a run resumed at any step, in a new
process, rebuilds the table from the last saved refresh and the log, and draws what the
uninterrupted run drew. Without a directory, `TrainingFeatures` is a `tf.Module` to keep in
your own `tf.train.Checkpoint`.
"""

from __future__ import annotations

import os
import pathlib

import keras
import numpy as np
import tensorflow as tf

from tf_repulsive import _model_space

# The step a table holds before any training step is recorded.
_NONE_RECORDED = -1
# Delivered batches whose indices are kept for their record: more than a prefetch runs ahead.
_DELIVERED_STEPS = 1024


def _log_path(directory: str | os.PathLike, refresh: int) -> pathlib.Path:
  """The log of the steps of `refresh`: one fixed-size record per step, appended as it trains."""
  return pathlib.Path(directory) / f"training-log-{refresh:09d}.bin"


class _LastLayerTap:
  """What the model trained on: its last layer's input and output at each training call, and the batches delivered.

  This process's own state, not part of the table's checkpoints.
  """

  def __init__(self, model: keras.Model, batch_size: int):
    layer = model.layers[-1]
    if not isinstance(layer, keras.layers.Dense):
      raise TypeError(
          f"from_training_step=True reads the model's last layer, which must be a Dense layer; "
          f"{model.name!r} ends with {layer!r}. Use from_training_step=False.")
    if getattr(layer.call, "_tf_repulsive_tap", False):
      raise ValueError(
          f"the last layer of {model.name!r} already feeds another batcher's features from the training "
          "step: one ModelSpace(from_training_step=True) batcher per model.")
    inputs, outputs = int(layer.kernel.shape[0]), int(layer.kernel.shape[1])
    with tf.device("CPU:0"):
      self.inputs = tf.Variable(tf.zeros([0, inputs]), shape=tf.TensorShape([None, inputs]), trainable=False)
      self.outputs = tf.Variable(tf.zeros([0, outputs]), shape=tf.TensorShape([None, outputs]), trainable=False)
      # Training calls seen, and those recorded: `record` checks that exactly one came per step.
      self.calls = tf.Variable(0, dtype=tf.int64, trainable=False)
      self.recorded_calls = tf.Variable(0, dtype=tf.int64, trainable=False)
      # The indices of the batches the stream delivered, by step modulo the ring's length.
      self.delivered = tf.Variable(tf.zeros([_DELIVERED_STEPS, batch_size], tf.int32), trainable=False)
      self.delivered_steps = tf.Variable(tf.fill([_DELIVERED_STEPS], tf.constant(-1, tf.int64)), trainable=False)
    original = layer.call

    def call(inputs, *args, training=None, **kwargs):
      outputs = original(inputs, *args, training=training, **kwargs)
      # Training calls on tensors only: not inference, nor Keras' symbolic build.
      if training and isinstance(inputs, tf.Tensor) and not isinstance(inputs, keras.KerasTensor):
        self.inputs.assign(tf.cast(_flat(inputs), tf.float32))
        self.outputs.assign(tf.cast(_flat(outputs), tf.float32))
        self.calls.assign_add(1)
      return outputs

    call._tf_repulsive_tap = True  # type: ignore[attr-defined]
    layer.call = call


def _parse_log(raw: bytes, batch_size: int, dim: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
  """The (step, indices, features) records of a log; a torn last record (a crash while writing) is left out."""
  size = 8 + 4 * batch_size * (1 + dim)
  return [(int(np.frombuffer(raw, np.int64, 1, start)[0]), np.frombuffer(raw, np.int32, batch_size, start + 8),
           np.frombuffer(raw, np.float32, batch_size * dim, start + 8 + 4 * batch_size).reshape(batch_size, dim))
          for start in range(0, len(raw) - size + 1, size)]


def _flat(values: tf.Tensor) -> tf.Tensor:
  return tf.reshape(values, [tf.shape(values)[0], -1])


class TrainingFeatures(tf.Module):
  """The table of features the training step updates, and the step it holds.

  Args:
    space: the batcher's `ModelSpace` (`from_training_step=True`).
    features: `[N, d]` the build's features of all elements, the table's first state.
    labels: `[N]` the elements' labels (None for a source without labels).
    batch_size: k.
  """

  def __init__(self, space: _model_space.ModelSpace, features: np.ndarray, labels: np.ndarray | None,
               batch_size: int):
    super().__init__(name="training_features")
    last_layer_fn = space.source.last_layer_fn(space.model)
    if last_layer_fn is None:
      raise TypeError(
          f"{type(space.source).__name__} cannot compute its features from the model's last layer "
          "(its last_layer_fn() is None), which from_training_step=True needs: use GradientFeatures(), "
          "LossFeatures() or EmbeddingFeatures() without `layer`.")
    self._space = space
    self._batch_size = batch_size
    self._tap = _LastLayerTap(space.model, batch_size)
    with tf.device("CPU:0"):
      self.table = tf.Variable(features, trainable=False)
      # The last step whose features the table holds (-1: the build's only).
      self.recorded_through = tf.Variable(_NONE_RECORDED, dtype=tf.int64, trainable=False)
    labels = None if labels is None else tf.constant(labels)

    @tf.function(autograph=False, input_signature=(tf.TensorSpec([], tf.int64),))
    def record(step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
      slot = step % _DELIVERED_STEPS
      indices = self._tap.delivered[slot]
      inputs, outputs = self._tap.inputs.read_value(), self._tap.outputs.read_value()
      checks = [
          tf.debugging.assert_equal(self._tap.delivered_steps[slot], step, message=(
              f"the batch of the step recorded is not among the last {_DELIVERED_STEPS} the stream delivered: "
              "from_training_step=True needs each step's features recorded after it trains, with the "
              "batcher's stream feeding the model.")),
          tf.debugging.assert_equal(
              self._tap.calls - self._tap.recorded_calls, tf.constant(1, tf.int64), message=(
                  "from_training_step=True needs exactly one training call of the model per step (its "
                  "last layer's input and output are the batch's features): steps_per_execution > 1, "
                  "gradient accumulation, or a train step that calls the model twice cannot feed it.")),
          tf.debugging.assert_equal(
              tf.shape(inputs)[0], tf.shape(indices)[0], message=(
                  "the model's last training call saw another number of elements than the step's batch: "
                  "from_training_step=True needs the batcher's batches as the model's training batches."))]
      with tf.control_dependencies(checks):
        batch_labels = None if labels is None else tf.gather(labels, indices)
        features = tf.cast(last_layer_fn(inputs, outputs, batch_labels), tf.float32)
        updates = [self.table.scatter_update(tf.IndexedSlices(features, indices)),
                   self._tap.recorded_calls.assign(self._tap.calls), self.recorded_through.assign(step)]
      with tf.control_dependencies(updates):
        return tf.identity(indices), tf.identity(features)

    self._record = record

  def record(self, step: int) -> None:
    """Writes the features of the batch of `step`, the training call just made, into the table.

    Raises:
      ValueError: if the table does not hold the step before (a step was not recorded).
    """
    through = int(self.recorded_through.numpy())
    if through == step:
      return
    if through != step - 1:
      raise ValueError(
          f"the features from the training step hold step {through}, and step {step} came next: each step's "
          "features must be recorded after it trains (in fit, AnnealingCallback(batcher) does it; in a custom "
          "loop, batcher.refresh_features(step) before each step), and a resumed run must restore them "
          "(with the ModelSpace's directory set, or batcher.training_features in your checkpoint).")
    indices, features = self._record(tf.constant(step, tf.int64))
    space = self._space
    if space.directory is not None:
      # (The directory exists: the refresh in force at `step` saved its features there.)
      refresh = step // space.refresh_every
      if space.keep_last is not None and step % space.refresh_every == 0:
        # The logs of the refreshes whose saved features `keep_last` deleted are of no use.
        for old in pathlib.Path(space.directory).glob("training-log-*.bin"):
          if int(old.stem.rsplit("-", 1)[1]) <= refresh - space.keep_last:
            old.unlink(missing_ok=True)
      with _log_path(space.directory, refresh).open("ab") as log:
        log.write(np.int64(step).tobytes() + indices.numpy().astype(np.int32).tobytes()
                  + features.numpy().tobytes())

  def remember(self, steps: tf.Tensor, indices: tf.Tensor) -> tf.Operation:
    """The op of the stream's draw that keeps the indices of the batches of `steps` for their records."""
    slots = (steps % _DELIVERED_STEPS)[:, None]
    return tf.group(self._tap.delivered.scatter_nd_update(slots, indices),
                    self._tap.delivered_steps.scatter_nd_update(slots, steps))

  def snapshot(self) -> np.ndarray:
    """The table as it is now, a copy."""
    return self.table.numpy()

  def reset(self, features: np.ndarray, step: int) -> None:
    """Makes `features` the table that holds every step before `step` (a full refresh's, or a replayed one)."""
    self.table.assign(features)
    self.recorded_through.assign(step - 1)
    self._tap.recorded_calls.assign(self._tap.calls)

  def _replay(self, step: int) -> bool:
    """Rebuilds the table of the steps before `step` from the directory; whether it could.

    From the features of the last refresh saved at or before `step`, then the logged records of
    the steps since, in order (of a step logged twice, by a run and its resumption, the last).
    """
    space = self._space
    if space.directory is None:
      return False
    first = step // space.refresh_every
    found = next(((refresh, saved) for refresh in range(first, -1, -1)
                  if (saved := _model_space.load(space, refresh)) is not None), None)
    if found is None:
      return False
    refresh, (table, _) = found
    records = {}
    for logged in range(refresh, first + 1):
      path = _log_path(space.directory, logged)
      if path.exists():
        for logged_step, indices, features in _parse_log(path.read_bytes(), self._batch_size, table.shape[1]):
          if logged_step < step:
            records[logged_step] = (indices, features)
    if set(records) != set(range(refresh * space.refresh_every, step)):
      return False
    table = table.copy()
    for logged_step in sorted(records):
      indices, features = records[logged_step]
      table[indices] = features
    self.reset(table, step)
    return True

  def catch_up(self, step: int, full_refresh: bool) -> None:
    """Makes the table hold every step before `step`: records the last one, or restores it when resumed.

    Raises:
      ValueError: when neither works (a resumed run without the table of its step), unless
        `full_refresh` (a full refresh at `step` replaces the table).
    """
    through = int(self.recorded_through.numpy())
    if through == step - 1:
      return
    if through == step - 2:
      self.record(step - 1)
    elif not full_refresh and not self._replay(step):
      raise ValueError(
          f"step {step} draws on features from the training step, and the table of them holds step {through}: "
          f"the features of steps {through + 1} ... {step - 1} are not at hand. Give the ModelSpace a "
          "directory (a resumed run rebuilds the table from it), or keep batcher.training_features in your "
          "checkpoint; and call batcher.refresh_features(step) before every step of a custom loop.")
