"""The selection protocol's finished runs as one CSV, and back into a workdir.

  .venv/bin/python -m examples.selection_protocol.curves pack --workdir=runs/protocol/mnist \
      --steps=1500 --curves=docs/results/data/selection_protocol_mnist.csv
  .venv/bin/python -m examples.selection_protocol.curves unpack \
      --curves=docs/results/data/selection_protocol_mnist.csv --workdir=runs/protocol/mnist

`pack` writes every run of `examples/selection_protocol` or `examples/second_comparison` under
the workdir whose `eval.csv` ended at one of `--steps`, the protocol's step budgets (runs still
training are left out): one row per evaluation, the run's directory
relative to the workdir in the first column. `unpack` writes each run's `eval.csv` back where it
was, byte for byte, and leaves runs already in the workdir alone. The protocol reads unpacked runs
as finished: it recomputes its summary from them without training, or resumes with the runs left.
"""

import csv
import io
import pathlib
from typing import Sequence

from absl import app
from absl import flags

from examples.mnist_deep_sweep import sweep


def pack(workdir: pathlib.Path, steps: int | Sequence[int]) -> tuple[str, int]:
  """Every finished run's `eval.csv` under `workdir` as one CSV, the run's directory first; and how many runs.

  A run is finished when it ended at a step budget of `steps`.
  """
  budgets = (steps,) if isinstance(steps, int) else tuple(steps)
  out, header, runs = io.StringIO(), None, 0
  writer = csv.writer(out)
  for path in sorted(workdir.rglob("eval.csv")):
    if all(sweep.finished_curve(path.parent, budget) is None for budget in budgets):
      continue
    with path.open(newline="") as handle:
      rows = list(csv.reader(handle))
    if header is None:
      header = rows[0]
      writer.writerow(["run", *header])
    if rows[0] != header:
      raise ValueError(f"{path}: columns {rows[0]} differ from the other runs' {header}.")
    run = path.parent.relative_to(workdir).as_posix()
    writer.writerows([run, *row] for row in rows[1:])
    runs += 1
  return out.getvalue(), runs


def unpack(curves: str, workdir: pathlib.Path) -> int:
  """Writes each run of `curves` (from `pack`) to `workdir/<run>/eval.csv` unless it exists; returns how many."""
  rows = list(csv.reader(io.StringIO(curves)))
  if not rows or rows[0][0] != "run":
    raise ValueError("--curves: not a file written by `pack` (its first column must be `run`).")
  header, runs = rows[0][1:], {}
  for row in rows[1:]:
    run = pathlib.PurePosixPath(row[0])
    if run.is_absolute() or ".." in run.parts:
      raise ValueError(f"--curves: run {row[0]!r} is not a directory inside the workdir.")
    runs.setdefault(row[0], []).append(row[1:])
  written = 0
  for run, body in runs.items():
    path = workdir / run / "eval.csv"
    if path.exists():
      continue
    path.parent.mkdir(parents=True, exist_ok=True)
    # The csv module's own dialect, as the runs wrote it: the file comes back byte for byte.
    with path.open("w", newline="") as handle:
      csv.writer(handle).writerows([header, *body])
    written += 1
  return written


def main(argv):
  if len(argv) != 2 or argv[1] not in ("pack", "unpack"):
    raise app.UsageError("Give one action: pack or unpack.")
  workdir, curves = pathlib.Path(flags.FLAGS.workdir), pathlib.Path(flags.FLAGS.curves)
  if argv[1] == "pack":
    if flags.FLAGS.steps is None:
      raise app.UsageError("pack needs --steps, the step budget of the protocol's runs.")
    text, runs = pack(workdir, [int(budget) for budget in flags.FLAGS.steps])
    curves.parent.mkdir(parents=True, exist_ok=True)
    with curves.open("w", newline="") as handle:
      handle.write(text)
    print(f"{curves}: {runs} finished runs")
  else:
    with curves.open(newline="") as handle:
      print(f"{workdir}: {unpack(handle.read(), workdir)} runs written")


if __name__ == "__main__":
  # Defined here, not on import, so that the protocol's own program can import this module.
  flags.DEFINE_string("workdir", None, "The protocol's workdir.", required=True)
  flags.DEFINE_string("curves", None, "The CSV of every finished run's curve.", required=True)
  flags.DEFINE_list("steps", None, "pack: the step budgets, comma-separated; a run that ended at one is packed.")
  app.run(main)
