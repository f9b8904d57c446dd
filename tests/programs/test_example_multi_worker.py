"""examples.multi_worker: two worker processes train exactly on the global draws (private network)."""

import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from examples.multi_worker import train
from loopback import concurrently, loopback_only
import tf_repulsive

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow

_REPO = pathlib.Path(__file__).resolve().parents[2]
_STEPS = 8
_BATCH = 32


def test_two_workers_train_as_one_process_on_the_draws(private_network, tmp_path):
  workers = "127.0.0.1:23456,127.0.0.1:23457"  # free: the namespace is private
  commands = [[sys.executable, "-m", "examples.multi_worker.main", f"--workers={workers}", f"--task_index={index}",
               f"--steps={_STEPS}", f"--batch_size={_BATCH}", f"--workdir={tmp_path}"] for index in (0, 1)]
  subprocess.run(loopback_only(concurrently(commands, 240)), cwd=_REPO, timeout=300, check=True)
  results = [np.load(tmp_path / f"worker{index}.npz") for index in (0, 1)]
  np.testing.assert_array_equal(results[0]["weights"], results[1]["weights"])
  # One process trained on the draws, as plain tensors: the same weights and losses.
  x, y = train.digits()
  config = train.Config(batch_size=_BATCH, steps=_STEPS)
  batcher = tf_repulsive.repulsive_batch(_BATCH, tf_repulsive.AnnealPDS(), seed=config.seed, start_step=0)

  tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  model = train.make_model(config.seed)
  optimizer = keras.optimizers.SGD(config.learning_rate)
  loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  losses = []
  for step in range(_STEPS):
    indices = batcher.batch_indices(step)
    with tf.GradientTape() as tape:
      loss = loss_fn(y[indices], model(x[indices]))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    losses.append(float(loss))
  np.testing.assert_allclose(results[0]["losses"], losses, rtol=1e-5)
  np.testing.assert_allclose(results[0]["weights"], train.flat_weights(model),
                             rtol=1e-5, atol=1e-6)
