r"""The ImageNet-shaped pipeline: sample (path, label, features) records, decode images afterwards.

Builds `repulsive_batch` over --num_elements records (default ImageNet's 1.28M) whose images are
read after sampling, and measures build time, build memory and batches/s against
`shuffle(N).batch(k).map(load)` on the same files; see benchmark.py.

  python -m benchmarks.imagenet_scale.main --flagfile=configs/imagenet_scale.flags
"""

from absl import app

from examples import settings
from benchmarks.imagenet_scale import benchmark

_WORKDIR = settings.define_flags(benchmark.Config, workdir="runs/imagenet_scale")


def main(argv):
  benchmark.benchmark(settings.config_from_flags(benchmark.Config, argv), _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
