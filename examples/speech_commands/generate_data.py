r"""Writes a small Speech Commands dataset (v0.02 layout) spoken by espeak-ng; see synthesis.py.

Needs espeak-ng and sox on PATH (`apt-get install espeak-ng sox`). Deterministic given --seed.

  python examples/speech_commands/generate_data.py --data_dir=runs/speech_commands/data
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from typing import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __package__ in (None, ""):
  # Run as a script: make `examples/` importable.
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

import common  # noqa: E402
from speech_commands import synthesis  # noqa: E402

FLAGS = flags.FlagValues()
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Directory to write the dataset to.", required=True,
                                flag_values=FLAGS)
_NUM_SPEAKERS = flags.DEFINE_integer(
    "num_speakers", 200, "Speakers (espeak-ng voice, pitch, speed); each says every target word "
    "1 to --max_repetitions times and --unknown_words_per_speaker other words once.", flag_values=FLAGS)
_MAX_REPETITIONS = flags.DEFINE_integer("max_repetitions", 2, "Most takes of a target word per speaker.",
                                        flag_values=FLAGS)
_UNKNOWN_WORDS_PER_SPEAKER = flags.DEFINE_integer("unknown_words_per_speaker", 3,
                                                  "Non-target words each speaker says.", flag_values=FLAGS)
_TARGET_WORDS = flags.DEFINE_list("target_words", list(synthesis.TARGET_WORDS), "Target words.",
                                  flag_values=FLAGS)
_UNKNOWN_WORDS = flags.DEFINE_list("unknown_words", list(synthesis.UNKNOWN_WORDS),
                                   "Non-target words (the _unknown_ pool).", flag_values=FLAGS)
_NOISE_SECONDS = flags.DEFINE_float("noise_seconds", 30.0, "Length of each background noise wav.",
                                    flag_values=FLAGS)
_VALIDATION_PERCENTAGE = flags.DEFINE_float("validation_percentage", 10.0,
                                            "Hash-split share written to validation_list.txt.",
                                            flag_values=FLAGS)
_TESTING_PERCENTAGE = flags.DEFINE_float("testing_percentage", 10.0,
                                         "Hash-split share written to testing_list.txt.", flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of speakers, takes and noise.", flag_values=FLAGS)
_WORKERS = flags.DEFINE_integer("workers", 2, "Concurrent espeak-ng / sox processes.", flag_values=FLAGS)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  try:
    synthesis.check_tools()
  except RuntimeError as error:
    raise app.UsageError(str(error)) from error
  start = time.time()
  summary = synthesis.generate(
      _DATA_DIR.value, num_speakers=_NUM_SPEAKERS.value, target_words=_TARGET_WORDS.value,
      unknown_words=_UNKNOWN_WORDS.value, unknown_words_per_speaker=_UNKNOWN_WORDS_PER_SPEAKER.value,
      max_repetitions=_MAX_REPETITIONS.value, noise_seconds=_NOISE_SECONDS.value,
      validation_percentage=_VALIDATION_PERCENTAGE.value, testing_percentage=_TESTING_PERCENTAGE.value,
      seed=_SEED.value, workers=_WORKERS.value)
  print(f"Wrote {summary.clips} clips of {len(summary.words)} words by {summary.speakers} speakers "
        f"to {_DATA_DIR.value} in {time.time() - start:.0f} s; split {summary.split_counts}.")


if __name__ == "__main__":
  common.run(main, FLAGS)
