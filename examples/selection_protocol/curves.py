"""The selection protocol's finished runs as one CSV, and back into a workdir.

  .venv/bin/python -m examples.selection_protocol.curves pack --workdir=runs/protocol/mnist \
      --steps=1500 --curves=docs/results/data/selection_protocol_mnist.csv
  .venv/bin/python -m examples.selection_protocol.curves unpack \
      --curves=docs/results/data/selection_protocol_mnist.csv --workdir=runs/protocol/mnist

`pack` writes every run of `examples/selection_protocol` or `examples/second_comparison` under
the workdir whose `eval.csv` ended at one of `--steps`, the protocol's step budgets (runs still
training are left out): one row per evaluation, the run's directory
relative to the workdir in the first column. Runs may differ in columns when a column was added
to `eval.csv` between them: the packed header is the longest, every run's columns must appear in
it in the same order, and a run leaves the cells of the columns it lacks empty. `unpack` writes
each run's `eval.csv` back where it was, byte for byte, and leaves runs already in the workdir
alone. The protocol reads unpacked runs
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
  tables = {}
  for path in sorted(workdir.rglob("eval.csv")):
    if any(sweep.finished_curve(path.parent, budget) is not None for budget in budgets):
      with path.open(newline="") as handle:
        tables[path] = list(csv.reader(handle))
  if not tables:
    return "", 0
  header = max((rows[0] for rows in tables.values()), key=len)
  out = io.StringIO()
  writer = csv.writer(out)
  writer.writerow(["run", *header])
  for path, rows in tables.items():
    if not _in_order(rows[0], header):
      raise ValueError(f"{path}: columns {rows[0]} are not, in order, among the other runs' {header}.")
    run = path.parent.relative_to(workdir).as_posix()
    for row in rows[1:]:
      cells = dict(zip(rows[0], row))
      writer.writerow([run, *(cells.get(name, "") for name in header)])
  return out.getvalue(), len(tables)


def _in_order(columns: Sequence[str], header: Sequence[str]) -> bool:
  """Whether `columns` are distinct and appear in `header` in the same order."""
  remaining = iter(header)
  return len(set(columns)) == len(columns) and all(name in remaining for name in columns)


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
    # A run's columns are those it wrote a cell in (every run writes every cell of its columns).
    kept = [column for column in range(len(header)) if any(row[column] for row in body)]
    path.parent.mkdir(parents=True, exist_ok=True)
    # The csv module's own dialect, as the runs wrote it: the file comes back byte for byte.
    with path.open("w", newline="") as handle:
      csv.writer(handle).writerows([[line[column] for column in kept] for line in [header, *body]])
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
