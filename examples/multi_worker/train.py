r"""A custom training loop under MultiWorkerMirroredStrategy on repulsive global batches.

Every worker process runs `train` with its own `task_index`. The global batch of step n is the
sampler's draw of step n over the whole dataset; `batcher.per_replica(input_context)` gives each
replica, on whichever worker, its slice of that draw, so the workers together train on exactly the
draw (the per-replica losses are averaged over the global batch, and the optimizer sums the
replicas' gradients). Keras' `fit` does not run under this strategy in Keras 3 (it fails with plain
`ds.batch(k)` too; keras-team/keras#20585): a custom loop is the form that works.

Data: scikit-learn's digits (1797 x 64), a linear classifier trained with SGD.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

import keras
import numpy as np
from sklearn import datasets as sk_datasets
import tensorflow as tf

from examples import common
from examples import settings
import tf_repulsive


@dataclasses.dataclass(frozen=True)
class Config(settings.Settings):
  """One worker's run."""

  workers: tuple[str, ...] = settings.setting(("127.0.0.1:23456", "127.0.0.1:23457"),
                                              "host:port of every worker, in task order.")
  task_index: int = settings.setting(0, "This process's index among --workers.", minimum=0)
  sampler: str = settings.setting("anneal_pds", "Sampler of the global batches.", choices=common.ALL_SAMPLER_NAMES)
  batch_size: int = settings.setting(64, "Global batch k (a multiple of the replicas).", minimum=1)
  steps: int = settings.setting(100, "Training steps.", minimum=1)
  learning_rate: float = settings.setting(0.1, "SGD learning rate.", greater_than=0.0)
  seed: int = settings.setting(0, "Seed of the model initialisation and of the batch draws.")


def digits() -> tuple[np.ndarray, np.ndarray]:
  """The training data: the digits' pixels in [0, 1] and their labels."""
  data = sk_datasets.load_digits()
  return (data.data / 16.0).astype(np.float32), data.target.astype(np.int64)


def make_model(seed: int) -> keras.Model:
  """The classifier, initialised from `seed` (the same weights on every worker)."""
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])


def train(config: Config, log: Callable[[str], None] = print) -> dict[str, np.ndarray]:
  """Trains `config.steps` steps as worker `config.task_index`; returns the final weights and the losses.

  Must run before any other TensorFlow op of the process: the strategy configures the collectives.
  """
  if config.task_index >= len(config.workers):
    raise ValueError(f"--task_index={config.task_index} names no worker of --workers ({len(config.workers)}).")
  os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": list(config.workers)},
                                        "task": {"type": "worker", "index": config.task_index}})
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  x, y = digits()
  # A fixed start: every worker's stream begins at step 0 (a resumed run would pass its step).
  batcher = tf_repulsive.repulsive_batch(config.batch_size, common.make_sampler(config.sampler), seed=config.seed,
                                         start_step=0)
  source = tf.data.Dataset.from_tensor_slices((x, y))
  batches = iter(strategy.distribute_datasets_from_function(
      lambda context: source.apply(batcher.per_replica(context))))
  with strategy.scope():
    model = make_model(config.seed)
    optimizer = keras.optimizers.SGD(config.learning_rate)
  loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

  @tf.function
  def train_step(iterator):
    def replica_step(features, labels):
      with tf.GradientTape() as tape:
        # The mean over the global batch: the replicas' gradients sum to the draw's gradient.
        loss = tf.nn.compute_average_loss(loss_fn(labels, model(features, training=True)),
                                          global_batch_size=config.batch_size)
      optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
      return loss

    return strategy.reduce("SUM", strategy.run(replica_step, args=next(iterator)), axis=None)

  losses = []
  for step in range(config.steps):
    losses.append(float(train_step(batches)))
    if step % max(1, config.steps // 10) == 0 or step == config.steps - 1:
      log(f"worker {config.task_index}: step {step}, loss {losses[-1]:.4f}")
  return {"weights": flat_weights(model), "losses": np.array(losses)}


def flat_weights(model: keras.Model) -> np.ndarray:
  """All of `model`'s weights as one vector."""
  return np.concatenate([np.ravel(weights) for weights in model.get_weights()])
