"""examples/radius_sweep: the program from its flagfile, on 15% of the digits and the last layer."""

import pathlib

from absl import flags
import pytest

from examples import settings
from examples.radius_sweep import sweep

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


def test_flagfile_parses(example_main):
  example_main("examples.radius_sweep.main", f"--flagfile={CONFIGS / 'radius_sweep.flags'}")
  config = settings.config_from_flags(sweep.Config)
  assert config.scales == (0.25, 0.5, 0.75, 1.0, 1.25) and config.sampler == "vanilla_pds"
  assert flags.FLAGS.workdir == "runs/radius_sweep"


def test_small_run_from_the_flagfile_sweeps_auto_its_multiples_and_the_default(example_main, tmp_path):
  example_main(
      "examples.radius_sweep.main", f"--flagfile={CONFIGS / 'radius_sweep.flags'}", "--train_fraction=0.15",
      "--sampler=anneal_pds", "--scales=0.5,1", "--batch_size=10", "--num_batches=4", "--checkpoint_steps=0,2",
      "--variables=last_layer", "--sketch_dim=64")
  lines = []
  sweeps = sweep.sweep(settings.config_from_flags(sweep.Config), tmp_path, log=lines.append)
  assert list(sweeps) == ["initialisation", "after 2 steps"]
  for result in sweeps.values():
    assert {report.label for report in result.reports} == {"0.5 x auto", "auto", "default"}
  assert "fill" in "\n".join(lines)
  for name in ("sweep.txt", "radius_sweep.png"):
    assert (tmp_path / name).stat().st_size > 0


def test_only_disk_samplers_have_a_radius_to_sweep():
  with pytest.raises(ValueError, match="--sampler: 'kdpp' is not one of vanilla_pds"):
    sweep.Config(sampler="kdpp")
