"""The pipelines of the iterator-checkpoint harness, shared by the test and its fresh process.

Run as a program it is that fresh process: it builds each pipeline anew, restores every saved
checkpoint into a new iterator and writes the batches that follow.
`python checkpoint_cases.py CHECKPOINT_DIR OUTPUT.npz`
"""

import os
import sys
import warnings

import numpy as np
import tensorflow as tf
from sklearn import datasets as sk_datasets

import tf_repulsive

NUM_POINTS = 60
BATCH = 20
STEPS_PER_EPOCH = 3
EPOCHS = 3
# Batches read from every iterator: past the third epoch's end.
READ = EPOCHS * STEPS_PER_EPOCH + 4
# Break points: after every step of the first three epochs.
BREAKS = range(1, EPOCHS * STEPS_PER_EPOCH + 1)
# The break points a fresh process restores: within the first epoch, at an epoch's end, and
# within the last (every break point is restored in the test's own process).
FRESH_BREAKS = (1, STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH + 1)
# Where the callback-started streams start (the others start at start_step=0).
CALLBACK_START = 7

SAMPLERS = {
    "uniform": tf_repulsive.Uniform,
    "epoch_shuffle": tf_repulsive.EpochShuffle,
    "vanilla_pds": tf_repulsive.VanillaPDS,
    "easy_pds": tf_repulsive.EasyPDS,
    "dense_pds": lambda: tf_repulsive.DensePDS([1, 1, 1, 1, 1, 1]),
    "anneal_pds": tf_repulsive.AnnealPDS,
    "kdpp": tf_repulsive.KDPP,
    "fast_kdpp": tf_repulsive.FastKDPP,
    "active_bias": tf_repulsive.ActiveBias,
    "importance": tf_repulsive.Importance,
    "importance_pds": tf_repulsive.ImportancePDS,
    "rs2": lambda: tf_repulsive.RS2(fraction=0.6),
}
# Half of the samplers take the fixed start, half the callback-set one: both paths are covered.
FIXED_START = {"uniform", "easy_pds", "anneal_pds", "fast_kdpp", "importance"}

PIPELINES = {
    "apply": lambda batches: batches,
    "apply_prefetch": lambda batches: batches.prefetch(3),
    "apply_repeat_prefetch": lambda batches: batches.repeat().prefetch(3),
    "apply_map_prefetch": lambda batches: batches.map(lambda x, y, index: (2.0 * x, y, index)).prefetch(3),
}
# The cases: every sampler in two consecutive pipelines of the cycle above, so that every sampler
# runs behind a prefetch and every pipeline holds four or five samplers of both starts (the full
# cross product costs twice as much: what a pipeline saves is the stream's, not the sampler's).
CASES = [(sampler_name, pipeline_name)
         for position, sampler_name in enumerate(SAMPLERS)
         for pipeline_name in (list(PIPELINES)[position % 4], list(PIPELINES)[(position + 1) % 4])]


def build(sampler_name, pipeline_name, set_start=True):
  """The batcher and the pipeline; `set_start=False` leaves a callback-started stream unstarted."""
  data = sk_datasets.load_digits()
  features = (data.data[:NUM_POINTS] / 16.0).astype(np.float32)
  labels = data.target[:NUM_POINTS].astype(np.int64)
  fixed = sampler_name in FIXED_START
  batcher = tf_repulsive.repulsive_batch(BATCH, SAMPLERS[sampler_name](), labels=lambda x, y, index: y, seed=7,
                                         start_step=0 if fixed else None)
  dataset = tf.data.Dataset.from_tensor_slices((features, labels, np.arange(NUM_POINTS)))
  with warnings.catch_warnings():
    # Some of these batch sizes are near the packing limit: the build-time fill warning is expected.
    warnings.simplefilter("ignore", RuntimeWarning)
    batches = dataset.apply(batcher)
  if not fixed and set_start:
    batcher.start_at(CALLBACK_START)
  return batcher, PIPELINES[pipeline_name](batches)


def read(iterator, count):
  """The index components of the next `count` batches, `[count, BATCH]`."""
  return np.stack([next(iterator)[2].numpy() for _ in range(count)])


def checkpoint_path(directory, sampler_name, pipeline_name, after):
  return os.path.join(directory, f"{sampler_name}-{pipeline_name}-{after}")


def restore_all(directory):
  """For every case, the batches after restoring each of `FRESH_BREAKS` into a freshly built pipeline.

  Returns:
    "<sampler>-<pipeline>-<after>" -> `[READ - after, BATCH]` indices, for every case. Each pipeline is built once
    here and never started: a callback-started stream must take its start from the checkpoint.
  """
  restored = {}
  for sampler_name, pipeline_name in CASES:
    _, pipeline = build(sampler_name, pipeline_name, set_start=False)
    # One iterator restored again and again: a restore replaces all of its state.
    iterator = iter(pipeline)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    for after in FRESH_BREAKS:
      checkpoint.read(checkpoint_path(directory, sampler_name, pipeline_name, after)).assert_consumed()
      restored[f"{sampler_name}-{pipeline_name}-{after}"] = read(iterator, READ - after)
  return restored


if __name__ == "__main__":
  directory_arg, output_arg = sys.argv[1:]
  np.savez(output_arg, **restore_all(directory_arg))
