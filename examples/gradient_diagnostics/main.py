r"""Theorem-1 diagnostics of the Deep-MNIST CNN: does each sampler reduce the gradient variance?

The variance split of the mini-batch gradient per sampler at each of --checkpoint_steps (Adam
steps on uniform batches; 0 is the initialisation), and g(r) of the samplers' batches; see diagnose.py.

  python -m examples.gradient_diagnostics.main --flagfile=configs/gradient_diagnostics.flags

Writes into --workdir: `variance.txt` (what it prints), `variance_split.png` (bars of the split
relative to plain SGD) and `pair_correlation.png` (g(r) per sampler).
"""

from absl import app

from examples import settings
from examples.gradient_diagnostics import diagnose

_WORKDIR = settings.define_flags(diagnose.Config, workdir="runs/gradient_diagnostics")


def main(argv):
  diagnose.diagnose(settings.config_from_flags(diagnose.Config, argv), _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
