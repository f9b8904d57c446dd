"""What several examples share: the samplers by name, evaluation along training, tables, plots, timers."""

from __future__ import annotations

import csv
import dataclasses
import fractions
import functools
import os
import pathlib
import subprocess
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from examples import settings
import tf_repulsive

# --sampler values: the two uniform baselines (the paper's independent batches; one pass per epoch,
# as shuffle + batch), then the paper's samplers. Dense PDS takes its pi from --dense_pi (default:
# uniform over mingling values).
SAMPLER_NAMES = ("uniform", "epoch_shuffle", "vanilla_pds", "easy_pds", "dense_pds", "anneal_pds")
# The paper's baselines, also accepted by --sampler.
BASELINE_NAMES = ("kdpp", "fast_kdpp", "active_bias")
# Darts in proportion to each element's feature norm (the gradient norm with --space=gradient),
# without and with disks; and Vanilla PDS's inclusion probabilities without its disks.
IMPORTANCE_NAMES = ("importance", "importance_pds", "vanilla_pds_marginals")
ALL_SAMPLER_NAMES = SAMPLER_NAMES + BASELINE_NAMES + IMPORTANCE_NAMES
# Selection in the training step: InfoBatch's epoch pruning on the losses each step records, its
# control pruned at random, RS2's fresh random subsets (the control without losses), and online
# importance sampling (`tf_repulsive.OnlineImportance` on uniform presamples, whose sampler
# `make_sampler` gives). For the examples that train over a step budget through `fitted_model`
# (mnist_deep and its protocol).
ONLINE_IMPORTANCE = "online_importance"
PRUNING_NAMES = ("epoch_pruning", "random_pruning", "rs2")
TRAINING_SAMPLER_NAMES = ALL_SAMPLER_NAMES + PRUNING_NAMES + (ONLINE_IMPORTANCE,)
# The samplers whose scores an irreducible loss (RHO-LOSS) can correct.
_REDUCIBLE = ("importance", "importance_pds", "epoch_pruning")

_RADIUS_HELP = "Disk radius: default (half the median distance), auto, or a number."

# --space values: where the disk samplers measure distances and the importance samplers read
# their scores (the model's spaces through tf_repulsive.ModelSpace). A "_step" space takes the
# features of the trained elements from each training step, and refreshes without a pass over
# the data (ModelSpace(from_training_step=True)).
SPACES = ("input", "embedding", "gradient", "loss", "gradient_step", "loss_step")
_SOURCES = {"embedding": lambda seed: tf_repulsive.EmbeddingFeatures(),
            "gradient": lambda seed: tf_repulsive.GradientFeatures(seed=seed),
            "loss": lambda seed: tf_repulsive.LossFeatures()}


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


def radius_setting(default: str = "default", help: str = _RADIUS_HELP) -> Any:
  """A disk-radius field of a settings dataclass: its flag takes the text `parse_radius` reads."""
  return settings.setting(default, help, parse=parse_radius)


def space_setting() -> Any:
  """The --space field of a settings dataclass (one of `SPACES`)."""
  return settings.setting(
      "input", "Where the disks measure distances and the importance samplers read their score (the feature "
      "norm): the inputs, or the model's embedding, last-layer gradient or loss (tf_repulsive.ModelSpace, "
      "refreshed every --refresh_every steps); gradient_step and loss_step take them from each training step.",
      choices=SPACES)


def mixing_setting() -> Any:
  """The --mixing field of a settings dataclass: the importance samplers' share of uniform darts."""
  return settings.setting(0.2, "Share of uniform darts of the importance samplers.", greater_than=0.0, maximum=1.0)


def refresh_every_setting(default: int) -> Any:
  """The --refresh_every field of a settings dataclass: steps between refreshes of a model space."""
  return settings.setting(default, "Steps between refreshes of the embedding or gradient features.", minimum=1)


def model_space(space: str, model: keras.Model, *, refresh_every: int, workdir: pathlib.Path, seed: int,
                inputs_fn: Callable[[Any], Any] | None = None) -> tf_repulsive.ModelSpace | None:
  """The `ModelSpace` of a --space value (None for "input"), its refreshes saved under `workdir`.

  Args:
    space: one of `SPACES`.
    model: the model being trained.
    refresh_every: steps between refreshes.
    workdir: the run's directory; the refreshes go to its `refreshes/`.
    seed: the seed of the gradient features' projection.
    inputs_fn: the model's inputs from a chunk of the elements' x (`ModelSpace.inputs_fn`).
  """
  if space == "input":
    return None
  from_training_step = space.endswith("_step")
  source = _SOURCES[space.removesuffix("_step")](seed)
  # The last two refreshes kept: enough to resume between two of them.
  return tf_repulsive.ModelSpace(model, source, refresh_every=refresh_every, directory=workdir / "refreshes",
                                 keep_last=2, inputs_fn=inputs_fn, from_training_step=from_training_step)


def fitted_model(model: keras.Model, batcher: tf_repulsive.RepulsiveBatcher,
                 space: tf_repulsive.ModelSpace | None) -> keras.Model:
  """What `fit` trains: `model`, or, when the batcher draws on what the training step records (the
  losses of a pruning sampler, the features of `space` from the training step),
  `tf_repulsive.RecordingModel(model, batcher)` compiled as `model` is (a new optimizer of its config)."""
  from_step = space is not None and space.from_training_step
  if not from_step and not batcher.drawer.learns_from_losses:
    return model
  trainer = tf_repulsive.RecordingModel(model, batcher)
  trainer.compile_from_config(model.get_compile_config())
  return trainer


def make_sampler(name: str, *, neighbors: int = 5, radius: float | str | None = None,
                 dense_pi: Sequence[float] | None = None,
                 target_gap_quantile: float | None = None, mixing: float = 0.2,
                 total_steps: int | None = None, subset_fraction: float = 0.7,
                 irreducible_loss: np.ndarray | None = None) -> tf_repulsive.Sampler:
  """A new sampler instance for a --sampler name.

  Args:
    name: one of `TRAINING_SAMPLER_NAMES`.
    neighbors: K of the mingling index (the paper's appendix uses 5).
    radius: disk radius; None for half the median pairwise distance, "auto" to calibrate it.
    dense_pi: pi of Dense PDS over the K + 1 mingling values; None for uniform.
    target_gap_quantile: for the mingling samplers on regression targets, the quantile of the
      neighbour gaps beyond which a neighbour's target differs; None for class labels.
    mixing: for the importance samplers, the share of uniform darts.
    total_steps: for the pruning samplers, the run's step budget (their schedule ends with it).
    subset_fraction: for RS2, the share of the data in each pass.
    irreducible_loss: for importance, importance_pds and epoch_pruning, `[N]` losses subtracted
      from the scores (RHO-LOSS's reducible loss); None for none.

  Returns:
    The sampler.

  Raises:
    ValueError: for an unknown name, a pruning sampler without `total_steps`, or an
      `irreducible_loss` for a sampler without scores.
  """
  if irreducible_loss is not None and name not in _REDUCIBLE:
    raise ValueError(f"--sampler={name} has no scores an irreducible loss could correct; it applies to "
                     f"{', '.join(_REDUCIBLE)}.")
  if name in ("epoch_pruning", "random_pruning") and total_steps is None:
    raise ValueError(f"--sampler={name} prunes on a schedule of the run's steps: pass total_steps.")
  factories: dict[str, Callable[[], tf_repulsive.Sampler]] = {
      "uniform": tf_repulsive.Uniform,
      "epoch_shuffle": tf_repulsive.EpochShuffle,
      "vanilla_pds": lambda: tf_repulsive.VanillaPDS(radius=radius),
      "easy_pds": lambda: tf_repulsive.EasyPDS(radius=radius, neighbors=neighbors,
                                               target_gap_quantile=target_gap_quantile),
      "dense_pds": lambda: tf_repulsive.DensePDS(
          dense_pi if dense_pi is not None else [1.0] * (neighbors + 1), radius=radius,
          neighbors=neighbors, target_gap_quantile=target_gap_quantile),
      "anneal_pds": lambda: tf_repulsive.AnnealPDS(radius=radius, neighbors=neighbors,
                                                   target_gap_quantile=target_gap_quantile),
      "kdpp": tf_repulsive.KDPP,
      "fast_kdpp": tf_repulsive.FastKDPP,
      "active_bias": tf_repulsive.ActiveBias,
      "importance": lambda: tf_repulsive.Importance(mixing=mixing, irreducible_loss=irreducible_loss),
      "importance_pds": lambda: tf_repulsive.ImportancePDS(radius=radius, mixing=mixing,
                                                           irreducible_loss=irreducible_loss),
      "vanilla_pds_marginals": lambda: tf_repulsive.Marginals(tf_repulsive.VanillaPDS(radius=radius)),
      "epoch_pruning": lambda: tf_repulsive.EpochPruning(total_steps=total_steps, irreducible_loss=irreducible_loss),
      "random_pruning": lambda: tf_repulsive.RandomPruning(total_steps=total_steps),
      "rs2": lambda: tf_repulsive.RS2(fraction=subset_fraction),
      ONLINE_IMPORTANCE: tf_repulsive.Uniform,
  }
  if name not in factories:
    raise ValueError(f"--sampler: unknown sampler {name!r}; choose from {', '.join(TRAINING_SAMPLER_NAMES)}.")
  return factories[name]()


def sampler_callbacks(batcher: tf_repulsive.RepulsiveBatcher, model_inputs: Any = None,
                      dataset: tf.data.Dataset | None = None,
                      log_dir: str | pathlib.Path | None = None) -> list[keras.callbacks.Callback]:
  """The callbacks `fit` needs for `batcher`: the stream's start and the logs, and ActiveBias' history.

  Args:
    batcher: the `repulsive_batch` batcher whose stream feeds `fit`.
    model_inputs: for ActiveBias, the model inputs of the training examples when they are not the
      dataset's first element component (see `tf_repulsive.ActiveBiasCallback`).
    dataset: what `fit` trains on, when it transforms the batcher's stream (checked now).
    log_dir: the TensorBoard directory of the run, for the detail of the sampler's logs.

  Returns:
    The callbacks, to go before any that log (they add the sampler's values to the epoch logs).
  """
  # ActiveBiasCallback would start the stream by itself; AnnealingCallback stays for every sampler
  # so that all of them log the same values (the fallback count).
  callbacks = [tf_repulsive.AnnealingCallback(batcher, dataset=dataset, log_dir=log_dir)]
  if isinstance(batcher.sampler, tf_repulsive.ActiveBias):
    callbacks.append(tf_repulsive.ActiveBiasCallback(batcher, inputs=model_inputs))
  return callbacks


@functools.cache
def checkout_commit() -> str:
  """The commit of the checkout these examples run from, "+dirty" with uncommitted changes; "unknown" without git."""
  root = pathlib.Path(__file__).resolve().parents[1]
  try:
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True,
                            check=True, timeout=30).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                             capture_output=True, text=True, check=True, timeout=30).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return "unknown"
  return commit + ("+dirty" if changed else "")


def machine_cpu_seconds() -> float:
  """The CPU seconds every process of the machine has used since boot, with the hypervisor's steal.

  Linux's /proc/stat: its first line counts every CPU's user, nice, system, irq, softirq and steal
  time in clock ticks. Steal counts because a stolen core slows a run as much as another job does.
  0.0 where there is no /proc/stat.
  """
  try:
    with open("/proc/stat") as handle:
      ticks = [int(value) for value in handle.readline().split()[1:]]
  except OSError:
    return 0.0
  user, nice, system, _, _, irq, softirq, steal = (ticks + [0] * 8)[:8]
  return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Clocks:
  """The three clocks a run's evaluation rows count from, read at one instant.

  Attributes:
    wall: `time.perf_counter()`.
    cpu: this process's CPU time (all its threads).
    others: the CPU time the rest of the machine has used (`machine_cpu_seconds` less this process's).
  """

  wall: float
  cpu: float
  others: float

  @classmethod
  def now(cls) -> Clocks:
    """The clocks as they read now."""
    cpu = time.process_time()
    return cls(wall=time.perf_counter(), cpu=cpu, others=machine_cpu_seconds() - cpu)

  def __sub__(self, other: Clocks) -> Clocks:
    return Clocks(self.wall - other.wall, self.cpu - other.cpu, self.others - other.others)

  def __add__(self, other: Clocks) -> Clocks:
    return Clocks(self.wall + other.wall, self.cpu + other.cpu, self.others + other.others)


def read_evaluations(path: str | pathlib.Path) -> list[dict[str, Any]]:
  """The rows of a `PeriodicEvaluation` CSV: every column a float but "commit", a string."""
  with pathlib.Path(path).open(newline="") as handle:
    return [{name: value if name == "commit" else float(value) for name, value in row.items()}
            for row in csv.DictReader(handle)]


class PeriodicEvaluation(keras.callbacks.Callback):
  """Evaluates every `every_steps` optimizer steps; appends (step, train seconds, metrics) to a CSV and TensorBoard.

  Keeps the curve in `self.history` as a list of dicts with "step", "train_seconds",
  "cpu_seconds", "other_cpu_seconds", "load_average", "commit", the model's metrics and
  "<prefix>_examples", the number of elements evaluated (so that errors compare as counts of
  mistakes, `error_at_most`). "train_seconds" is the wall-clock from `started` (else from `fit`'s
  start) to the evaluation, less the time spent evaluating: training with everything its callbacks
  do (a batcher's feature refreshes). "cpu_seconds" is the process's CPU time (all its threads)
  over the same span, less the evaluations'. "other_cpu_seconds" is what the rest of the machine
  used over that span: `machine_cpu_seconds` less this process's. The machine's count is sampled
  by clock tick, the process's is exact, so the difference is off by up to about 2% of the
  process's CPU time, either way. "load_average" is the machine's 1-minute load average at the
  evaluation; it counts this process's own threads too. "commit" is the checkout's `git` commit,
  "+dirty" with uncommitted changes ("unknown" outside a checkout).
  """

  def __init__(self, data: tf.data.Dataset, every_steps: int, csv_path: str | pathlib.Path | None,
               log_dir: str | pathlib.Path | None = None, prefix: str = "test", started: Clocks | None = None,
               more: Mapping[str, tf.data.Dataset] | None = None):
    """Args:
      data: batched evaluation dataset.
      every_steps: evaluation interval in optimizer steps (also evaluated at the end of training).
      csv_path: CSV file to write (header step,train_seconds,<prefix>_<metric>...), or None.
      log_dir: TensorBoard directory for the scalars, or None.
      prefix: name prefix of the logged metrics.
      started: the `Clocks` the rows count from (say, read before the batcher is built, to
        count its build); None: when `fit` starts.
      more: further batched datasets evaluated at the same steps (e.g. a validation set), by the
        prefix of their metrics; their time is left out of the train seconds too.
    """
    super().__init__()
    self._data = {prefix: data, **(more or {})}
    self._every = every_steps
    self._csv_path = None if csv_path is None else pathlib.Path(csv_path)
    self._writer = None if log_dir is None else tf.summary.create_file_writer(str(log_dir))
    self._started = started
    self._evaluating = Clocks(0.0, 0.0, 0.0)
    # The number of elements of each dataset, counted at the first evaluation.
    self._examples: dict[str, int] = {}
    self.history: list[dict[str, float]] = []

  def _step(self) -> int:
    return int(np.asarray(self.model.optimizer.iterations))

  def _evaluate(self):
    step = self._step()
    if self.history and self.history[-1]["step"] == step:
      return
    began = Clocks.now()
    assert self._started is not None  # set when training begins
    trained = began - self._started - self._evaluating
    row = {"step": step, "train_seconds": trained.wall, "cpu_seconds": trained.cpu, "other_cpu_seconds": trained.others,
           "load_average": os.getloadavg()[0], "commit": checkout_commit()}
    for prefix, data in self._data.items():
      results = self.model.evaluate(data, verbose=0, return_dict=True)
      row.update({f"{prefix}_{name}": float(value) for name, value in results.items()})
      if prefix not in self._examples:
        self._examples[prefix] = sum(int(tf.shape(tf.nest.flatten(batch)[0])[0]) for batch in data)
      row[f"{prefix}_examples"] = self._examples[prefix]
    self._evaluating += Clocks.now() - began
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
          if name not in ("step", "commit"):
            tf.summary.scalar(name, value)
      self._writer.flush()

  def on_train_begin(self, logs=None):
    if self._started is None:
      self._started = Clocks.now()
    self._evaluate()

  def on_train_batch_end(self, batch, logs=None):
    if self._step() % self._every == 0:
      self._evaluate()

  def on_train_end(self, logs=None):
    self._evaluate()


def with_errors(row: Mapping[str, float]) -> dict[str, float]:
  """An evaluation row with "<prefix>_error" = 1 - "<prefix>_accuracy" for each accuracy in it."""
  errors = {f"{name[:-len('accuracy')]}error": 1.0 - value for name, value in row.items()
            if name.endswith("_accuracy")}
  return {**row, **errors}


def error_at_most(row: Mapping[str, float], target_error: float, prefix: str = "test") -> bool:
  """Whether the row's `<prefix>` error is at most `target_error` percent, compared as counts of mistakes.

  With "<prefix>_examples" in the row (`PeriodicEvaluation` records it), the mistakes are
  round(error × examples), an integer, and the target is exactly `target_error` % of the
  examples: an accuracy of exactly 95% reaches 5% error, whatever float32 made of it. A row
  without the count (curves recorded before it was) compares percentages with a tolerance of
  1e-4 points: above float32's rounding of an accuracy, below the 1e-3 points between two
  mistakes of a test set of up to 100,000 examples.
  """
  error = row[f"{prefix}_error"]
  examples = row.get(f"{prefix}_examples")
  if examples is None or not np.isfinite(examples):
    return 100 * error <= round(target_error, 9) + 1e-4
  mistakes = round(error * examples)
  # (Rounded to 9 decimals: a target computed as 100 * (1 - 0.9) is 10 points, not 9.999999999999998.)
  return 100 * mistakes <= fractions.Fraction(str(round(target_error, 9))) * round(examples)


def mean_std(values: Sequence[float] | np.ndarray, ddof: int = 1) -> tuple[float, float]:
  """Mean and standard deviation (ddof=1: of a sample, e.g. over seeds; 0 for a single value)."""
  values = np.asarray(values, dtype=np.float64)
  return float(values.mean()), float(values.std(ddof=ddof)) if values.size > ddof else 0.0


def mean_std_text(values: Sequence[float] | np.ndarray, digits: int = 4, ddof: int = 1) -> str:
  """The text `mean ± std` of `values`, with `digits` decimals (see `mean_std`)."""
  mean, std = mean_std(values, ddof)
  return f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  """A markdown table of string cells."""
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def pyplot() -> Any:
  """matplotlib's pyplot on the file-only Agg backend; imported here, when a plot is written."""
  import matplotlib
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt
  return plt


def plot_curve(steps: Sequence[int], values: Sequence[float], path: str | pathlib.Path, ylabel: str,
               title: str, yscale: str = "linear") -> None:
  """One metric against the training step, as a PNG."""
  plt = pyplot()
  figure, axis = plt.subplots(figsize=(6, 4))
  axis.plot(steps, values, marker=".")
  axis.set(xlabel="training step", ylabel=ylabel, title=title, yscale=yscale)
  axis.grid(True, which="both", alpha=0.3)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def plot_mean_curves(curves: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], path: str | pathlib.Path,
                     ylabel: str, title: str, yscale: str = "linear") -> None:
  """Mean curves over seeds, shaded ± one standard deviation, as a PNG.

  Args:
    curves: legend label -> (training steps, mean, std), one entry per sampler.
    path: the PNG.
    ylabel: the metric.
    title: the figure title.
    yscale: "linear" or "log".
  """
  plt = pyplot()
  figure, axis = plt.subplots(figsize=(7, 4.5))
  for label, (steps, mean, std) in curves.items():
    axis.plot(steps, mean, label=label)
    axis.fill_between(steps, mean - std, mean + std, alpha=0.15)
  axis.set(xlabel="training step", ylabel=ylabel, title=title, yscale=yscale)
  axis.grid(True, which="both", alpha=0.3)
  axis.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  plt.close(figure)


def seconds_per_element(iterator: Iterator[Any], count: int) -> tuple[float, float]:
  """Wall and process-CPU seconds per element over the next `count` elements of `iterator`."""
  wall, cpu = time.perf_counter(), time.process_time()
  for _ in range(count):
    next(iterator)
  return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count


def flowers_like_features(seed: int, label_weight: float, num_points: int = 8189,
                          feature_dim: int = 4096, num_classes: int = 102) -> np.ndarray:
  """The paper's Table 1 setting (Oxford Flowers): `[num_points, feature_dim + num_classes]` float32.

  Clustered non-negative unit-norm "off-the-shelf" features, weighted 1 - `label_weight`, with the
  one-hot label appended, weighted `label_weight`, as in the paper's appendix.
  """
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, num_classes, num_points)
  centers = rng.gamma(0.5, 1.0, size=(num_classes, feature_dim))
  images = np.maximum(centers[labels] + rng.normal(0.0, 1.0, size=(num_points, feature_dim)), 0.0)
  images /= np.linalg.norm(images, axis=1, keepdims=True)
  one_hot = np.eye(num_classes)[labels]
  return np.concatenate([(1 - label_weight) * images, label_weight * one_hot], axis=1).astype(np.float32)
