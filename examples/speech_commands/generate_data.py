r"""Writes a small Speech Commands dataset (v0.02 layout) spoken by espeak-ng; see synthesis.py.

Needs espeak-ng and sox on PATH (`apt-get install espeak-ng sox`). Deterministic given --seed.

  python -m examples.speech_commands.generate_data --data_dir=runs/speech_commands/data
"""

import time

from absl import app
from absl import flags

from examples import settings
from examples.speech_commands import synthesis

settings.define_flags(synthesis.DatasetConfig)
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Directory to write the dataset to.", required=True)


def main(argv):
  config = settings.config_from_flags(synthesis.DatasetConfig, argv)
  try:
    synthesis.check_tools()
  except RuntimeError as error:
    raise app.UsageError(str(error)) from error
  start = time.time()
  summary = synthesis.generate(_DATA_DIR.value, config)
  print(f"Wrote {summary.clips} clips of {len(summary.words)} words by {summary.speakers} speakers "
        f"to {_DATA_DIR.value} in {time.time() - start:.0f} s; split {summary.split_counts}.")


if __name__ == "__main__":
  app.run(main)
