r"""One worker of a custom training loop under MultiWorkerMirroredStrategy on repulsive batches (see train.py).

Start one process per worker, each with its --task_index; they find each other at --workers:

  python -m examples.multi_worker.main --flagfile=configs/multi_worker.flags --task_index=0 &
  python -m examples.multi_worker.main --flagfile=configs/multi_worker.flags --task_index=1

Writes --workdir/worker<task_index>.npz: the final weights and the loss of every step.
"""

import pathlib

from absl import app
import numpy as np

from examples import settings
from examples.multi_worker import train

_WORKDIR = settings.define_flags(train.Config, workdir="runs/multi_worker")


def main(argv):
  config = settings.config_from_flags(train.Config, argv)
  results = train.train(config)
  workdir = pathlib.Path(_WORKDIR.value)
  workdir.mkdir(parents=True, exist_ok=True)
  np.savez(workdir / f"worker{config.task_index}.npz", **results)


if __name__ == "__main__":
  app.run(main)
