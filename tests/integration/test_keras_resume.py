"""Keras BackupAndRestore: after a crash and a rerun in a new process, optimizer step n trains on draw n.

For a sampler of each kind of drawer state (one fit over a zip of their streams), with the
`AnnealingCallback`s before or after `BackupAndRestore`. A stream whose features are refreshed from
the model (`ModelSpace`) must train the batches of the uninterrupted run. (Without the callback,
`fit` fails at once: test_callback.)
"""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras_resume_run as run
from tf_repulsive import diagnostics

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_keras_resume")]

_SECONDS = 300


def _run_phase(phase, tmp_path):
  """Runs one phase for every order (one process) and returns order -> results."""
  subprocess.run([sys.executable, run.__file__, phase, str(tmp_path)], cwd=str(tmp_path.parent), check=True,
                 timeout=_SECONDS)
  return {order: json.loads((tmp_path / order / f"{phase}.json").read_text()) for order in run.ORDERS}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  tmp_path = tmp_path_factory.mktemp("keras_resume")
  return _run_phase("crash", tmp_path), _run_phase("resume", tmp_path)


@pytest.fixture(scope="module")
def draw_fingerprints():
  """`[step, sampler]`: the fingerprint of every sampler's draw of steps 0 .. 64."""
  x, y = run.digits()
  expected = []
  for sampler_name in run.SAMPLERS:
    batcher = run.batcher_for(sampler_name)
    tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
    batches = diagnostics.draw_batches(batcher, run.EPOCHS * batcher.steps_per_epoch + 5)
    expected.append(x[batches].astype(np.float64).sum(axis=(1, 2)))
  return np.array(expected).T


@pytest.mark.parametrize("order", run.ORDERS)
def test_every_optimizer_step_trains_on_its_draw_across_a_crash_and_a_new_process(runs, draw_fingerprints, order):
  crashed, resumed = runs
  uninterrupted = crashed[order]["consumed"]
  before, after = uninterrupted[:run.CRASH_AT], resumed[order]["consumed"]
  assert [step for step, _ in before] == list(range(run.CRASH_AT))
  # The last backup was after step 25 (one every 5); Keras reruns epoch 1 from the restored
  # optimizer, so the rerun trains steps 25 .. 64.
  steps_per_epoch = 20
  assert [step for step, _ in after] == list(range(run.CRASH_AT, run.CRASH_AT + 2 * steps_per_epoch))
  consumed = before + after
  fingerprints = np.array([fingerprints for _, fingerprints in consumed])
  np.testing.assert_allclose(fingerprints[:, :-1], draw_fingerprints[[step for step, _ in consumed]], rtol=1e-9)
  # The model-space stream: the uninterrupted run's batches (refresh 3 read back at step 25, the
  # later ones computed from the resumed model).
  assert [step for step, _ in uninterrupted][:len(consumed)] == list(range(len(consumed)))
  np.testing.assert_array_equal(fingerprints[:, -1],
                                np.array([fingerprints for _, fingerprints in uninterrupted])[:len(consumed), -1])

