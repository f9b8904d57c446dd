"""examples/quickstart: the demo's program with its flags."""

from absl import flags
import pytest

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow


def test_quickstart_learns_with_uniform_and_repulsive_batches(example_main, capsys):
  quickstart = example_main("examples.quickstart.main", "--epochs=2", "--samplers=uniform,vanilla_pds")
  quickstart.main(["main"])
  table = capsys.readouterr().out.splitlines()[-2:]
  accuracies = {name: float(accuracy) for name, accuracy in (line.split() for line in table)}
  assert list(accuracies) == ["uniform", "vanilla_pds"]
  # Chance is 0.1; two epochs of SGD on the digits get well above it with either sampler.
  assert min(accuracies.values()) > 0.4


def test_unknown_samplers_are_refused(example_main):
  with pytest.raises(flags.IllegalFlagValueError, match="--samplers must name some of"):
    example_main("examples.quickstart.main", "--samplers=uniform,bogus")
