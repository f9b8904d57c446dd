r"""The paper's synthetic experiment (its figure 4), made quantitative; see train.py.

  python -m examples.synthetic.main --flagfile=configs/synthetic.flags
  python -m examples.synthetic.main --flagfile=configs/synthetic_smoke.flags
  python -m examples.synthetic.main --flagfile=configs/synthetic.flags --data_seed=1 \
      --workdir=runs/synthetic_seed1

Writes into --workdir: `synthetic_<sampler>.png` per sampler, `synthetic_boundaries.png` with all
samplers side by side, `results.md` / `results.csv` (boundary accuracy mean ± std per sampler) and
`repetitions.csv` (every repetition).
"""

from absl import app

from examples import settings
from examples.synthetic import train

_WORKDIR = settings.define_flags(train.Config, workdir="runs/synthetic")


def main(argv):
  train.train_and_evaluate(settings.config_from_flags(train.Config, argv), _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
