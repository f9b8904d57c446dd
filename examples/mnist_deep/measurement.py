"""The Deep-MNIST CNN on the digits, measured at initialisation and after training on uniform batches.

What the gradient diagnostics and the radius sweep share: their common settings, the data and the
compiled CNN, and the points of training at which they measure.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import keras
import numpy as np
import tensorflow as tf

from examples import settings
from examples.mnist_deep import train


@dataclasses.dataclass(frozen=True)
class MeasurementConfig(settings.Settings):
  """Settings of measuring the CNN's mini-batch gradients on the digits."""

  dataset: str = settings.setting("digits", "Training data.", choices=train.DATASETS)
  data_dir: str | None = settings.setting(None, train.DATA_DIR_HELP)
  train_fraction: float = settings.setting(0.5, "Fraction of the digits training split used.",
                                           greater_than=0.0, maximum=1.0)
  neighbors: int = settings.setting(5, "K of the mingling index.", minimum=1)
  batch_size: int = settings.setting(50, "Mini-batch size k.", minimum=2)
  checkpoint_steps: tuple[int, ...] = settings.setting(
      (0, 300), "Training steps (Adam on uniform batches) at which to measure, increasing; 0 is the initialisation.",
      minimum=0)
  learning_rate: float = settings.setting(1e-4, "Adam learning rate.", greater_than=0.0)
  variables: str = settings.setting("all", "Parameters whose gradients are analysed.",
                                    choices=("all", "last_layer"))
  sketch_dim: int = settings.setting(4096, "Count-sketch dimension of the gradients; 0 for exact.", minimum=0)
  seed: int = settings.setting(0, "Seed of the initialisation, training, draws and sketch.")


@dataclasses.dataclass(frozen=True)
class Subject:
  """What is measured: the training digits and the compiled CNN (Adam) with its loss."""

  x: np.ndarray  # [N, 28, 28, 1]
  y: np.ndarray  # [N]
  model: keras.Model
  loss: keras.losses.Loss


def subject(config: MeasurementConfig) -> Subject:
  """The training digits of `config.train_fraction` and the CNN, initialised with `config.seed`."""
  x, y, _, _ = train.load(config.dataset, config.data_dir, config.train_fraction)
  keras.utils.set_random_seed(config.seed)
  model = train.deep_mnist_model()
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  model.compile(optimizer=keras.optimizers.Adam(config.learning_rate), loss=loss, metrics=["accuracy"])
  return Subject(x=x, y=y, model=model, loss=loss)


def checkpoints(config: MeasurementConfig, measured: Subject) -> Iterator[tuple[str, int]]:
  """Yields (label, training step) at each of `config.checkpoint_steps`, the model trained that far.

  Between checkpoints, the model trains Adam steps on uniform batches (shuffle + batch; each
  stretch continues the batches where the previous one stopped).
  """
  steps = sorted(set(config.checkpoint_steps))
  batches = (tf.data.Dataset.from_tensor_slices((measured.x, measured.y)).shuffle(len(measured.x), seed=config.seed)
             .batch(config.batch_size, drop_remainder=True).repeat())
  trained = 0
  for step in steps:
    if step > trained:
      measured.model.fit(batches.skip(trained), steps_per_epoch=step - trained, epochs=1, shuffle=False, verbose=0)
      trained = step
    yield ("initialisation" if step == 0 else f"after {step} steps"), step
