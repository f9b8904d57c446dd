r"""Simple Audio Recognition (TF's speech_commands "conv" model) with repulsive mini-batches.

The paper's speech experiment: TensorFlow's audio recognition tutorial with its standard settings
(every flag default is the TF tutorial's), the mini-batches drawn by --sampler on the MFCC
features; train.py explains how sampling meets TF's augmentation.

  python -m examples.speech_commands.generate_data --data_dir=runs/speech_commands/data
  python -m examples.speech_commands.main --flagfile=configs/speech_commands.flags \
      --sampler=vanilla_pds --seed=1

Writes to --workdir: `validation_curve.csv` / `.png`, `tensorboard/` and `results.json` (final
validation and test accuracy, partition sizes, mingling histogram, wall time).
"""

from absl import app
from absl import flags

from examples import settings
from examples.speech_commands import train

settings.define_flags(train.Config)
flags.DEFINE_alias("feature_bin_count", "dct_coefficient_count")  # TF's newer name
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory; default runs/speech_commands/<sampler>_seed<seed>.")
_VERBOSE = flags.DEFINE_integer("verbose", 1, "Keras verbosity: 1 progress bar, 2 a line per interval, 0 quiet.")


def main(argv):
  config = settings.config_from_flags(train.Config, argv)
  workdir = _WORKDIR.value or f"runs/speech_commands/{config.sampler}_seed{config.seed}"
  result = train.train_and_evaluate(config, workdir, verbose=_VERBOSE.value)
  print(f"Final validation accuracy {result.validation_accuracy:.4f}, test accuracy "
        f"{result.test_accuracy:.4f} after {result.steps} steps ({result.seconds:.0f} s); "
        f"outputs in {workdir}")


if __name__ == "__main__":
  app.run(main)
