"""One process of the selection resume test: fit with BackupAndRestore, crash or resume.

`python pruning_resume_run.py crash|resume WORKDIR` trains two models in turn: a `RecordingModel`
on an `EpochPruning` stream, and an `OnlineImportance` on `Uniform()` presamples. `crash` trains
without stopping, and copies what a crash at step CRASH_AT would leave (the backup) to
WORKDIR/<kind>/crashed; `resume` continues from that copy in a new process. Writes
WORKDIR/<phase>.json: {kind: [[step, record], ...]}, a record per step: for pruning the batch,
its weights as the pass holds them and the pass; for online importance tau and the steps that
sampled by importance so far; for both, the sum of the model's weights after the step. The crash
run trains an epoch more: as far as the resumed run, which repeats part of an epoch.
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
KINDS = ("pruning", "online")


def data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=[NUM_POINTS, 4]).astype(np.float32)
  return x, (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)


class Record(keras.callbacks.Callback):
  """Each step's record (see the module's docstring)."""

  def __init__(self, batcher, kind):
    super().__init__()
    self.batcher, self.kind, self.steps = batcher, kind, []

  def on_train_batch_end(self, batch, logs=None):
    step = int(self.model.optimizer.iterations.numpy()) - 1
    weights = float(sum(np.sum(w, dtype=np.float64) for w in self.model.get_weights()))
    if self.kind == "pruning":
      state = self.batcher.sampler_state
      indices = self.batcher.batch_indices(step)
      record = [indices.tolist(), np.round(state.weights.numpy()[indices], 6).tolist(), int(state.pass_index.numpy())]
    else:
      record = [float(self.model.tau.numpy()), int(self.model.importance_steps.numpy())]
    self.steps.append([step, [*record, weights]])


class Crash(keras.callbacks.Callback):
  def __init__(self, backup, crashed):
    super().__init__()
    self.backup, self.crashed = backup, crashed

  def on_train_batch_begin(self, batch, logs=None):
    if int(self.model.optimizer.iterations.numpy()) == CRASH_AT:
      shutil.copytree(self.backup, self.crashed)


def train(phase, workdir, kind):
  keras.utils.set_random_seed(0)
  options = tf_repulsive.BatcherOptions(verbose=False)
  if kind == "pruning":
    batcher = tf_repulsive.repulsive_batch(
        BATCH, tf_repulsive.EpochPruning(total_steps=EPOCHS * STEPS_PER_EPOCH, prune_ratio=0.7), seed=1,
        options=options)
  else:
    batcher = tf_repulsive.repulsive_batch(3 * BATCH, tf_repulsive.Uniform(), seed=1, options=options)
  stream = tf.data.Dataset.from_tensor_slices(data()).apply(batcher)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
  trainer = (tf_repulsive.RecordingModel(model, batcher) if kind == "pruning" else
             tf_repulsive.OnlineImportance(model, batch_size=BATCH, tau_threshold=1.05, seed=2))
  # (No XLA: its compilation would be most of these small runs; fit compiles it in test_pruning.)
  trainer.compile(keras.optimizers.SGD(0.2), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
  backup = os.path.join(workdir, kind, "backup" if phase == "crash" else "crashed")
  record = Record(batcher, kind)
  callbacks = [tf_repulsive.BatchStreamCallback(batcher), keras.callbacks.BackupAndRestore(backup, save_freq=SAVE_FREQ),
               record]
  if phase == "crash":
    callbacks.append(Crash(backup, os.path.join(workdir, kind, "crashed")))
  trainer.fit(stream, epochs=EPOCHS + (phase == "crash"), steps_per_epoch=STEPS_PER_EPOCH, verbose=0,
              callbacks=callbacks)
  return record.steps


if __name__ == "__main__":
  phase_arg, workdir_arg = sys.argv[1:]
  with open(os.path.join(workdir_arg, f"{phase_arg}.json"), "w") as f:
    json.dump({kind: train(phase_arg, workdir_arg, kind) for kind in KINDS}, f)
