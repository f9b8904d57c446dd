r"""The paper's Oxford Flowers setting on the bundled digits; see train.py.

  python -m examples.fine_grained.main --flagfile=configs/fine_grained.flags
  python -m examples.fine_grained.main --flagfile=configs/fine_grained.flags --samplers=uniform,vanilla_pds \
      --radius=auto --workdir=runs/fine_grained_auto

Writes into --workdir: `results.csv` (test accuracy per sampler, batch size, seed and epoch) and
`results.md` (mean ± std over seeds at chosen epochs, and the paired difference to uniform).
"""

import pathlib

from absl import app

from examples import settings
from examples.fine_grained import train

_WORKDIR = settings.define_flags(train.Config, workdir="runs/fine_grained")


def main(argv):
  train.train_and_evaluate(settings.config_from_flags(train.Config, argv), _WORKDIR.value)
  print((pathlib.Path(_WORKDIR.value) / "results.md").read_text())


if __name__ == "__main__":
  app.run(main)
