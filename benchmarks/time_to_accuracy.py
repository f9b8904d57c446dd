"""Wall-clock to a target test error on the Deep-MNIST digits runs, and the sampler's share of a step.

  .venv/bin/python -m benchmarks.time_to_accuracy \
      --runs=uniform=runs/mnist_deep_digits/uniform,vanilla_pds@auto=runs/digits_auto/vanilla_pds \
      --target_error=0.03

Part 1 measures, for every sampler named in --runs, on the setting of
configs/mnist_deep_digits.flags (628 digits at 28x28, k = 50, the Deep-MNIST CNN): the draw alone
(ms per batch of the `repulsive_batch` stream) and a training step of `fit` fed by that stream
(ms per step, after a warm-up), all in this run. Part 2 reads each run directory's seeds
(`seed_*/eval.csv`, test accuracy every 50 steps), takes per seed the first evaluated step whose test
error is at most --target_error, and converts it to seconds with that sampler's step time.
A sampler written `name@radius` uses that --radius ("auto" or a number).
"""

from __future__ import annotations

import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from examples import common  # noqa: E402
from examples.mnist_deep import train as mnist_deep  # noqa: E402
import tf_repulsive  # noqa: E402

_RUNS = flags.DEFINE_list("runs", None, "sampler[@radius]=run directory holding seed_*/eval.csv, ...",
                          required=True)
_TARGET_ERROR = flags.DEFINE_float("target_error", 0.03, "Test error to reach.")
_DRAWS = flags.DEFINE_integer("draws", 1000, "Batches timed for the draw alone.")
_STEPS = flags.DEFINE_integer("steps", 300, "Training steps timed (after 50 of warm-up).")


def _sampler(spec: str) -> tf_repulsive.Sampler:
  name, _, radius = spec.partition("@")
  return common.make_sampler(name, radius=common.parse_radius(radius or "default"))


def step_costs(spec: str, x_train: np.ndarray, y_train: np.ndarray) -> tuple[float, float]:
  """(ms per drawn batch, ms per training step) of one sampler."""
  def stream():
    # A stream of a fixed start step begins once per process: the draw's stream and the two fits
    # (warm-up, timed) each get their own.
    batcher = tf_repulsive.repulsive_batch(50, _sampler(spec), seed=0, start_step=0,
                                           options=tf_repulsive.BatcherOptions(verbose=False))
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).apply(batcher)

  iterator = iter(stream())
  next(iterator)
  start = time.perf_counter()
  for _ in range(_DRAWS.value):
    next(iterator)
  draw = (time.perf_counter() - start) / _DRAWS.value * 1e3

  keras.utils.set_random_seed(0)
  model = mnist_deep.deep_mnist_model()
  model.compile(optimizer=keras.optimizers.Adam(1e-4),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(stream(), steps_per_epoch=50, epochs=1, verbose=0)
  batches = stream()
  start = time.perf_counter()
  model.fit(batches, steps_per_epoch=_STEPS.value, epochs=1, verbose=0)
  return draw, (time.perf_counter() - start) / _STEPS.value * 1e3


def steps_to_target(run_dir: pathlib.Path, target_error: float) -> list[int | None]:
  """Per seed, the first evaluated step with test error <= target (None: never)."""
  result = []
  for seed_dir in sorted(run_dir.glob("seed_*")):
    reached = [int(row["step"]) for row in common.read_evaluations(seed_dir / "eval.csv")
               if common.error_at_most(common.with_errors(row), 100 * target_error)]
    result.append(reached[0] if reached else None)
  return result


def main(argv):
  del argv
  x_train, y_train, _, _ = mnist_deep.load_digits_28x28(0.5)
  runs = dict(item.split("=", 1) for item in _RUNS.value)
  costs = {spec: step_costs(spec, x_train, y_train) for spec in runs}
  print("| sampler | draw ms / batch | train ms / step | draw / step | seeds reaching "
        f"{_TARGET_ERROR.value:.1%} error | steps to it | seconds to it |")
  print("|---|---|---|---|---|---|---|")
  for spec, run_dir in runs.items():
    draw, step = costs[spec]
    steps = steps_to_target(pathlib.Path(run_dir), _TARGET_ERROR.value)
    reached = np.array([s for s in steps if s is not None], float)
    seconds = reached * step / 1e3
    def text(values, fmt):
      return (f"{values.mean():{fmt}} ± {values.std(ddof=1):{fmt}}" if len(values) > 1 else "—")
    print(f"| {spec} | {draw:.2f} | {step:.1f} | {draw / step:.1%} | {len(reached)}/{len(steps)} | "
          f"{text(reached, '.0f')} | {text(seconds, '.1f')} |")


if __name__ == "__main__":
  app.run(main)
