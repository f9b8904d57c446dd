"""examples/feature_space_variance: the program from its flagfile, on 15% of the digits and the last layer."""

import csv
import pathlib
import pytest

from examples import settings
from examples.feature_space_variance import measure

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


def test_flagfile_parses(example_main):
  example_main("examples.feature_space_variance.main", f"--flagfile={CONFIGS / 'feature_space_variance.flags'}")
  config = settings.config_from_flags(measure.Config)
  assert config.spaces == ("input", "embedding", "gradient") and config.radius == "auto"
  assert config.checkpoint_steps == (0, 100, 300, 1000) and config.num_seeds == 5


def test_small_run_measures_every_sampler_in_every_space(example_main, tmp_path):
  example_main(
      "examples.feature_space_variance.main", f"--flagfile={CONFIGS / 'feature_space_variance.flags'}",
      "--dataset=digits", "--train_fraction=0.15", "--batch_size=10", "--num_batches=4",
      "--checkpoint_steps=2", "--num_seeds=1", "--variables=last_layer", "--sketch_dim=0", "--projection_dim=16")
  lines = []
  rows = measure.measure(settings.config_from_flags(measure.Config), tmp_path, log=lines.append)
  expected = ["uniform", "epoch_shuffle"] + [
      row for space in ("input", "embedding", "gradient")
      for row in (f"vanilla_pds@{space}", f"vanilla_pds@{space} weighted", f"anneal_pds@{space}")
  ] + [measure.IMPORTANCE_SAMPLING]
  assert [row["sampler"] for row in rows] == expected and {row["step"] for row in rows} == {2}
  # The disks live in a different space each time: so do their radii.
  radii = {row["sampler"]: row["radius"] for row in rows}
  assert len({radii[f"vanilla_pds@{space}"] for space in ("input", "embedding", "gradient")}) == 3
  with (tmp_path / "variance.csv").open() as handle:
    assert [row["sampler"] for row in csv.DictReader(handle)] == expected
  summary = (tmp_path / "variance.txt").read_text()
  assert "anneal_pds@gradient" in summary and "relative bias" in summary
  assert (tmp_path / "variance.png").stat().st_size > 0


def test_summary_pairs_the_seeds():
  rows = [{"seed": seed, "step": step, "sampler": name, "total_ratio": ratio}
          for seed, offset in ((0, 0.0), (1, 0.2)) for step in (0, 5)
          for name, ratio in (("uniform", 1.0 + offset), ("vanilla_pds@gradient", 0.5 + offset + step / 10))]
  table = measure.summary(rows, measure.Config(num_seeds=2), num_examples=123).splitlines()
  assert "mean ± s.e. over 2 seeds" in table[0] and "N = 123" in table[0]
  assert table[3].split() == ["sampler@space", "step", "0", "step", "5"]
  # Means 1.1 and 0.6 / 1.1; the standard error of two values a, b is |a - b| / 2.
  assert table[4].split() == ["uniform", "1.100", "±", "0.100", "1.100", "±", "0.100"]
  assert table[5].split() == ["vanilla_pds@gradient", "0.600", "±", "0.100", "1.100", "±", "0.100"]
  assert len(table) == 6  # rows without a bias column: no bias table
