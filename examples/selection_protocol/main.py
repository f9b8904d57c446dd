r"""Adaptive batch selection against tuned baselines (docs/results/adaptive_density.md).

Tunes the baselines on validation, chooses the arms' refresh interval on validation, then runs
every arm and tuned baseline with paired seeds, round-robin, and writes `<workdir>/summary.md`.
Takes every flag of examples.mnist_deep.main (so its flagfiles) plus the protocol's; finished runs
are read, not rerun.

  python -m examples.selection_protocol.main --flagfile=configs/selection_protocol_smoke.flags
  python -m examples.selection_protocol.main --flagfile=configs/selection_protocol_mnist.flags \
      --arms=vanilla_pds@gradient --workdir=runs/protocol/mnist
"""

from absl import app

from examples import settings
from examples.selection_protocol import protocol

_WORKDIR = settings.define_flags(protocol.ProtocolConfig, workdir="runs/selection_protocol")


def main(argv):
  print(protocol.run_protocol(settings.config_from_flags(protocol.ProtocolConfig, argv), _WORKDIR.value))


if __name__ == "__main__":
  app.run(main)
