r"""Which disk radius? `tf_repulsive.diagnostics.radius_sweep` on the Deep-MNIST CNN; see sweep.py.

For radius="auto", --scales multiples of it and the default radius: the gradient-variance split
against plain SGD, the batches' class mix and the fill rate, at each of --checkpoint_steps
(Adam steps on uniform batches; 0 is the initialisation).

  python -m examples.radius_sweep.main --flagfile=configs/radius_sweep.flags

Writes into --workdir: `sweep.txt` (what it prints) and `radius_sweep.png`.
"""

from absl import app

from examples import settings
from examples.radius_sweep import sweep

_WORKDIR = settings.define_flags(sweep.Config, workdir="runs/radius_sweep")


def main(argv):
  sweep.sweep(settings.config_from_flags(sweep.Config, argv), _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
