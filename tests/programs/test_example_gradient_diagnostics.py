"""examples/gradient_diagnostics: the program from its flagfile, on 15% of the digits and the last layer."""

import pathlib

from absl import flags
import pytest

from examples import settings
from examples.gradient_diagnostics import diagnose

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


def test_flagfile_parses(example_main):
  example_main("examples.gradient_diagnostics.main", f"--flagfile={CONFIGS / 'gradient_diagnostics.flags'}")
  config = settings.config_from_flags(diagnose.Config)
  assert (config.num_batches, config.checkpoint_steps) == (400, (0, 300))
  assert (config.sketch_dim, config.variables) == (4096, "all")
  assert len(config.samplers) == 5 and flags.FLAGS.workdir == "runs/gradient_diagnostics"


def test_small_run_from_the_flagfile_writes_the_table_and_plots(example_main, tmp_path):
  example_main(
      "examples.gradient_diagnostics.main", f"--flagfile={CONFIGS / 'gradient_diagnostics.flags'}",
      "--train_fraction=0.15", "--samplers=uniform,vanilla_pds,anneal_pds", "--batch_size=10", "--num_batches=5",
      "--checkpoint_steps=0,2", "--variables=last_layer", "--sketch_dim=64", "--r_bins=8")
  lines = []
  outcome = diagnose.diagnose(settings.config_from_flags(diagnose.Config), tmp_path, log=lines.append)
  assert set(outcome.variance) == {"initialisation", "after 2 steps"}
  for result in outcome.variance.values():
    assert list(result.reports) == ["uniform", "vanilla_pds", "anneal_pds"]
    assert "count sketch to 64 dims" in result.gradient_space
  assert set(outcome.pair_correlation) == {"uniform", "vanilla_pds", "anneal_pds"}
  *blocks, wrote = lines
  text = "\n".join(blocks)
  assert "total/unif" in text and "last layer" in text
  assert (tmp_path / "variance.txt").read_text() == text + "\n"
  assert wrote == f"\nwrote {tmp_path}/variance.txt, variance_split.png, pair_correlation.png"
  for name in ("pair_correlation.png", "variance_split.png"):
    assert (tmp_path / name).stat().st_size > 0
