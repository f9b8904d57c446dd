"""fit + AnnealingCallback + BackupAndRestore on Keras' JAX and PyTorch backends, in their own processes.

Keras 3 takes a tf.data stream on every backend. A fit that crashes, and its resume in a new
process, train exactly on the draws of their steps (the final weights equal those of the same model
trained on `batch_indices`' batches as plain tensors), and the logs are the epochs' batches'.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import backend_run as run

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow

_SECONDS = 300
# PyTorch's CPU build lives in its own environment beside .venv (scripts/setup_env.sh).
_TORCH_PYTHON = pathlib.Path(__file__).resolve().parents[2] / ".venv-torch" / "bin" / "python"


def _python(backend):
  if backend == "torch":
    if not _TORCH_PYTHON.exists():
      pytest.skip("no .venv-torch: scripts/setup_env.sh could not install PyTorch's CPU build")
    return str(_TORCH_PYTHON)
  return sys.executable


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_fit_and_a_resume_in_a_new_process_train_on_the_draws(backend, tmp_path):
  python = _python(backend)
  for phase in ("crash", "resume"):
    completed = subprocess.run([python, run.__file__, phase, str(tmp_path)], capture_output=True, text=True,
                               env=dict(os.environ, KERAS_BACKEND=backend), timeout=_SECONDS, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
  resumed = np.load(tmp_path / "resume.npz")
  assert str(resumed["backend"]) == backend
  # The last backup before the crash was at step 25: the new process's stream starts there, and
  # Keras reruns the interrupted epoch from it, to step 64.
  assert int(resumed["steps"]) == 65 and int(resumed["last_start"]) == run.CRASH_AT
  # Steps 0-24 before the crash and 25-64 after it trained on their draws.
  np.testing.assert_array_equal(resumed["weights"], resumed["oracle_weights"])
  np.testing.assert_allclose(resumed["mingling"], resumed["expected_mingling"], atol=1e-12)
