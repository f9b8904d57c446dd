r"""The paper's Table 1 side by side: CPU time to sample one mini-batch, k-DPP vs PDS vs uniform.

Table A: seconds per batch of KDPP, FastKDPP, VanillaPDS and Uniform for each k of --sizes on
--num_points Oxford-Flowers-like points (and dppy's exact k-DPP when installed), beside the
paper's. Table B: VanillaPDS per batch for each N of --scaling_sizes; see benchmark.py.

  python -m benchmarks.table1.main
  python -m benchmarks.table1.main --sizes=80 --num_points=2000 --scaling_sizes=10000
"""

from absl import app

from examples import settings
from benchmarks.table1 import benchmark

settings.define_flags(benchmark.Config)


def main(argv):
  benchmark.benchmark(settings.config_from_flags(benchmark.Config, argv))


if __name__ == "__main__":
  app.run(main)
