r"""Per-batch sampling cost of Vanilla PDS (the paper's Table 1 setting) and pipeline throughput.

Part 1: seconds per mini-batch of `VanillaPDS()` for each k of --sizes on N = 8189 points of 4198
dimensions (Oxford-Flowers-like features), beside the paper's. Part 2: batches/s of
`repulsive_batch(50, VanillaPDS())` against `shuffle(N).batch(50)` on 60000 x 784; see benchmark.py.

  python -m benchmarks.sampling.main
  python -m benchmarks.sampling.main --label_weight=0.7 --sizes=80,150
"""

from absl import app

from examples import settings
from benchmarks.sampling import benchmark

settings.define_flags(benchmark.Config)


def main(argv):
  benchmark.benchmark(settings.config_from_flags(benchmark.Config, argv))


if __name__ == "__main__":
  app.run(main)
