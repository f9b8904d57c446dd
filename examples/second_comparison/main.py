r"""Selection that needs no extra pass against tuned and matched baselines (docs/results/second_comparison.md).

Tunes the baselines, names the comparator and the targets, tunes the matched baseline and every
arm, then runs them all with paired seeds, round-robin, and writes `<workdir>/choices.md`,
`<workdir>/summary.md` and `<workdir>/errors.png`. Takes every flag of examples.mnist_deep.main
(so its flagfiles) plus the protocol's; finished runs are read, not rerun.

  python -m examples.second_comparison.main --flagfile=configs/second_comparison_smoke.flags
  python -m examples.second_comparison.main --flagfile=configs/second_comparison_mnist1d.flags \
      --workdir=runs/second_comparison/mnist1d
"""

from absl import app

from examples import settings
from examples.second_comparison import runner

_WORKDIR = settings.define_flags(runner.ComparisonConfig, workdir="runs/second_comparison")


def main(argv):
  config = settings.config_from_flags(runner.ComparisonConfig, argv)
  print(runner.ConditionProtocol(config, _WORKDIR.value).run())


if __name__ == "__main__":
  app.run(main)
