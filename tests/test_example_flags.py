"""Example binaries keep their flags in their own FlagValues; help must still list them."""

import os
import pathlib
import subprocess
import sys

import pytest

_REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("binary,own_flag", [("examples/speech_commands/train.py", "--how_many_training_steps")])
def test_help_lists_the_binarys_own_flags(binary, own_flag):
  env = {**os.environ, "PYTHONPATH": str(_REPO)}
  done = subprocess.run([sys.executable, binary, "--helpfull"], cwd=_REPO, env=env, capture_output=True,
                        text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  assert own_flag in done.stdout and "--verbosity" in done.stdout
