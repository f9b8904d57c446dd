"""examples/settings.py: a settings dataclass as absl flags and back; examples/common.py's radius setting."""

import dataclasses
import sys

from absl import app
from absl import flags
import pytest

from examples import common
from examples import settings


@dataclasses.dataclass(frozen=True)
class _Toy(settings.Settings):
  count: int = settings.setting(3, "A count.", minimum=1)
  rate: float = settings.setting(0.5, "A rate.", greater_than=0.0, maximum=1.0)
  mode: str = settings.setting("a", "A mode.", choices=("a", "b"))
  label: str | None = settings.setting(None, "Free text.")
  enabled: bool = settings.setting(False, "A switch.")
  sizes: tuple[int, ...] = settings.setting((1, 2), "Sizes.", minimum=1)
  modes: tuple[str, ...] = settings.setting(("a",), "Modes.", choices=("a", "b"))
  weights: tuple[float, ...] | None = settings.setting(None, "Weights.")
  radius: float | str | None = common.radius_setting("0.2")


@pytest.fixture
def toy_flags(absl_flags):
  settings.define_flags(_Toy)
  return absl_flags


def test_flags_round_trip_to_the_config(toy_flags):
  toy_flags(["toy"])
  assert settings.config_from_flags(_Toy) == _Toy()
  assert _Toy().radius == 0.2
  toy_flags(["toy", "--count=4", "--rate=1", "--mode=b", "--label=x", "--enabled", "--sizes=3,4", "--modes=b,a",
             "--weights=0.5,2", "--radius=auto"])
  assert settings.config_from_flags(_Toy) == _Toy(count=4, rate=1.0, mode="b", label="x", enabled=True, sizes=(3, 4),
                                                  modes=("b", "a"), weights=(0.5, 2.0), radius="auto")


def test_flags_carry_the_help_and_belong_to_the_program_that_defines_them(toy_flags):
  assert toy_flags["modes"].help == "Modes. Any of: a, b."
  assert toy_flags["radius"].default == "0.2"
  # So absl's --help, which lists the main module's key flags, shows them.
  assert {flag.name for flag in toy_flags.get_key_flags_for_module(sys.modules[__name__])} >= {
      "count", "radius", "weights"}


@pytest.mark.parametrize("arg, message", [
    ("--count=0", "--count must be >= 1; got 0"),
    ("--rate=0", "--rate must be > 0.0; got 0.0"),
    ("--rate=1.5", "--rate must be <= 1.0; got 1.5"),
    ("--sizes=2,0", "--sizes must be >= 1; got 0"),
    ("--sizes=2,x", "--sizes: invalid literal for int"),
    ("--sizes=", "--sizes needs at least one value"),
    ("--modes=a,c", "--modes: 'c' is not one of a, b"),
    ("--radius=zero", "--radius must be 'default', 'auto' or a number > 0; got 'zero'")])
def test_bad_values_are_usage_errors_that_name_the_flag(toy_flags, arg, message):
  toy_flags(["toy", arg])
  with pytest.raises(app.UsageError, match=message):
    settings.config_from_flags(_Toy)


def test_code_gets_the_same_checks_as_flags():
  with pytest.raises(ValueError, match="--count must be >= 1"):
    _Toy(count=0)
  with pytest.raises(ValueError, match="--modes: 'c' is not one of a, b"):
    _Toy(modes=("c",))


def test_an_enum_flag_rejects_other_values_when_parsed(toy_flags):
  with pytest.raises(flags.IllegalFlagValueError):
    toy_flags(["toy", "--mode=c"])


def test_a_type_without_a_flag_is_refused(absl_flags):
  @dataclasses.dataclass(frozen=True)
  class Unsupported(settings.Settings):
    mapping: dict = settings.setting(None, "A mapping.")

  with pytest.raises(TypeError, match="Unsupported.mapping: no flag"):
    settings.define_flags(Unsupported)


@pytest.mark.parametrize("text, radius", [("auto", "auto"), ("default", None), ("0.3", 0.3)])
def test_radius_takes_auto_default_or_a_number(text, radius):
  assert common.parse_radius(text) == radius


@pytest.mark.parametrize("text", ["-1", "zero", "0"])
def test_bad_radius_names_the_choices(text):
  with pytest.raises(ValueError, match="--radius must be 'default', 'auto' or a number > 0"):
    common.parse_radius(text)
