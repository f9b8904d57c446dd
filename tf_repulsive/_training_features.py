"""Features from the training step: the table of a `ModelSpace(..., from_training_step=True)` batcher.

The training step's forward pass already computes, for the k elements it trains on, what the
built-in feature sources need: the input h of the model's last layer and that layer's output.
`RecordingModel`, the model that `fit` trains in place of the user's, computes the batch's
features from them (`FeatureSource.last_layer_fn`) inside the training call itself, and
`TrainingFeatures.record` writes them into an `[N, d]` table at the batch's indices;
the elements not trained on keep their last features. No Python runs per step. A refresh builds
the sampler on the table instead of a pass over the data.

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


class _StepRecords:
  """This process's record of the training steps: not part of the table's checkpoints.

  The indices of the batches the stream delivered, the last record (for the log), and the
  faults found in the training calls.
  """

  def __init__(self, batch_size: int, dim: int):
    with tf.device("CPU:0"):
      # The indices of the batches the stream delivered, by step modulo the ring's length.
      self.delivered = tf.Variable(tf.zeros([_DELIVERED_STEPS, batch_size], tf.int32), trainable=False)
      self.delivered_steps = tf.Variable(tf.fill([_DELIVERED_STEPS], tf.constant(-1, tf.int64)), trainable=False)
      # The last step recorded, its indices and features: what the log appends.
      self.last_step = tf.Variable(_NONE_RECORDED, dtype=tf.int64, trainable=False)
      self.last_indices = tf.Variable(tf.zeros([batch_size], tf.int32), shape=tf.TensorShape([None]),
                                      trainable=False)
      self.last_features = tf.Variable(tf.zeros([batch_size, dim]), shape=tf.TensorShape([None, dim]),
                                       trainable=False)
      # Training calls whose batch the stream had not delivered for their step, and calls on
      # another number of elements than k. Checked outside the call: XLA drops assertions.
      self.faults = tf.Variable(tf.zeros([2], tf.int64), trainable=False)


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
    layer = space.model.layers[-1] if space.model.layers else None
    if not isinstance(layer, keras.layers.Dense):
      raise TypeError(
          f"from_training_step=True reads the model's last layer, which must be a Dense layer; "
          f"{space.model.name!r} ends with {layer!r}. Use from_training_step=False.")
    self._space = space
    self._batch_size = batch_size
    self._last_layer_fn = last_layer_fn
    self._labels = None if labels is None else tf.constant(labels)
    with tf.device("CPU:0"):
      self.table = tf.Variable(features, trainable=False)
      # The last step whose features the table holds (-1: the build's only).
      self.recorded_through = tf.Variable(_NONE_RECORDED, dtype=tf.int64, trainable=False)
    # The last step whose record the directory's log holds (this process).
    self._logged_through = _NONE_RECORDED
    self._steps = _StepRecords(batch_size, features.shape[1])

  def record(self, inputs: tf.Tensor, outputs: tf.Tensor) -> None:
    """The ops of a training call: the batch's features into the table, as the step after the one it holds.

    `RecordingModel` runs them in each training call, on the input and the output of the
    model's last layer. A call whose step's batch the stream did not deliver, or that saw
    another number of elements than k, writes nothing and counts a fault (`check`).
    """
    tap, batch_size = self._steps, self._batch_size
    inputs = tf.stop_gradient(tf.cast(_flat(inputs), tf.float32))
    outputs = tf.stop_gradient(tf.cast(_flat(outputs), tf.float32))
    step = self.recorded_through.read_value() + 1
    slot = step % _DELIVERED_STEPS
    rows = tf.shape(inputs)[0]
    # After the batch: in `fit` the iterator's `get_next` and this read are ops of one function,
    # ordered by nothing else, and the stream notes the batch's indices as it delivers it.
    with tf.control_dependencies([inputs]):
      delivered_step, delivered_indices = tf.gather(tap.delivered_steps, slot), tf.gather(tap.delivered, slot)
    sized = tf.equal(rows, batch_size)
    delivered = tf.equal(delivered_step, step)
    # One index per row, so that the shapes agree even when the sizes do not (nothing is written then).
    indices = tf.gather(delivered_indices, tf.minimum(tf.range(rows), batch_size - 1))

    def write():
      labels = None if self._labels is None else tf.gather(self._labels, indices)
      features = tf.cast(self._last_layer_fn(inputs, outputs, labels), tf.float32)
      return tf.group(self.table.scatter_update(tf.IndexedSlices(features, indices)),
                      tap.last_indices.assign(indices), tap.last_features.assign(features),
                      tap.last_step.assign(step))

    tf.cond(tf.logical_and(delivered, sized), write, tf.no_op)
    tap.faults.assign_add(tf.cast(tf.stack([tf.logical_not(delivered), tf.logical_not(sized)]), tf.int64))
    self.recorded_through.assign(step)

  def check(self) -> None:
    """Raises if a training call could not be recorded (its step's batch undelivered, or another size than k)."""
    undelivered, missized = (int(count) for count in self._steps.faults.numpy())
    if undelivered:
      raise ValueError(
          f"{undelivered} training call(s) of the model found no batch of the stream for their step (it keeps "
          f"the last {_DELIVERED_STEPS}): from_training_step=True needs the batcher's stream feeding the model, "
          "and exactly one training call of the model per step.")
    if missized:
      raise ValueError(
          f"{missized} training call(s) of the model saw another number of elements than the batch size "
          f"{self._batch_size}: from_training_step=True needs the batcher's batches as the model's training batches.")

  def log(self, step: int) -> None:
    """Appends the record of `step`, the training step just made, to the directory's log (none: nothing to do)."""
    space = self._space
    if space.directory is None or step <= self._logged_through:
      return
    self.check()
    recorded = int(self._steps.last_step.numpy())
    if recorded < step:
      # The table came restored from a checkpoint: this process has no record of the step to log.
      return
    if recorded > step:
      raise ValueError(
          f"step {step} trained and the model's training calls recorded step {recorded}: from_training_step=True "
          "needs exactly one training call of the model per step (a train step that calls it twice, or "
          "gradient accumulation, cannot feed it).")
    # (The directory exists: the refresh in force at `step` saved its features there.)
    refresh = step // space.refresh_every
    if space.keep_last is not None and step % space.refresh_every == 0:
      # The logs of the refreshes whose saved features `keep_last` deleted are of no use.
      for old in pathlib.Path(space.directory).glob("training-log-*.bin"):
        if int(old.stem.rsplit("-", 1)[1]) <= refresh - space.keep_last:
          old.unlink(missing_ok=True)
    with _log_path(space.directory, refresh).open("ab") as log:
      log.write(np.int64(step).tobytes() + self._steps.last_indices.numpy().astype(np.int32).tobytes()
                + self._steps.last_features.numpy().tobytes())
    self._logged_through = step

  def remember(self, steps: tf.Tensor, indices: tf.Tensor) -> tf.Operation:
    """The op of the stream's draw that keeps the indices of the batches of `steps` for their records."""
    slots = (steps % _DELIVERED_STEPS)[:, None]
    return tf.group(self._steps.delivered.scatter_nd_update(slots, indices),
                    self._steps.delivered_steps.scatter_nd_update(slots, steps))

  def snapshot(self) -> np.ndarray:
    """The table as it is now: a read-only view that later steps do not change (they copy the table first)."""
    return np.asarray(self.table.read_value())

  def reset(self, features: np.ndarray, step: int) -> None:
    """Makes `features` the table that holds every step before `step` (a full refresh's, or a replayed one)."""
    self.table.assign(features)
    self.recorded_through.assign(step - 1)
    self._logged_through = step - 1

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
    """Makes sure the table holds every step before `step`, and logs the last one; restores it when resumed.

    Raises:
      ValueError: when a training call could not be recorded, or when the table holds another
        step and cannot be restored (a resumed run without the table of its step, or more than
        one training call per step), unless `full_refresh` (a full refresh at `step` replaces the
        table).
    """
    self.check()
    through = int(self.recorded_through.numpy())
    if through == step - 1:
      self.log(step - 1)
      return
    if full_refresh or self._replay(step):
      return
    if through >= step:
      raise ValueError(
          f"step {step} draws on features from the training step, and the table of them holds step {through}, "
          "a later one: from_training_step=True needs exactly one training call of the model per step (a "
          "train step that calls it twice, or gradient accumulation, cannot feed it), and a run that goes "
          "back to an earlier step must restore the table too (batcher.training_features in your "
          "checkpoint, or the ModelSpace's directory).")
    raise ValueError(
        f"step {step} draws on features from the training step, and the table of them holds step {through}: "
        f"the features of steps {through + 1} ... {step - 1} are not at hand. Give the ModelSpace a "
        "directory (a resumed run rebuilds the table from it), or keep batcher.training_features in your "
        "checkpoint; and call batcher.refresh_features(step) before every step of a custom loop.")
