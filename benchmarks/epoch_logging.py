"""What AnnealingCallback's logs cost per epoch, against the epoch's training time, at any epoch length.

Per dataset, one epoch of `fit` (a linear classifier, steps_per_execution=1) with the callback;
the callback's own time (its `on_train_batch_end` calls and its `on_epoch_end`) against the
epoch's wall-clock. Data: the digits (1797 x 64, EasyPDS: the mingling mix is logged) and d = 64
Gaussian points with 10 random classes (VanillaPDS: the fallback count is logged), k = 64.
  .venv/bin/python -m benchmarks.epoch_logging [--sizes=200000,1000000]
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn import datasets as sk_datasets  # noqa: E402

import tf_repulsive  # noqa: E402

_SIZES = flags.DEFINE_list("sizes", "200000,1000000", "Sizes N of the Gaussian datasets.")
_BATCH_SIZE = 64


class _TimedAnnealingCallback(tf_repulsive.AnnealingCallback):
  """The callback, adding up the seconds of its per-batch and epoch-end work."""

  seconds = 0.0

  def on_train_batch_end(self, batch, logs=None):
    start = time.perf_counter()
    super().on_train_batch_end(batch, logs)
    self.seconds += time.perf_counter() - start

  def on_epoch_end(self, epoch, logs=None):
    start = time.perf_counter()
    super().on_epoch_end(epoch, logs)
    self.seconds += time.perf_counter() - start


def _one_epoch(name, features, labels, sampler):
  batcher = tf_repulsive.repulsive_batch(_BATCH_SIZE, sampler, seed=0)
  batches = tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
  model = keras.Sequential([keras.Input((features.shape[1],)), keras.layers.Dense(10)])
  model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  callback = _TimedAnnealingCallback(batcher)
  start = time.perf_counter()
  history = model.fit(batches, epochs=1, steps_per_epoch=batcher.steps_per_epoch, verbose=0, callbacks=[callback])
  epoch = time.perf_counter() - start
  logged = sorted(key for key in history.history if key.startswith("sampler_"))
  print(f"{name:<28} | {batcher.steps_per_epoch:>6} | {epoch:>7.1f} | {1e3 * callback.seconds:>8.1f} | "
        f"{100 * callback.seconds / epoch:>5.2f}% | {len(logged)} keys")


def main(argv):
  del argv
  print(f"k = {_BATCH_SIZE}; one epoch of fit with AnnealingCallback")
  print(f"{'data, sampler':<28} | {'steps':>6} | {'epoch s':>7} | {'logs ms':>8} | {'share':>6} | logged")
  digits = sk_datasets.load_digits()
  _one_epoch("digits 1797 x 64, EasyPDS", (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64),
             tf_repulsive.EasyPDS())
  for size in map(int, _SIZES.value):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(size, 64)).astype(np.float32)
    labels = rng.integers(0, 10, size).astype(np.int64)
    _one_epoch(f"{size} x 64, VanillaPDS", features, labels, tf_repulsive.VanillaPDS())


if __name__ == "__main__":
  app.run(main)
