r"""The paper's synthetic experiment (its figure 4), made quantitative, and its regression analogue.

Two classes of 2-D points, uniform in [-1, 1]², separated by a sine curve. For every sampler and
repetition r: draw ONE mini-batch with `repulsive_batch` (seed r), train a network with one hidden
layer of five tanh units on those points only (full-batch Adam), and measure its boundary accuracy:
the fraction of a dense grid over the domain that it classifies like the true boundary does.

`--task=regression`: the target is the class (0 or 1) plus Gaussian noise of scale
`--target_noise`, a step function whose step is the sine curve; the network regresses it (mean
squared error) and a grid cell counts as right when the network's output is on the true side of
0.5. The mingling samplers count a neighbour as differing when its target is farther than the
`--target_gap_quantile` quantile of all neighbour gaps.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import pathlib
from typing import TYPE_CHECKING, Sequence

import keras
import numpy as np
import tensorflow as tf
import tqdm

from examples import common
from examples import settings
import tf_repulsive

if TYPE_CHECKING:
  from matplotlib import axes as mpl_axes
  from matplotlib import figure as mpl_figure

# The true boundary x1 = AMPLITUDE * sin(pi * WAVES * x0) over x0 in [-1, 1]: two full waves, as
# in the paper's figure. With one wave, 30 uniform points already pin it down (about 0.91 grid
# accuracy), leaving little for the samplers to differ in; five tanh units still fit two waves
# (about 0.99 when trained on all points).
AMPLITUDE = 0.5
WAVES = 2.0
# Batch points within this vertical distance of the true boundary count as "near the boundary"
# in the results table: the points the mingling-index samplers are meant to favour.
NEAR_BOUNDARY = 0.1


@dataclasses.dataclass(frozen=True)
class Config(settings.Settings):
  """One run of the experiment."""

  samplers: tuple[str, ...] = settings.setting(common.SAMPLER_NAMES, "Samplers to compare.",
                                               choices=common.ALL_SAMPLER_NAMES)
  repetitions: int = settings.setting(30, "Repetitions per sampler; repetition r draws its batch with seed r.",
                                      minimum=1)
  batch_size: int = settings.setting(30, "Size of the one mini-batch.", minimum=1)
  num_points: int = settings.setting(3000, "Points in the data set.", minimum=1)
  data_seed: int = settings.setting(0, "Seed of the data points.")
  radius: float | str | None = common.radius_setting(
      "0.2",
      "Disk radius of the PDS samplers, in data units (the domain is [-1, 1]²), or 'auto' or "
      "'default'. The library default, half the median distance (0.51 here), fits only about 13 "
      "darts: the other 17 points of a 30-point batch would be the uniform fallback fill. At 0.2 no "
      "sampler needs the fill.")
  task: str = settings.setting(
      "classification", "classification: 0/1 labels and cross-entropy (the paper's experiment); regression: "
      "the 0/1 step plus noise as a real-valued target and mean squared error.",
      choices=("classification", "regression"))
  target_noise: float = settings.setting(0.1, "Regression: the scale of the Gaussian noise on the step.", minimum=0.0)
  target_gap_quantile: float = settings.setting(
      0.9, "Regression: the mingling samplers' quantile of the neighbour target gaps beyond which a "
      "neighbour counts as differing.", greater_than=0.0, maximum=0.999)
  hidden_units: int = settings.setting(5, "Hidden tanh units (paper: 5).", minimum=1)
  train_steps: int = settings.setting(2000, "Full-batch Adam steps per network.", minimum=1)
  learning_rate: float = settings.setting(0.02, "Adam learning rate.", greater_than=0.0)
  grid_size: int = settings.setting(200, "Side of the evaluation grid.", minimum=1)

  def __post_init__(self):
    super().__post_init__()
    if self.num_points < self.batch_size:
      raise ValueError(f"--num_points ({self.num_points}) must be >= --batch_size ({self.batch_size}).")


def boundary_height(x0: np.ndarray) -> np.ndarray:
  """The true decision boundary: x1 on the sine curve above `x0`."""
  return AMPLITUDE * np.sin(np.pi * WAVES * x0)


def true_labels(points: np.ndarray) -> np.ndarray:
  """Class 1 above the sine boundary, class 0 below (int64, one per row of `[n, 2]` points)."""
  return (points[:, 1] > boundary_height(points[:, 0])).astype(np.int64)


def make_data(num_points: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """`num_points` float32 points uniform in [-1, 1]² and their int64 labels from the sine boundary."""
  points = np.random.default_rng(seed).uniform(-1.0, 1.0, size=(num_points, 2)).astype(np.float32)
  return points, true_labels(points)


def regression_targets(labels: np.ndarray, noise: float, seed: int) -> np.ndarray:
  """float32 targets: the 0/1 `labels` plus Gaussian noise of scale `noise` (seeded by `seed`)."""
  rng = np.random.default_rng([seed, 1])
  return (labels + noise * rng.standard_normal(labels.shape)).astype(np.float32)


def grid_points(grid_size: int) -> np.ndarray:
  """Centres of a `grid_size` x `grid_size` grid of equal cells over [-1, 1]², row-major in x1."""
  axis = (np.arange(grid_size) + 0.5) / grid_size * 2.0 - 1.0
  x0, x1 = np.meshgrid(axis, axis)
  return np.stack([x0.ravel(), x1.ravel()], axis=1).astype(np.float32)


def draw_batch(points: np.ndarray, labels: np.ndarray, sampler: tf_repulsive.Sampler, batch_size: int,
               seed: int) -> tuple[np.ndarray, np.ndarray]:
  """The first mini-batch the `repulsive_batch` pipeline of `sampler` yields: one point-process draw.

  The batch is the draw of step 0 (`start_step=0`: no training loop starts the stream here).
  """
  batches = tf.data.Dataset.from_tensor_slices((points, labels)).apply(
      tf_repulsive.repulsive_batch(batch_size, sampler, seed=seed, start_step=0))
  batch_points, batch_labels = next(batches.as_numpy_iterator())
  return batch_points, batch_labels


def init_networks(seeds: Sequence[int], hidden_units: int) -> list[tf.Variable]:
  """Glorot-uniform weights and zero biases of one 2-`hidden_units`-1 network per seed, stacked.

  Returns [hidden kernel [R, 2, H], hidden bias [R, H], output kernel [R, H], output bias [R]].
  Network r depends on seeds[r] only, so every sampler starts repetition r from the same network.
  """
  hidden, output = [], []
  for seed in seeds:
    rng = np.random.default_rng(seed)
    hidden.append(rng.uniform(-1, 1, (2, hidden_units)) * np.sqrt(6 / (2 + hidden_units)))
    output.append(rng.uniform(-1, 1, hidden_units) * np.sqrt(6 / (hidden_units + 1)))
  count = len(seeds)
  return [tf.Variable(np.asarray(hidden), dtype=tf.float32),
          tf.Variable(tf.zeros([count, hidden_units])),
          tf.Variable(np.asarray(output), dtype=tf.float32),
          tf.Variable(tf.zeros([count]))]


def network_logits(params: Sequence[tf.Variable], points: tf.Tensor) -> tf.Tensor:
  """`[R, n]` logits of class 1: network r applied to its own points `points[r]` (`[R, n, 2]`).

  The hidden units are tanh: the learned boundaries are smooth, like the sine, and no unit can
  die. A ReLU unit that is inactive on all 30 points gets no gradient and is lost, a fifth of
  the capacity; even trained on 2000 points, five ReLU units reach only about 0.86 grid accuracy
  on two waves, five tanh units 0.99.
  """
  hidden_kernel, hidden_bias, output_kernel, output_bias = params
  hidden = tf.tanh(tf.einsum("rnd,rdh->rnh", points, hidden_kernel) + hidden_bias[:, None, :])
  return tf.einsum("rnh,rh->rn", hidden, output_kernel) + output_bias[:, None]


def fit_networks(points: np.ndarray, labels: np.ndarray, seeds: Sequence[int], hidden_units: int,
                 steps: int, learning_rate: float, regression: bool = False) -> list[tf.Variable]:
  """Trains network r full-batch on its own batch (`points[r]`, `labels[r]`) for `steps` Adam steps.

  All R networks train together in one graph loop. The loss is the sum of their mean losses, so
  each network's gradient is that of its own loss, and Adam updates every weight from its own
  gradient alone: R independent full-batch trainings, at the cost of one.

  Args:
    points: `[R, k, 2]` float32 batches.
    labels: `[R, k]` 0/1 labels, or real-valued targets for `regression`.
    seeds: R initialisation seeds (see `init_networks`).
    hidden_units: width of the hidden layer.
    steps: Adam steps.
    learning_rate: Adam learning rate.
    regression: whether the loss is the squared error of the output (else the cross-entropy of
      the output as the logit of class 1).

  Returns:
    The trained parameters, as `init_networks` lays them out.
  """
  params = init_networks(seeds, hidden_units)
  optimizer = keras.optimizers.Adam(learning_rate)
  points = tf.constant(points, tf.float32)
  targets = tf.constant(labels, tf.float32)

  @tf.function
  def train():
    for _ in tf.range(steps):
      with tf.GradientTape() as tape:
        outputs = network_logits(params, points)
        losses = (tf.square(outputs - targets) if regression
                  else tf.nn.sigmoid_cross_entropy_with_logits(targets, outputs))
        loss = tf.reduce_sum(tf.reduce_mean(losses, axis=1))
      optimizer.apply_gradients(zip(tape.gradient(loss, params), params))

  train()
  return params


def grid_logits(params: Sequence[tf.Variable], grid: np.ndarray) -> np.ndarray:
  """`[R, G]` logits of every network on the `[G, 2]` grid."""
  count = int(params[0].shape[0])
  return network_logits(params, tf.tile(tf.constant(grid)[None], [count, 1, 1])).numpy()


def plot_sampler(axis: mpl_axes.Axes, points: np.ndarray, labels: np.ndarray, grid_size: int,
                 logits: np.ndarray, batch: np.ndarray, title: str) -> None:
  """One panel of the paper's figure 4 on a matplotlib axis.

  Args:
    axis: the axis to draw on.
    points: `[N, 2]` data points (light green: class 1, light red: class 0).
    labels: `[N]` their labels.
    grid_size: side of the grid `logits` were evaluated on (`grid_points`).
    logits: `[R, grid_size²]`: each repetition's learned boundary is its zero contour.
    batch: `[k, 2]` one sampled mini-batch, drawn in blue.
    title: panel title.
  """
  axis.scatter(*points[labels == 1].T, s=2, color="#9bd89b", linewidths=0)
  axis.scatter(*points[labels == 0].T, s=2, color="#f2a1a1", linewidths=0)
  grid = grid_points(grid_size)
  x0, x1 = grid[:, 0].reshape(grid_size, grid_size), grid[:, 1].reshape(grid_size, grid_size)
  for repetition_logits in logits:
    axis.contour(x0, x1, repetition_logits.reshape(grid_size, grid_size), levels=[0.0],
                 colors="black", alpha=0.25, linewidths=0.8)
  curve = np.linspace(-1.0, 1.0, 400)
  axis.plot(curve, boundary_height(curve), color="#ffd400", linewidth=2.5)
  axis.scatter(*batch.T, s=16, color="#1f3cff", edgecolors="white", linewidths=0.4, zorder=3)
  axis.set(xlim=(-1, 1), ylim=(-1, 1), aspect="equal", xticks=[], yticks=[])
  axis.set_title(title, fontsize=10)


def results_table(accuracies: dict[str, np.ndarray], near_shares: dict[str, np.ndarray],
                  data_near_share: float) -> tuple[list[str], list[list[str]]]:
  """Header and rows (formatted strings, one row per sampler) of the results table."""
  paired = "uniform" in accuracies
  header = (["sampler", "boundary accuracy (mean ± std)"] + ["vs uniform (paired mean ± s.e.)"] * paired
            + [f"batch near boundary (data: {data_near_share:.0%})"])
  rows = []
  for name, accuracy in accuracies.items():
    row = [name, common.mean_std_text(accuracy)]
    if paired:
      # Repetition r starts every sampler from the same network: the difference is paired.
      mean, std = common.mean_std(accuracy - accuracies["uniform"])
      row.append("—" if name == "uniform" else f"{mean:+.4f} ± {std / np.sqrt(accuracy.size):.4f}")
    rows.append(row + [f"{near_shares[name].mean():.0%}"])
  return header, rows


def near_boundary(points: np.ndarray) -> np.ndarray:
  """Whether each point (`[..., 2]`) lies within `NEAR_BOUNDARY` vertically of the true boundary."""
  return np.abs(points[..., 1] - boundary_height(points[..., 0])) < NEAR_BOUNDARY


def train_and_evaluate(config: Config, workdir: str | pathlib.Path) -> dict[str, np.ndarray]:
  """Runs every sampler for `config.repetitions` repetitions; writes figures and tables.

  Args:
    config: the run.
    workdir: where `synthetic_<sampler>.png` per sampler (data, true boundary in yellow, the
      learned boundaries in transparent black, repetition 0's batch in blue),
      `synthetic_boundaries.png` with all samplers side by side, `results.md` / `results.csv`
      (accuracy mean ± std per sampler) and `repetitions.csv` (every repetition) go.

  Returns:
    Boundary accuracy (fraction of grid cells classified like the true boundary) per sampler:
    `[repetitions]` float64 arrays, in `config.samplers` order.
  """
  points, labels = make_data(config.num_points, config.data_seed)
  regression = config.task == "regression"
  # What the networks learn from: the labels, or the noisy step (for every sampler the same).
  targets = regression_targets(labels, config.target_noise, config.data_seed) if regression else labels
  seeds = list(range(config.repetitions))
  batch_points, batch_labels = [], []
  for name in config.samplers:
    sampler = common.make_sampler(name, radius=config.radius,
                                  target_gap_quantile=config.target_gap_quantile if regression else None)
    for seed in tqdm.tqdm(seeds, desc=f"{name:<12} batches", unit="rep"):
      batch = draw_batch(points, targets, sampler, config.batch_size, seed)
      batch_points.append(batch[0])
      batch_labels.append(batch[1])
  # One training for all samplers and repetitions; repetition r of every sampler starts from the
  # same network, so samplers are compared on equal initialisations.
  params = fit_networks(np.stack(batch_points), np.stack(batch_labels), seeds * len(config.samplers),
                        config.hidden_units, config.train_steps, config.learning_rate, regression)
  grid = grid_points(config.grid_size)
  shape = (len(config.samplers), config.repetitions)
  # Centred so that the learned boundary is the zero contour: a regression output of 0.5 is the
  # middle of the step.
  logits = grid_logits(params, grid).reshape(*shape, -1) - (0.5 if regression else 0.0)
  batch_points = np.stack(batch_points).reshape(*shape, config.batch_size, 2)
  accuracies = dict(zip(config.samplers, ((logits > 0) == true_labels(grid)).mean(axis=-1)))
  near_shares = dict(zip(config.samplers, near_boundary(batch_points).mean(axis=-1)))

  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  write_figures(workdir, config, points, labels, dict(zip(config.samplers, logits)),
                dict(zip(config.samplers, batch_points[:, 0])), accuracies)
  table = common.markdown_table(*results_table(accuracies, near_shares, float(near_boundary(points).mean())))
  task = (f"regression (noise {config.target_noise}, target gap quantile {config.target_gap_quantile})"
          if regression else "classification")
  (workdir / "results.md").write_text(
      f"Boundary accuracy ({task}) on a {config.grid_size}x{config.grid_size} grid, {config.repetitions} "
      f"repetitions, batch {config.batch_size}, data seed {config.data_seed}, radius {config.radius}"
      f"\n\n{table}\n")
  with (workdir / "results.csv").open("w", newline="") as handle:
    writer = csv.writer(handle)
    writer.writerow(["sampler", "repetitions", "mean_accuracy", "std_accuracy", "near_boundary_share"])
    for name, accuracy in accuracies.items():
      writer.writerow([name, accuracy.size, *(f"{value:.6f}" for value in common.mean_std(accuracy)),
                       f"{near_shares[name].mean():.6f}"])
  with (workdir / "repetitions.csv").open("w", newline="") as handle:
    writer = csv.writer(handle)
    writer.writerow(["sampler", "repetition", "accuracy", "near_boundary_share"])
    for name, accuracy in accuracies.items():
      for seed, value, share in zip(seeds, accuracy, near_shares[name]):
        writer.writerow([name, seed, f"{value:.6f}", f"{share:.6f}"])
  print(f"\nBoundary accuracy ({task}), data seed {config.data_seed}, {config.repetitions} repetitions:\n"
        f"{table}")
  return accuracies


def save_png(figure: mpl_figure.Figure, path: pathlib.Path, dpi: int) -> None:
  """Saves a matplotlib figure as a 256-colour palette PNG.

  The combined figure is committed to the repository: the palette keeps it at about a third of the
  size of matplotlib's true-colour PNG (the semi-transparent contours make many shades), with no
  visible difference.
  """
  from PIL import Image  # comes with matplotlib

  buffer = io.BytesIO()
  figure.savefig(buffer, format="png", dpi=dpi)
  buffer.seek(0)
  with Image.open(buffer) as image:
    image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def write_figures(output_dir: pathlib.Path, config: Config, points: np.ndarray, labels: np.ndarray,
                  logits: dict[str, np.ndarray], examples: dict[str, np.ndarray],
                  accuracies: dict[str, np.ndarray]) -> None:
  """`synthetic_<sampler>.png` per sampler and `synthetic_boundaries.png` with all side by side.

  Args:
    output_dir: where the PNGs go.
    config: the run.
    points: `[N, 2]` data points.
    labels: `[N]` their labels.
    logits: per sampler, `[R, G]` logits of the repetitions' networks on `grid_points`.
    examples: per sampler, the `[k, 2]` batch to highlight.
    accuracies: per sampler, `[R]` boundary accuracies (for the titles).
  """
  plt = common.pyplot()

  def draw(axis: mpl_axes.Axes, name: str) -> None:
    title = "{}: {:.3f} ± {:.3f}".format(name, *common.mean_std(accuracies[name]))
    plot_sampler(axis, points, labels, config.grid_size, logits[name], examples[name], title)

  for name in config.samplers:
    figure, axis = plt.subplots(figsize=(4, 4))
    draw(axis, name)
    figure.tight_layout()
    save_png(figure, output_dir / f"synthetic_{name}.png", dpi=100)
    plt.close(figure)
  figure, axes = plt.subplots(1, len(config.samplers), figsize=(3.2 * len(config.samplers), 3.5),
                              squeeze=False)
  for axis, name in zip(axes[0], config.samplers):
    draw(axis, name)
  figure.suptitle(f"{config.repetitions} repetitions, one batch of {config.batch_size} each, "
                  f"{config.hidden_units} tanh units, data seed {config.data_seed}", fontsize=10)
  figure.tight_layout()
  save_png(figure, output_dir / "synthetic_boundaries.png", dpi=90)
  plt.close(figure)
