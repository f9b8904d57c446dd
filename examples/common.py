"""Shared pieces of the example binaries: sampler choice and evaluation along training."""

from __future__ import annotations

import csv
import pathlib
import sys
from typing import Any, Callable, Sequence

from absl import app
from absl import flags
import keras
import numpy as np
import tensorflow as tf

import tf_repulsive

# --sampler values: the two uniform baselines (the paper's independent batches; one pass per epoch,
# as shuffle + batch), then the paper's samplers. Dense PDS takes its pi from --dense_pi (default:
# uniform over mingling values).
SAMPLER_NAMES = ("uniform", "epoch_shuffle", "vanilla_pds", "easy_pds", "dense_pds", "anneal_pds")
# The paper's baselines, also accepted by --sampler.
BASELINE_NAMES = ("kdpp", "fast_kdpp", "active_bias")
ALL_SAMPLER_NAMES = SAMPLER_NAMES + BASELINE_NAMES

_HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull")


def run(main: Callable[[list[str]], Any], flag_values: flags.FlagValues) -> None:
  """`app.run` for a binary whose flags live in its own `FlagValues`.

  Each example keeps its flags out of absl's global registry so that several examples can be
  imported into one process (the test suite) without duplicate-flag errors.
  """

  def parse(argv: list[str]) -> list[str]:
    # absl's own help flags would list only the global registry.
    if any(arg in _HELP_FLAGS for arg in argv[1:]):
      print((sys.modules["__main__"].__doc__ or "").strip() + "\n")
      print(f"flags of {pathlib.Path(argv[0]).name}:\n{flag_values.get_help(include_special_flags=False)}")
      if "--helpfull" in argv[1:]:
        print(f"\nabsl flags:\n{flags.FLAGS.get_help()}")
      sys.exit(0)
    try:
      # The binary's own flags first; absl's global ones (--verbosity, --helpfull ...) get the
      # rest and reject anything unknown.
      return flags.FLAGS(flag_values(argv, known_only=True))
    except flags.Error as error:
      sys.exit(f"FATAL Flags parsing error: {error}")

  app.run(main, flags_parser=parse)


def parse_radius(text: str) -> float | str | None:
  """A --radius value: "default" (None: half the median distance), "auto", or a number > 0."""
  if text in ("default", "auto"):
    return None if text == "default" else text
  try:
    radius = float(text)
  except ValueError:
    radius = float("nan")
  if not radius > 0:
    raise ValueError(f"--radius must be 'default', 'auto' or a number > 0; got {text!r}.")
  return radius


def make_sampler(name: str, *, neighbors: int = 5, radius: float | str | None = None,
                 dense_pi: Sequence[float] | None = None) -> tf_repulsive.Sampler:
  """A new sampler instance for a --sampler name.

  Args:
    name: one of `ALL_SAMPLER_NAMES`.
    neighbors: K of the mingling index (the paper's appendix uses 5).
    radius: disk radius; None for half the median pairwise distance, "auto" to calibrate it.
    dense_pi: pi of Dense PDS over the K + 1 mingling values; None for uniform.

  Returns:
    The sampler.

  Raises:
    ValueError: for an unknown name.
  """
  factories: dict[str, Callable[[], tf_repulsive.Sampler]] = {
      "uniform": tf_repulsive.Uniform,
      "epoch_shuffle": tf_repulsive.EpochShuffle,
      "vanilla_pds": lambda: tf_repulsive.VanillaPDS(radius=radius),
      "easy_pds": lambda: tf_repulsive.EasyPDS(radius=radius, neighbors=neighbors),
      "dense_pds": lambda: tf_repulsive.DensePDS(
          dense_pi if dense_pi is not None else [1.0] * (neighbors + 1), radius=radius,
          neighbors=neighbors),
      "anneal_pds": lambda: tf_repulsive.AnnealPDS(radius=radius, neighbors=neighbors),
      "kdpp": tf_repulsive.KDPP,
      "fast_kdpp": tf_repulsive.FastKDPP,
      "active_bias": tf_repulsive.ActiveBias,
  }
  if name not in factories:
    raise ValueError(f"--sampler: unknown sampler {name!r}; choose from {', '.join(ALL_SAMPLER_NAMES)}.")
  return factories[name]()


def sampler_callbacks(batcher: tf_repulsive.RepulsiveBatcher,
                      model_inputs: Any = None) -> list[keras.callbacks.Callback]:
  """The callbacks `fit` needs for `batcher`: the stream's start and the logs, and ActiveBias' history.

  Args:
    batcher: the `repulsive_batch` batcher whose stream feeds `fit`.
    model_inputs: for ActiveBias, the model inputs of the training examples when they are not the
      dataset's first element component (see `tf_repulsive.ActiveBiasCallback`).

  Returns:
    The callbacks, to go before any that log (they add the sampler's values to the epoch logs).
  """
  # ActiveBiasCallback would start the stream by itself; AnnealingCallback stays for every sampler
  # so that all of them log the same values (the fallback count).
  callbacks = [tf_repulsive.AnnealingCallback(batcher)]
  if isinstance(batcher.sampler, tf_repulsive.ActiveBias):
    callbacks.append(tf_repulsive.ActiveBiasCallback(batcher, inputs=model_inputs))
  return callbacks


class PeriodicEvaluation(keras.callbacks.Callback):
  """Evaluates every `every_steps` optimizer steps; appends (step, metrics) to a CSV and TensorBoard.

  Keeps the curve in `self.history` as a list of dicts with "step" and the model's metrics.
  """

  def __init__(self, data: tf.data.Dataset, every_steps: int, csv_path: str | pathlib.Path | None,
               log_dir: str | pathlib.Path | None = None, prefix: str = "test"):
    """Args:
      data: batched evaluation dataset.
      every_steps: evaluation interval in optimizer steps (also evaluated at the end of training).
      csv_path: CSV file to write (header step,<prefix>_<metric>...), or None.
      log_dir: TensorBoard directory for the scalars, or None.
      prefix: name prefix of the logged metrics.
    """
    super().__init__()
    self._data = data
    self._every = every_steps
    self._csv_path = None if csv_path is None else pathlib.Path(csv_path)
    self._writer = None if log_dir is None else tf.summary.create_file_writer(str(log_dir))
    self._prefix = prefix
    self.history: list[dict[str, float]] = []

  def _step(self) -> int:
    return int(np.asarray(self.model.optimizer.iterations))

  def _evaluate(self):
    step = self._step()
    if self.history and self.history[-1]["step"] == step:
      return
    results = self.model.evaluate(self._data, verbose=0, return_dict=True)
    row = {"step": step, **{f"{self._prefix}_{name}": float(value) for name, value in results.items()}}
    self.history.append(row)
    if self._csv_path is not None:
      self._csv_path.parent.mkdir(parents=True, exist_ok=True)
      new_file = not self._csv_path.exists() or len(self.history) == 1
      with self._csv_path.open("w" if new_file else "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        if new_file:
          writer.writeheader()
        writer.writerow(row)
    if self._writer is not None:
      with self._writer.as_default(step=step):
        for name, value in row.items():
          if name != "step":
            tf.summary.scalar(name, value)
      self._writer.flush()

  def on_train_begin(self, logs=None):
    self._evaluate()

  def on_train_batch_end(self, batch, logs=None):
    if self._step() % self._every == 0:
      self._evaluate()

  def on_train_end(self, logs=None):
    self._evaluate()
