r"""Deep MNIST for several samplers and seeds: mean ± std test-error table and mean curves.

Takes every flag of examples.mnist_deep.main (so its flagfiles) plus --samplers, --seeds and
--report_steps; each run writes into `<workdir>/<sampler>/seed_<seed>/`, the summary goes to
`<workdir>/summary.md` and `<workdir>/curves.png`. Finished runs are read, not retrained.

  python -m examples.mnist_deep_sweep.main --flagfile=configs/mnist_deep_digits.flags \
      --samplers=uniform,vanilla_pds,easy_pds,dense_pds,anneal_pds --seeds=0,1,2,3,4 \
      --workdir=runs/mnist_deep_digits
"""

from absl import app

from examples import settings
from examples.mnist_deep_sweep import sweep

_WORKDIR = settings.define_flags(sweep.SweepConfig, workdir="runs/mnist_deep_sweep")


def main(argv):
  print(sweep.sweep(settings.config_from_flags(sweep.SweepConfig, argv), _WORKDIR.value))


if __name__ == "__main__":
  app.run(main)
