"""Fails when a public name of tf_repulsive is missing from the built API reference (docs/api.rst).

Usage: python scripts/check_api_docs.py BUILD_DIR

BUILD_DIR is the output of `sphinx-build -b html docs BUILD_DIR`; its `objects.inv` lists every
object the reference documents. Required there:

* `tf_repulsive.<name>` for every name in `tf_repulsive.__all__`;
* `tf_repulsive.diagnostics.<name>` for every name in `tf_repulsive.diagnostics.__all__`;
* for each of those classes, `<class>.<field>` for its dataclass fields, and `<class>.<member>` for
  every public method, property or class attribute that the class itself introduces (members a
  class inherits or overrides are required once, on the public class that first defines them;
  Keras' and TensorFlow's own members, such as the callbacks' `on_epoch_end`, are not this API).

An object appears in `objects.inv` only when autodoc documented it, so a public name without an
entry in docs/api.rst, or a public member without a docstring, fails here.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import pathlib
import re
import sys
import zlib

_ROOT = pathlib.Path(__file__).resolve().parent.parent
# An entry of objects.inv (version 2): name, domain:role, priority, location, display name.
_ENTRY = re.compile(r"(.+?)\s+(\S+):(\S+)\s+(-?\d+)\s+(\S*)\s+(.*)")


def documented_objects(build_dir: pathlib.Path) -> set[str]:
  """The Python objects an HTML build documents, by full name."""
  with open(build_dir / "objects.inv", "rb") as stream:
    header = [stream.readline() for _ in range(4)]
    if not header[0].startswith(b"# Sphinx inventory version 2"):
      raise SystemExit(f"{build_dir / 'objects.inv'}: not a Sphinx inventory of version 2")
    text = zlib.decompress(stream.read()).decode("utf-8")
  names = set()
  for line in text.splitlines():
    match = _ENTRY.fullmatch(line.rstrip())
    if match and match.group(2) == "py":
      names.add(match.group(1))
  return names


def public_api() -> tuple[list[str], dict[type, str]]:
  """The full names that must be documented, and the public classes by their documented name."""
  sys.path.insert(0, str(_ROOT))
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tf_repulsive  # pylint: disable=import-outside-toplevel
  from tf_repulsive import diagnostics  # pylint: disable=import-outside-toplevel

  names = []
  classes: dict[type, str] = {}
  for module in (tf_repulsive, diagnostics):
    for name in module.__all__:
      full_name = f"{module.__name__}.{name}"
      names.append(full_name)
      value = getattr(module, name)
      if inspect.isclass(value):
        classes[value] = full_name
  return names, classes


def required_members(cls: type, classes: dict[type, str]) -> list[str]:
  """The members of `cls` that its documented name (or a public base's) must carry."""
  required = []
  if dataclasses.is_dataclass(cls):
    required += [f"{classes[cls]}.{field.name}" for field in dataclasses.fields(cls)
                 if not field.name.startswith("_")]
  for member in dir(cls):
    if member.startswith("_"):
      continue
    # The most basic class that defines the member: where it is documented.
    owner = next(base for base in reversed(cls.__mro__) if member in vars(base))
    if owner in classes:
      required.append(f"{classes[owner]}.{member}")
    # Otherwise it belongs to Keras, TensorFlow or Python (callback hooks, tf.Module), or to a
    # private base of the package (such as the disk samplers' plan()): not part of this API.
  return required


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    print(__doc__.strip().splitlines()[2], file=sys.stderr)
    return 2
  documented = documented_objects(pathlib.Path(argv[1]))
  names, classes = public_api()
  required = list(names)
  for cls in classes:
    required += required_members(cls, classes)
  missing = sorted(set(required) - documented)
  if missing:
    print("check_api_docs: public names missing from the API reference (docs/api.rst; a member "
          "needs a docstring or an Attributes entry):", file=sys.stderr)
    for name in missing:
      print(f"  {name}", file=sys.stderr)
    return 1
  print(f"check_api_docs: all {len(set(required))} public names and members are documented.")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
