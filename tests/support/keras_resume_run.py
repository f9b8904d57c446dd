"""One process of the Keras resume test: train with BackupAndRestore, crash or resume.

`python keras_resume_run.py crash|resume WORKDIR` trains once for each of ORDERS (the callbacks
before or after `BackupAndRestore`), in WORKDIR/<order>. `crash` trains without stopping, but
copies what a crash at step CRASH_AT would leave (the backup, the saved refreshes) to
<order>/crashed; `resume` continues from that copy in a new process. One model trains on a zip
of the SAMPLERS' streams (one `AnnealingCallback` each), so one fit checks them all: its train
step fingerprints each stream's batch. The last stream (`model_space`) draws Vanilla PDS on the
model's hidden activations, refreshed every REFRESH_EVERY steps, its elements weighted by their
inclusion probabilities (re-estimated at each refresh; the fingerprint holds the weighted
inputs): the uninterrupted `crash` run's batches are its reference. Writes
WORKDIR/<order>/<phase>.json: {"consumed": [[optimizer step, [fingerprint per stream]], ...]}.
"""

import json
import os
import shutil
import sys

import keras
import numpy as np
import tensorflow as tf
from sklearn import datasets as sk_datasets

import checkpoint_cases
import tf_repulsive
from tf_repulsive import _dart_throwing

NUM_POINTS = 600
BATCH = 30  # 20 steps per epoch
EPOCHS = 3
CRASH_AT = 25
SAVE_FREQ = 5
SEED = 4
# The crash's last backup (step 25) falls between two refreshes: the resumed run reads refresh 3 back.
REFRESH_EVERY = 8
MODEL_SPACE = "model_space"
# A sampler of each kind of drawer state (the stateless uniform draw, epochs, a step-dependent pi,
# the k-DPP, the weights its callback keeps): what a resume in a new process must restore is the
# callback's start of each. The iterator-checkpoint harness covers every sampler.
SAMPLERS = ("uniform", "epoch_shuffle", "anneal_pds", "kdpp", "active_bias")
ORDERS = ("callback_first", "backup_first")


def digits():
  data = sk_datasets.load_digits()
  return (data.data[:NUM_POINTS] / 16.0).astype(np.float32), data.target[:NUM_POINTS].astype(np.int64)


class QuicklyWeightedVanillaPDS(tf_repulsive.VanillaPDS):
  """VanillaPDS whose inclusion probabilities are estimated from 16 steps' draws instead of 256.

  The weights must resume exactly, whatever their precision (test_inclusion_weights tests that):
  the fewer steps keep a refresh's estimate from dominating these processes.
  """

  _tuning = _dart_throwing.DartTuning(inclusion_steps=16)


def batcher_for(sampler_name, model=None, refreshes=None):
  if sampler_name == MODEL_SPACE:
    space = tf_repulsive.ModelSpace(model, HiddenFeatures(), refresh_every=REFRESH_EVERY, directory=refreshes,
                                    verbose=False)
    return tf_repulsive.repulsive_batch(BATCH, QuicklyWeightedVanillaPDS(), seed=SEED, features=space,
                                        inclusion_weights="self_normalized",
                                        options=tf_repulsive.BatcherOptions(verbose=False))
  return tf_repulsive.repulsive_batch(BATCH, checkpoint_cases.SAMPLERS[sampler_name](), seed=SEED)


class HiddenFeatures(tf_repulsive.FeatureSource):
  """The fingerprint model's hidden activations."""

  def features_fn(self, model):
    return lambda inputs, labels: model.hidden(inputs)


class FingerprintModel(keras.Model):
  """Trains on the first sampler's batch; its train step keeps the sum of every sampler's batch."""

  def __init__(self, num_streams):
    super().__init__()
    self.fingerprint = tf.Variable(tf.zeros([num_streams], tf.float64), trainable=False)
    self.hidden = keras.layers.Dense(16, activation="relu")
    self.out = keras.layers.Dense(10)

  def call(self, x):
    return self.out(self.hidden(x[0]))

  def train_step(self, data):
    self.fingerprint.assign(tf.stack([tf.reduce_sum(tf.cast(x, tf.float64)) for x in data[0]]))
    return super().train_step(data)


class Record(keras.callbacks.Callback):
  def __init__(self):
    super().__init__()
    self.consumed = []

  def on_train_batch_end(self, batch, logs=None):
    step = int(self.model.optimizer.iterations.numpy()) - 1
    self.consumed.append([step, self.model.fingerprint.numpy().tolist()])


class Crash(keras.callbacks.Callback):
  """Copies what a crash before step CRASH_AT leaves on disk (each directory, to `crashed`)."""

  def __init__(self, directories, crashed):
    super().__init__()
    self.directories, self.crashed = directories, crashed

  def on_train_batch_begin(self, batch, logs=None):
    if int(self.model.optimizer.iterations.numpy()) == CRASH_AT:
      for directory in self.directories:
        shutil.copytree(directory, os.path.join(self.crashed, os.path.basename(directory)))


def train(phase, order, workdir):
  x, y = digits()
  names = [*SAMPLERS, MODEL_SPACE]
  keras.utils.set_random_seed(0)
  model = FingerprintModel(len(names))
  model.compile(optimizer=keras.optimizers.Adam(1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  model(tuple(x[:1] for _ in names))  # BackupAndRestore (and the model's features) need a built model
  # The crash run writes here; the resumed run continues from the copy of what a crash left.
  saved = workdir if phase == "crash" else os.path.join(workdir, "crashed")
  backup_dir, refreshes = os.path.join(saved, "backup"), os.path.join(saved, "refreshes")
  batchers = [batcher_for(name, model, refreshes) for name in names]
  streams = [tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher) for batcher in batchers]
  # (The prefetch runs the model-space stream's deliveries ahead: they wait for each refresh.)
  # A weighted stream's (x, y, w) enters the fingerprint as w * x.
  batches = tf.data.Dataset.zip(tuple(streams)).map(
      lambda *elements: (tuple(element[0] if len(element) == 2 else element[2][:, None] * element[0]
                               for element in elements), elements[0][1])).prefetch(2)
  backup = keras.callbacks.BackupAndRestore(backup_dir, save_freq=SAVE_FREQ)
  aligning = [tf_repulsive.AnnealingCallback(b, name=name) for b, name in zip(batchers, names)]
  callbacks = aligning + [backup] if order == "callback_first" else [backup] + aligning
  record = Record()
  crashed = os.path.join(workdir, "crashed")
  callbacks += [record] + ([Crash([backup_dir, refreshes], crashed)] if phase == "crash" else [])
  # (The crash run trains an epoch more: as far as the resumed run, which repeats part of one.)
  model.fit(batches, epochs=EPOCHS + (phase == "crash"), steps_per_epoch=batchers[0].steps_per_epoch, verbose=0,
            callbacks=callbacks)
  return {"consumed": record.consumed}


if __name__ == "__main__":
  phase_arg, workdir_arg = sys.argv[1:]
  for order_arg in ORDERS:
    order_dir = os.path.join(workdir_arg, order_arg)
    os.makedirs(order_dir, exist_ok=True)
    with open(os.path.join(order_dir, f"{phase_arg}.json"), "w") as f:
      json.dump(train(phase_arg, order_arg, order_dir), f)
