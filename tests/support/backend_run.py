"""One process of the Keras-backend test: `fit` with AnnealingCallback on the backend KERAS_BACKEND names.

`python backend_run.py PHASE WORKDIR`:
* `crash`: trains 3 epochs on an AnnealPDS stream with the callback and `BackupAndRestore`,
  crashing before step 25;
* `resume`: the same again in a new process, which finishes. It then trains a second model (the
  same initial weights) on the batches `batch_indices` gives for steps 0 to the last, as plain
  tensors, and writes both final weights, the logs and the backend to WORKDIR/resume.npz. Exact
  batches before and after the crash leave the weights exactly equal: SGD on a linear model is
  deterministic on the CPU.
"""

import os
import sys

import keras
import numpy as np
import tensorflow as tf
from sklearn import datasets as sk_datasets

import tf_repulsive

BATCH = 30
EPOCHS = 3
CRASH_AT = 25


def _data():
  data = sk_datasets.load_digits()
  return (data.data[:600] / 16.0).astype(np.float32), data.target[:600].astype(np.int64)


def _model():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
  model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


class _Crash(keras.callbacks.Callback):
  def on_train_batch_begin(self, batch, logs=None):
    if int(np.asarray(self.model.optimizer.iterations)) == CRASH_AT:
      raise RuntimeError("simulated crash")


def main(phase, workdir):
  x, y = _data()
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.AnnealPDS(), seed=4)
  batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  model = _model()
  callbacks = [tf_repulsive.AnnealingCallback(batcher),
               keras.callbacks.BackupAndRestore(os.path.join(workdir, "backup"), save_freq=5)]
  if phase == "crash":
    callbacks.append(_Crash())
  try:
    history = model.fit(batches, epochs=EPOCHS, steps_per_epoch=batcher.steps_per_epoch, verbose=0,
                        callbacks=callbacks)
  except RuntimeError as error:
    if "simulated crash" not in str(error):
      raise
    return
  # What the run should equal: a model trained on the draws of steps 0 ... n - 1 as plain tensors
  # (a resumed fit trains on from the restored optimizer step, to its own last epoch's end).
  steps = range(int(np.asarray(model.optimizer.iterations)))
  indices = np.stack([batcher.batch_indices(step) for step in steps])
  oracle = _model()
  oracle.fit(tf.data.Dataset.from_tensor_slices((x[indices], y[indices])), epochs=1, verbose=0)
  # The epochs of this fit: the last ones, of steps_per_epoch steps each.
  spe, epochs = batcher.steps_per_epoch, len(history.history["loss"])
  epoch_steps = [range(len(steps) - (epochs - epoch) * spe, len(steps) - (epochs - epoch - 1) * spe)
                 for epoch in range(epochs)]
  np.savez(os.path.join(workdir, f"{phase}.npz"), backend=keras.backend.backend(), steps=len(steps),
           weights=_flat(model), oracle_weights=_flat(oracle), last_start=batcher.stats().last_start,
           mingling=history.history["sampler_mingling"],
           expected_mingling=[batcher.group_mixes(epoch).mean(axis=0) @ np.arange(6) / 5 for epoch in epoch_steps])


def _flat(model):
  return np.concatenate([np.ravel(weights) for weights in model.get_weights()])


if __name__ == "__main__":
  main(*sys.argv[1:])
