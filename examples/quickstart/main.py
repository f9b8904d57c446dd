r"""Quickstart: the same classifier trained with uniform and with repulsive mini-batches.

Runs offline on scikit-learn's bundled handwritten digits (8x8 images, a fixed held-out split):
for each sampler, `model.fit` on `ds.apply(tf_repulsive.repulsive_batch(...))` with Keras'
progress bar, then a table of held-out accuracy.

  python -m examples.quickstart.main
  python -m examples.quickstart.main --epochs=10 --samplers=uniform,anneal_pds
"""

from __future__ import annotations

from absl import app
from absl import flags
import keras
import numpy as np
from sklearn import datasets as sk_datasets
from sklearn import model_selection
import tensorflow as tf

from examples import common
import tf_repulsive

# A one-file demo: its four settings are plain absl flags.
_SAMPLERS = flags.DEFINE_list(
    "samplers", list(common.SAMPLER_NAMES), f"Samplers to compare: {', '.join(common.ALL_SAMPLER_NAMES)}.")
flags.register_validator("samplers", lambda names: bool(names) and set(names) <= set(common.ALL_SAMPLER_NAMES),
                         f"--samplers must name some of {', '.join(common.ALL_SAMPLER_NAMES)}.")
_EPOCHS = flags.DEFINE_integer("epochs", 5, "Training epochs per sampler.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 50, "Mini-batch size k.", lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the model initialisation and the batch draws.")


def train_and_evaluate(sampler_name: str, epochs: int, batch_size: int, seed: int, verbose: int = 1) -> float:
  """Trains a small MLP on the digits with one sampler; returns held-out accuracy."""
  digits = sk_datasets.load_digits()
  x = (digits.data / 16.0).astype(np.float32)
  y = digits.target.astype(np.int64)
  x_train, x_test, y_train, y_test = model_selection.train_test_split(
      x, y, test_size=0.3, random_state=0, stratify=y)
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([
      keras.Input((64,)),
      keras.layers.Dense(64, activation="relu"),
      keras.layers.Dense(10),
  ])
  model.compile(optimizer=keras.optimizers.SGD(0.05),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
  batcher = tf_repulsive.repulsive_batch(batch_size, common.make_sampler(sampler_name), seed=seed)
  train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).apply(batcher)
  # The batch stream is unbounded: an epoch is one dataset's worth of batches, ceil(N / k). The
  # sampler draws the batches; Keras' own shuffle does not apply to datasets (it would only warn).
  model.fit(train, epochs=epochs, steps_per_epoch=batcher.steps_per_epoch, shuffle=False, verbose=verbose,
            callbacks=common.sampler_callbacks(batcher))
  return float(model.evaluate(x_test, y_test, verbose=0)[1])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  results = {}
  for name in _SAMPLERS.value:
    print(f"\n== {name} ==")
    results[name] = train_and_evaluate(name, _EPOCHS.value, _BATCH_SIZE.value, _SEED.value)
  print(f"\nHeld-out accuracy after {_EPOCHS.value} epochs (batch {_BATCH_SIZE.value}, seed {_SEED.value}):")
  width = max(map(len, results))
  for name, accuracy in results.items():
    print(f"  {name:<{width}} {accuracy:.4f}")


if __name__ == "__main__":
  app.run(main)
