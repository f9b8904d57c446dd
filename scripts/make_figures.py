"""Draws the figures of the results pages from the numbers their tables give.

  /work/main/.venv/bin/python scripts/make_figures.py   # or .venv/bin/python, from the repository root

Reads the CSV files in docs/results/data/ (each transcribes a table of a results page) and writes
one PNG per figure into docs/results/figures/. The output is deterministic: a fixed style, 100 dpi,
and no software name or date in the PNG metadata, so an unchanged CSV gives the same bytes.
"""

from __future__ import annotations

import collections
import csv
import pathlib

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_DATA = _ROOT / "docs" / "results" / "data"
_FIGURES = _ROOT / "docs" / "results" / "figures"
_DPI = 100
_STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "savefig.bbox": "tight",
}
# One colour per sampler, the same on every figure.
_COLOURS = {"VanillaPDS": "tab:orange", "EasyPDS": "tab:green", "DensePDS": "tab:red", "AnnealPDS": "tab:purple"}


def _rows(name: str) -> list[dict[str, str]]:
  with open(_DATA / name, newline="", encoding="utf-8") as handle:
    return list(csv.DictReader(handle))


def _save(figure: plt.Figure, name: str) -> None:
  # Pillow's optimiser makes the files smaller; "Software": None leaves the version out of the file.
  figure.savefig(_FIGURES / name, dpi=_DPI, metadata={"Software": None}, pil_kwargs={"optimize": True})
  plt.close(figure)
  print(f"wrote {_FIGURES / name}")


def throughput_batch_sizes() -> None:
  """Batches per second of each disk sampler over shuffle + batch's, against the batch size."""
  rows = _rows("throughput_batch_sizes.csv")
  figure, axes = plt.subplots(2, 2, figsize=(8, 5.6), sharex=True, sharey=True)
  for row_index, data in enumerate(("gaussian", "clusters")):
    for column_index, (loop, title) in enumerate((("python_loop", "Python loop"), ("graph_loop", "graph loop"))):
      axis = axes[row_index, column_index]
      axis.axhline(1.0, color="black", linewidth=1.0, label="shuffle + batch")
      for sampler, colour in _COLOURS.items():
        points = [row for row in rows if row["data"] == data and row["sampler"] == sampler]
        ks = [int(row["k"]) for row in points]
        ratios = [float(row[loop]) for row in points]
        axis.plot(ks, ratios, color=colour, marker="o", label=sampler)
        # Cells measured in a run of their own get a hollow marker (the page's footnote).
        own = [(k, ratio) for k, ratio, row in zip(ks, ratios, points) if row["own_run"] == "1"]
        if own:
          axis.plot(*zip(*own), linestyle="none", marker="o", markersize=9, markerfacecolor="white",
                    markeredgecolor=colour)
      axis.set_xscale("log", base=2)
      axis.set_xticks([50, 512, 2048, 4096], labels=["50", "512", "2048", "4096"])
      axis.minorticks_off()
      axis.set_ylim(0, 2.5)
      axis.set_title(f"{data} 50000 × 64, read by a {title}")
      if row_index == 1:
        axis.set_xlabel("batch size k")
      if column_index == 0:
        axis.set_ylabel("batches/s over shuffle + batch")
  axes[0, 0].legend(loc="upper right")
  figure.tight_layout()
  _save(figure, "throughput_batch_sizes.png")


def table1_per_batch() -> None:
  """Seconds per mini-batch against k, this package and the paper's Table 1."""
  rows = _rows("table1_per_batch.csv")
  colours = {"k-DPP": "tab:blue", "Fast k-DPP": "tab:green", "PDS": "tab:orange", "Uniform": "tab:gray"}
  figure, axis = plt.subplots(figsize=(6.4, 4.2))
  for method, colour in colours.items():
    for source, style in (("ours", "-"), ("paper", "--")):
      points = [row for row in rows if row["method"] == method and row["source"] == source]
      if points:
        axis.plot([int(row["k"]) for row in points], [float(row["seconds_per_batch"]) for row in points],
                  color=colour, linestyle=style, marker="o", label=f"{method} ({source})")
  axis.set_yscale("log")
  axis.set_xlabel("batch size k")
  axis.set_ylabel("seconds per mini-batch (ours: CPU time)")
  axis.set_title("N = 8189, d = 4198: this package (solid) and the paper (dashed)")
  axis.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
  _save(figure, "table1_per_batch.png")


def cnn_variance_by_sampler() -> None:
  """Gradient variance over plain SGD's per sampler, at initialisation and after 300 steps."""
  rows = _rows("cnn_variance_by_sampler.csv")
  figure, axis = plt.subplots(figsize=(5.6, 3.6))
  positions = range(len(rows))
  width = 0.38
  axis.bar([p - width / 2 for p in positions], [float(row["init_total_over_uniform"]) for row in rows], width,
           color="tab:blue", label="at initialisation")
  axis.bar([p + width / 2 for p in positions], [float(row["after_300_steps_total_over_uniform"]) for row in rows],
           width, color="tab:red", label="after 300 steps")
  axis.axhline(1.0, color="black", linewidth=1.0)
  axis.set_xticks(list(positions), labels=[row["sampler"].replace(" (", "\n(") for row in rows], fontsize=8)
  axis.set_ylabel("tr Cov over plain SGD's")
  axis.set_title("Deep-MNIST CNN, pixel space, default radius 4.26")
  axis.legend(loc="upper left")
  _save(figure, "cnn_variance_by_sampler.png")


def cnn_variance_by_radius() -> None:
  """VanillaPDS's gradient variance over plain SGD's against the radius, at initialisation and later."""
  rows = _rows("cnn_variance_by_radius.csv")
  figure, axis = plt.subplots(figsize=(5.6, 3.6))
  radii = [float(row["radius"]) for row in rows]
  axis.plot(radii, [float(row["init_total_over_uniform"]) for row in rows], color="tab:blue", marker="o",
            label="at initialisation")
  axis.plot(radii, [float(row["after_300_steps_total_over_uniform"]) for row in rows], color="tab:red",
            marker="o", label="after 300 steps")
  axis.axhline(1.0, color="black", linewidth=1.0)
  for row, radius in zip(rows, radii):
    axis.annotate(row["radius_label"], (radius, float(row["init_total_over_uniform"])), textcoords="offset points",
                  xytext=(0, -14), ha="center", fontsize=7)
  axis.set_xlabel("disk radius (pixel space)")
  axis.set_ylabel("tr Cov over plain SGD's")
  axis.set_title("VanillaPDS per radius (at 5.99, 92% of draws need the fill)")
  axis.set_ylim(0.2, 1.45)
  axis.legend(loc="upper left")
  _save(figure, "cnn_variance_by_radius.png")


def sine_boundary_radii() -> None:
  """VanillaPDS's boundary accuracy over uniform's per radius, over five data seeds."""
  rows = _rows("sine_boundary_radii.csv")
  figure, axis = plt.subplots(figsize=(6.4, 3.6))
  positions = range(len(rows))
  axis.bar(positions, [float(row["delta_mean"]) for row in rows],
           yerr=[float(row["delta_std"]) for row in rows], color="tab:orange", capsize=4)
  axis.axhline(0.0, color="black", linewidth=1.0)
  labels = [f"{row['radius_label'].replace(' (', chr(10) + '(')}\n{row['seeds_above_uniform']} of {row['seeds']} above"
            for row in rows]
  axis.set_xticks(list(positions), labels=labels)
  axis.set_xlabel("disk radius")
  axis.set_ylabel("boundary accuracy − uniform's")
  axis.set_title("VanillaPDS, one batch of 30: mean ± std over 5 data seeds")
  _save(figure, "sine_boundary_radii.png")


def model_space_training() -> None:
  """Test error along training and steps to 5% per seed, disks in the CNN's own space on MNIST."""
  errors = _rows("model_space_test_error.csv")
  steps = _rows("model_space_steps_to_5_percent.csv")
  samplers = list(dict.fromkeys(row["sampler"] for row in errors))
  colours = dict(zip(samplers, ("black", "tab:gray", "tab:blue", "tab:cyan", "tab:orange", "tab:brown", "tab:purple",
                                "tab:red")))
  figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [1, 1.25]})
  for sampler in samplers:
    points = [row for row in errors if row["sampler"] == sampler]
    left.errorbar([int(row["step"]) for row in points], [float(row["error_mean"]) for row in points],
                  yerr=[float(row["error_std"]) for row in points], color=colours[sampler], marker="o", markersize=4,
                  capsize=3)
  left.axhline(5.0, color="black", linestyle=":", linewidth=1.0)
  left.set_yscale("log")
  left.set_yticks([3, 5, 10, 20], labels=["3", "5", "10", "20"])
  left.minorticks_off()
  left.set_xlabel("training step")
  left.set_ylabel("test error (%), mean ± std over 5 seeds")
  left.set_title("test error along training")
  per_sampler: dict[str, list[int | None]] = collections.defaultdict(list)
  for row in steps:
    per_sampler[row["sampler"]].append(int(row["steps"]) if row["steps"] else None)
  # The first sampler on top.
  for position, sampler in zip(range(len(samplers) - 1, -1, -1), samplers):
    reached = [value for value in per_sampler[sampler] if value is not None]
    missed = len(per_sampler[sampler]) - len(reached)
    # Seeds on one step are spread sideways so that each stays visible.
    offsets: collections.Counter[int] = collections.Counter()
    for value in reached:
      right.plot(value, position + 0.15 * (offsets[value] - 1), "o", color=colours[sampler])
      offsets[value] += 1
    if missed:
      right.plot([1100] * missed, [position + 0.15 * (i - 1) for i in range(missed)], "x", color=colours[sampler])
    counted = reached + [1100] * missed
    right.plot([sum(counted) / len(counted)] * 2, [position - 0.35, position + 0.35], color="black", linewidth=1.5)
  right.axvline(1050, color="black", linewidth=0.5)
  right.set_yticks(list(range(len(samplers) - 1, -1, -1)), labels=samplers)
  for label, sampler in zip(right.get_yticklabels(), samplers):
    label.set_color(colours[sampler])
  right.yaxis.tick_right()
  right.set_xticks([300, 500, 700, 900, 1100], labels=["300", "500", "700", "900", "not in 1000"])
  right.set_xlabel("steps to 5% test error")
  right.set_title("per seed (dots; ×: not reached) and mean (bar)")
  figure.tight_layout()
  _save(figure, "model_space_training.png")


def main() -> None:
  plt.rcdefaults()
  plt.rcParams.update(_STYLE)
  _FIGURES.mkdir(parents=True, exist_ok=True)
  throughput_batch_sizes()
  table1_per_batch()
  cnn_variance_by_sampler()
  cnn_variance_by_radius()
  sine_boundary_radii()
  model_space_training()


if __name__ == "__main__":
  main()
