"""Settings of the examples: declared once, as dataclass fields, and turned into absl flags.

An example's library module declares its settings as a frozen dataclass deriving from `Settings`,
one `setting(...)` field each (default, help text, allowed values). Its `main.py` defines a global
absl flag per field (and its --workdir) with `define_flags(Config, workdir=...)` and builds the
config from the parsed flags with `config_from_flags(Config, argv)`. So a setting is written once,
the library sees no flags (tests and other programs build the dataclass directly), and values are
checked in one place, the dataclass, whether they come from flags or from code.

Field types and their flags: bool, int, float, str (an enum flag when the setting has `choices`)
and tuples of int, float or str (comma lists), each also `| None` for "not set". A setting with
`parse` has a string flag whose text `parse` turns into the value (e.g. a disk radius: "default",
"auto" or a number).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, Sequence

from absl import app
from absl import flags

# The flags that `define_flags` defines belong to its caller (the example's main.py), so that
# absl's --help lists them as that program's flags.
flags.disclaim_key_flags()

_SCALAR_FLAGS = {bool: flags.DEFINE_boolean, int: flags.DEFINE_integer, float: flags.DEFINE_float,
                 str: flags.DEFINE_string}


def setting(default: Any, help: str, *, choices: Sequence[str] | None = None, minimum: float | None = None,
            greater_than: float | None = None, maximum: float | None = None,
            parse: Callable[[str], Any] | None = None) -> Any:
  """A field of a `Settings` dataclass.

  The bounds and choices apply to each element of a tuple, and a tuple needs at least one.

  Args:
    default: the default value; with `parse`, its text as written on the command line.
    help: the flag's help text.
    choices: the allowed values.
    minimum: the least allowed value.
    greater_than: values must exceed this.
    maximum: the greatest allowed value.
    parse: for a setting given as text: text -> value, raising ValueError for bad text.

  Returns:
    The `dataclasses.field`.
  """
  metadata = {"help": help, "choices": choices, "minimum": minimum, "greater_than": greater_than,
              "maximum": maximum, "parse": parse, "text": default}
  return dataclasses.field(default=default if parse is None else parse(default), metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Settings:
  """Base of the settings dataclasses: checks every field against its `setting` declaration.

  A subclass with checks across fields defines `__post_init__` and calls this one first.
  """

  def __post_init__(self):
    for field in dataclasses.fields(self):
      _check(field, getattr(self, field.name))


def _check(field: dataclasses.Field, value: Any) -> None:
  """Raises ValueError, naming the flag, if `value` is not what the field declares."""
  if value is None:
    return
  rules = field.metadata
  if isinstance(value, tuple) and not value:
    raise ValueError(f"--{field.name} needs at least one value.")
  for item in value if isinstance(value, tuple) else (value,):
    if rules["choices"] is not None and item not in rules["choices"]:
      raise ValueError(f"--{field.name}: {item!r} is not one of {', '.join(rules['choices'])}.")
    if rules["minimum"] is not None and item < rules["minimum"]:
      raise ValueError(f"--{field.name} must be >= {rules['minimum']}; got {item}.")
    if rules["greater_than"] is not None and not item > rules["greater_than"]:
      raise ValueError(f"--{field.name} must be > {rules['greater_than']}; got {item}.")
    if rules["maximum"] is not None and item > rules["maximum"]:
      raise ValueError(f"--{field.name} must be <= {rules['maximum']}; got {item}.")


def _flag_types(config_class: type) -> dict[str, Any]:
  """Field name -> its type without `| None`: a scalar type or `tuple[element, ...]`."""
  types_by_name = {}
  for name, hint in typing.get_type_hints(config_class).items():
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
      kinds = [arg for arg in typing.get_args(hint) if arg is not type(None)]
      hint = kinds[0] if len(kinds) == 1 else hint
    types_by_name[name] = hint
  return types_by_name


def define_flags(config_class: type, workdir: str | None = None) -> flags.FlagHolder[str] | None:
  """Defines a global absl flag per field of `config_class`: same name, default and help.

  Args:
    config_class: the settings dataclass.
    workdir: for a program that writes files, the default of its --workdir flag (where they go).

  Returns:
    The --workdir flag, when `workdir` is given.

  Raises:
    TypeError: for a field whose type has no flag (see the module docstring).
  """
  flag_types = _flag_types(config_class)
  for field in dataclasses.fields(config_class):
    rules, flag_type = field.metadata, flag_types[field.name]
    if rules["parse"] is not None:
      flags.DEFINE_string(field.name, rules["text"], rules["help"])
    elif typing.get_origin(flag_type) is tuple:
      choices = "" if rules["choices"] is None else f" Any of: {', '.join(rules['choices'])}."
      flags.DEFINE_list(field.name, None if field.default is None else [str(item) for item in field.default],
                        rules["help"] + choices)
    elif flag_type is str and rules["choices"] is not None:
      flags.DEFINE_enum(field.name, field.default, rules["choices"], rules["help"])
    elif flag_type in _SCALAR_FLAGS:
      _SCALAR_FLAGS[flag_type](field.name, field.default, rules["help"])
    else:
      raise TypeError(f"{config_class.__name__}.{field.name}: no flag for type {flag_type}.")
  return None if workdir is None else flags.DEFINE_string("workdir", workdir, "Where the program writes its outputs.")


def config_from_flags(config_class: type, argv: Sequence[str] = ()) -> Any:
  """The `config_class` instance that the parsed global flags describe.

  Args:
    config_class: the settings dataclass.
    argv: what `app.run` passes to `main`: the program name, then the arguments that are not flags
      (none are allowed).

  Raises:
    app.UsageError: for arguments besides flags, or a value the settings do not allow (absl prints
      it with the usage).
  """
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  flag_types = _flag_types(config_class)
  try:
    return config_class(**{field.name: _value(field, flag_types[field.name], flags.FLAGS[field.name].value)
                           for field in dataclasses.fields(config_class)})
  except ValueError as error:
    raise app.UsageError(str(error)) from error


def _value(field: dataclasses.Field, flag_type: Any, flag_value: Any) -> Any:
  """The field's value from its flag's: parsed text, a tuple of the element type, or as it is."""
  if field.metadata["parse"] is not None:
    return field.metadata["parse"](flag_value)
  if flag_value is None or typing.get_origin(flag_type) is not tuple:
    return flag_value
  element_type = typing.get_args(flag_type)[0]
  try:
    return tuple(element_type(item) for item in flag_value)
  except ValueError as error:
    raise ValueError(f"--{field.name}: {error}") from error
