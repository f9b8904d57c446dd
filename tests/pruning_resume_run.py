"""One process of the pruning resume test: fit a RecordingModel with BackupAndRestore, crash or resume.

`python pruning_resume_run.py crash|resume WORKDIR`. `crash` trains without stopping, and copies
what a crash at step CRASH_AT would leave (the backup) to WORKDIR/crashed; `resume` continues
from that copy in a new process. Writes WORKDIR/<phase>.json: {"steps": [[step, [indices,
weights, pass, the sum of the model's weights after it]], ...]}. The crash run trains an epoch
more: as far as the resumed run, which repeats part of an epoch.
"""

import json
import os
import shutil
import sys

import keras
import numpy as np
import tensorflow as tf

import tf_repulsive

NUM_POINTS, BATCH = 120, 8  # 15 steps in a full pass
EPOCHS, STEPS_PER_EPOCH = 5, 10
CRASH_AT, SAVE_FREQ = 17, 5


def data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=[NUM_POINTS, 4]).astype(np.float32)
  return x, (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)


class Record(keras.callbacks.Callback):
  """Each step's batch, its weights as the pass holds them, and the pass."""

  def __init__(self, batcher):
    super().__init__()
    self.batcher, self.steps = batcher, []

  def on_train_batch_end(self, batch, logs=None):
    step = int(self.model.optimizer.iterations.numpy()) - 1
    state = self.batcher.sampler_state
    indices = self.batcher.batch_indices(step)
    self.steps.append([step, [indices.tolist(), np.round(state.weights.numpy()[indices], 6).tolist(),
                              int(state.pass_index.numpy()),
                              float(sum(np.sum(w, dtype=np.float64) for w in self.model.get_weights()))]])


class Crash(keras.callbacks.Callback):
  def __init__(self, backup, crashed):
    super().__init__()
    self.backup, self.crashed = backup, crashed

  def on_train_batch_begin(self, batch, logs=None):
    if int(self.model.optimizer.iterations.numpy()) == CRASH_AT:
      shutil.copytree(self.backup, self.crashed)


def train(phase, workdir):
  keras.utils.set_random_seed(0)
  batcher = tf_repulsive.repulsive_batch(
      BATCH, tf_repulsive.EpochPruning(total_steps=EPOCHS * STEPS_PER_EPOCH, prune_ratio=0.7), seed=1,
      options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices(data()).apply(batcher)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
  trainer = tf_repulsive.RecordingModel(model, batcher)
  trainer.compile(keras.optimizers.SGD(0.2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  backup = os.path.join(workdir, "backup" if phase == "crash" else "crashed")
  record = Record(batcher)
  callbacks = [tf_repulsive.BatchStreamCallback(batcher), keras.callbacks.BackupAndRestore(backup, save_freq=SAVE_FREQ),
               record]
  if phase == "crash":
    callbacks.append(Crash(backup, os.path.join(workdir, "crashed")))
  trainer.fit(stream, epochs=EPOCHS + (phase == "crash"), steps_per_epoch=STEPS_PER_EPOCH, verbose=0,
              callbacks=callbacks)
  return {"steps": record.steps}


if __name__ == "__main__":
  phase_arg, workdir_arg = sys.argv[1:]
  with open(os.path.join(workdir_arg, f"{phase_arg}.json"), "w") as f:
    json.dump(train(phase_arg, workdir_arg), f)
