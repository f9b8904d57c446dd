r"""Summarises the speech experiment's runs: accuracy per sampler over seeds, and the mean curves.

Reads `<runs_dir>/*_seed<seed>/results.json` (written by main.py) and writes
`<runs_dir>/summary.md` (the table), `summary_curves.csv` and `summary.png`; see summary.py.

  python -m examples.speech_commands.summarize --runs_dir=runs/speech_commands
"""

import pathlib

from absl import app
from absl import flags

from examples.speech_commands import summary

_RUNS_DIR = flags.DEFINE_string("runs_dir", "runs/speech_commands", "Directory of the run directories.")
_TARGET_ACCURACY = flags.DEFINE_float("target_accuracy", summary.DEFAULT_TARGET_ACCURACY,
                                      "Validation accuracy whose first crossing the table reports.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  try:
    print(summary.summarize(_RUNS_DIR.value, _TARGET_ACCURACY.value))
  except FileNotFoundError as error:
    raise app.UsageError(str(error)) from error
  print(f"Wrote {pathlib.Path(_RUNS_DIR.value) / 'summary.md'}, summary_curves.csv and summary.png")


if __name__ == "__main__":
  app.run(main)
