r"""Does repulsion in the model's own space lower the gradient variance where input-space repulsion does not?

For each seed and each of `checkpoint_steps` of Deep-MNIST training (Adam on uniform batches): the
Theorem-1 variance of the mini-batch mean gradient under each sampler, with the disk samplers'
distances measured in each of `spaces`:

* `input`: the pixels (the paper's space);
* `embedding`: the CNN's penultimate activations (`tf_repulsive.EmbeddingFeatures()`);
* `gradient`: each example's last-layer gradient (`tf_repulsive.GradientFeatures()`, projected to
  `projection_dim` dims).

The samplers of `weighted` are measured a second time on the same draws with each element's
gradient times its inclusion weight (`repulsive_batch(..., inclusion_weights="self_normalized")`), as
`<sampler>@<space> weighted`; and every checkpoint gives the closed-form variance of importance
sampling by the last-layer gradient norm, the classic estimator that uses the same gradients
without disks. The model features are computed from the model at the checkpoint itself
(features refreshed at every step: the best a refreshed feature space can do). Every figure is total / plain SGD's
closed-form variance for the same model and gradients, so seeds are paired; the table gives the
mean over seeds with its standard error. `uniform` and `epoch_shuffle` draw without distances:
epoch shuffling's batches are uniform ones one at a time (ratio 1 up to noise); what it changes
is how consecutive batches relate, which a per-batch variance does not see.
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib
from typing import Callable

import numpy as np
import tensorflow as tf

from examples import common
from examples import settings
from examples.mnist_deep import measurement
import tf_repulsive
from tf_repulsive import diagnostics

_UNSPACED = ("uniform", "epoch_shuffle")
# The samplers whose batches have the same law at every step, which inclusion weights need.
_WEIGHABLE = ("uniform", "vanilla_pds", "easy_pds", "dense_pds")
# The row of importance sampling by the last layer's gradient norm (closed form).
IMPORTANCE_SAMPLING = "importance sampling"


@dataclasses.dataclass(frozen=True)
class Config(measurement.MeasurementConfig):
  """One measurement over several seeds."""

  samplers: tuple[str, ...] = settings.setting(("uniform", "epoch_shuffle", "vanilla_pds", "anneal_pds"),
                                               "Samplers to measure.", choices=common.SAMPLER_NAMES)
  spaces: tuple[str, ...] = settings.setting(("input", "embedding", "gradient"),
                                                "Where the disk samplers measure distances.", choices=common.SPACES)
  radius: float | str | None = common.radius_setting("auto")
  projection_dim: int = settings.setting(256, "Dimension of the projected gradient features.", minimum=1)
  num_batches: int = settings.setting(200, "Draws per sampler, space and checkpoint.", minimum=3)
  num_seeds: int = settings.setting(5, "Seeds seed, seed + 1, ...: model initialisation, training and draws.",
                                    minimum=1)
  weighted: tuple[str, ...] = settings.setting(
      ("vanilla_pds",), "Samplers of --samplers also measured with inclusion weights (repulsive_batch(..., "
      "inclusion_weights=\"self_normalized\")), as <sampler>@<space> weighted.", choices=_WEIGHABLE)


def _sources(config: Config) -> dict[str, tf_repulsive.FeatureSource | None]:
  return {"input": None, "embedding": tf_repulsive.EmbeddingFeatures(),
          "gradient": tf_repulsive.GradientFeatures(projection_dim=config.projection_dim, seed=config.seed)}


def measure(config: Config, workdir: str | pathlib.Path, log: Callable[[str], None] = print) -> list[dict]:
  """Measures every seed, checkpoint, space and sampler; writes the rows, the table and the plot.

  Args:
    config: the measurement.
    workdir: where `variance.csv` (one row per seed, step and sampler@space), `variance.txt` (the
      summary table, also logged) and `variance.png` (the ratios against the training step) go.
    log: receives each line of progress and the table.

  Returns:
    The rows of `variance.csv`.
  """
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  sources = _sources(config)
  rows = []
  for seed in range(config.seed, config.seed + config.num_seeds):
    seeded = dataclasses.replace(config, seed=seed)
    measured = measurement.subject(seeded)
    x, y, model = measured.x, measured.y, measured.model
    for label, step in measurement.checkpoints(seeded, measured):
      # One set of per-example gradients per checkpoint, shared by every sampler and space (paired).
      gradients = diagnostics.per_example_gradients(model, measured.loss, x, y, variables=config.variables,
                                                    sketch_dim=config.sketch_dim or None, seed=seed)
      draws, radii, weights = {}, {}, {}
      for space in config.spaces:
        source = sources[space]
        features = x.reshape(len(x), -1) if source is None else tf_repulsive.compute_features(source, model, x, y)
        data = tf.data.Dataset.from_tensor_slices((features, y))
        for name in config.samplers:
          if name in _UNSPACED and space != config.spaces[0]:
            continue
          key = name if name in _UNSPACED else f"{name}@{space}"
          sampler = common.make_sampler(name, neighbors=config.neighbors, radius=config.radius)
          batcher = tf_repulsive.repulsive_batch(config.batch_size, sampler, seed=seed, start_step=step)
          data.apply(batcher)
          draws[key] = diagnostics.draw_batches(batcher, config.num_batches, start_step=step)
          radii[key] = batcher.stats().report.get("radius")
          if name in config.weighted:
            weighted = tf_repulsive.repulsive_batch(config.batch_size, sampler, seed=seed, start_step=step,
                                                    inclusion_weights="self_normalized")
            data.apply(weighted)
            # The same draws as the unweighted batcher's (same seed and steps): paired.
            draws[f"{key} weighted"] = draws[key]
            weights[f"{key} weighted"] = diagnostics.batch_weights(weighted, draws[key])
            radii[f"{key} weighted"] = radii[key]
      result = diagnostics.variance_split(gradients, draws, radii=radii, weights=weights)
      reference = result.uniform_exact.total
      for key, report in result.reports.items():
        rows.append({"seed": seed, "step": step, "sampler": key,
                     "total_ratio": report.total / reference, "total_ratio_se": report.total_se / reference,
                     "pair_ratio": report.pair / reference, "relative_bias": report.relative_bias,
                     "radius": report.radius})
      rows.append({"seed": seed, "step": step, "sampler": IMPORTANCE_SAMPLING,
                   "total_ratio": importance_sampling_variance(gradients, _last_layer_norms(model, x, y),
                                                              config.batch_size) / reference,
                   "total_ratio_se": 0.0, "pair_ratio": float("nan"), "relative_bias": 0.0, "radius": None})
      log(f"seed {seed}, {label}: " + ", ".join(
          f"{key} {report.total / reference:.3f}" for key, report in result.reports.items()))
  with (workdir / "variance.csv").open("w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  table = summary(rows, config, len(measured.x))
  (workdir / "variance.txt").write_text(table + "\n")
  _plot(rows, workdir / "variance.png")
  log(table)
  return rows


def _last_layer_norms(model, x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """`[N]` the norm of each example's exact gradient with respect to the last Dense layer."""
  last = model.layers[-1]
  exact = tf_repulsive.GradientFeatures(projection_dim=int(last.kernel.shape[1]) * (int(last.kernel.shape[0]) + 1))
  return np.linalg.norm(tf_repulsive.compute_features(exact, model, x, y, verbose=False), axis=1)


def importance_sampling_variance(gradients: np.ndarray, scores: np.ndarray, batch_size: int) -> float:
  """tr Cov of (1/k) Σ_j g_{i_j} / (N p_{i_j}), k draws with replacement with p ∝ `scores` (closed form).

  The unbiased importance-sampling estimate of the mean gradient: (1/k) (Σ_i |g_i|² / (N² p_i) − |ḡ|²).
  With scores the last layer's per-example gradient norms, a cheap proxy for the full norms, whose
  proportional sampling is the variance-optimal importance sampling with replacement.
  """
  gradients = gradients.astype(np.float64)
  probabilities = np.maximum(scores, 1e-12 * scores.max()) / np.maximum(scores, 1e-12 * scores.max()).sum()
  num_examples = len(gradients)
  sq_norms = np.einsum("ij,ij->i", gradients, gradients)
  full_mean = gradients.mean(axis=0)
  return float((np.sum(sq_norms / (num_examples**2 * probabilities)) - full_mean @ full_mean) / batch_size)


def _mean_and_se(rows: list[dict], name: str, step: int, column: str = "total_ratio") -> tuple[float, float]:
  """The mean of `column` over the seeds of (name, step), and its standard error (NaN for one seed)."""
  values = np.array([row[column] for row in rows if row["sampler"] == name and row["step"] == step], dtype=float)
  se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
  return float(values.mean()), float(se)


def _plot(rows: list[dict], path: pathlib.Path) -> None:
  """Mean ratio to plain SGD (± s.e. over seeds) against the training step, one line per sampler@space."""
  plt = common.pyplot()
  steps = sorted({row["step"] for row in rows})
  figure, axis = plt.subplots(figsize=(7, 4.5))
  for name in dict.fromkeys(row["sampler"] for row in rows):
    means, errors = zip(*(_mean_and_se(rows, name, step) for step in steps))
    axis.errorbar(steps, means, yerr=np.nan_to_num(errors), marker="o", capsize=3, label=name,
                  linestyle="--" if "@" not in name else "-")
  axis.axhline(1.0, color="gray", lw=0.8)
  axis.set(xlabel="training step (Adam on uniform batches)", ylabel="tr Cov / plain SGD's",
           title="Mini-batch gradient variance against plain SGD")
  # Linear up to the first checkpoint after 0, logarithmic beyond: 0, 100, 300, 1000 spread evenly.
  axis.set_xscale("symlog", linthresh=min((step for step in steps if step > 0), default=1))
  axis.grid(alpha=0.3)
  axis.legend(fontsize=8)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def summary(rows: list[dict], config: Config, num_examples: int) -> str:
  """Per sampler@space and step, the mean over seeds (± its standard error) of total / plain SGD, then of the bias.

  The relative bias is |E[Ĝ] − ḡ| / |ḡ|: how far the sampler's marginals move the expected step
  (0 for uniform sampling); a variance below plain SGD's with a large bias is not a better estimate.
  """
  steps = sorted({row["step"] for row in rows})
  names = list(dict.fromkeys(row["sampler"] for row in rows))
  seeds = len({row["seed"] for row in rows})
  lines = [f"N = {num_examples}, k = {config.batch_size}, radius {config.radius or 'default'}, "
           f"{config.num_batches} draws, gradients: {config.variables}"
           + (f" (count sketch {config.sketch_dim})" if config.sketch_dim else " (exact)")
           + f"; mean ± s.e. over {seeds} seeds"]
  for column, title in (("total_ratio", "tr Cov(mini-batch mean gradient) / plain SGD's (closed form)"),
                        ("relative_bias", "relative bias |E[G] - full gradient| / |full gradient|")):
    if column not in rows[0]:
      continue
    lines += ["", title, f"{'sampler@space':<32}" + "".join(f"{'step ' + str(step):>18}" for step in steps)]
    for name in names:
      cells = []
      for step in steps:
        mean, se = _mean_and_se(rows, name, step, column)
        cells.append(f"{mean:>10.3f} ± {se:<5.3f}")
      lines.append(f"{name:<32}" + "".join(f"{cell:>18}" for cell in cells))
  return "\n".join(lines)
