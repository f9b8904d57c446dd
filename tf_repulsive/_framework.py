"""The TensorFlow and Keras releases the package is tested on, and the guard on their internals.

Two modules read what TensorFlow does not promise to keep: `_stream_ops` builds dataset ops
from TensorFlow's private constructors, and `_dataset_graph` reads a dataset's private
structure. A release outside the tested
range may have moved any of them. So their first use checks the installed versions, and fails
with an error that names the tested ones, instead of failing (or silently checking nothing)
deep inside a pipeline. `import tf_repulsive` itself never fails on a version.

`setup.py` reads the ranges below, so the package states one range in one place.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Callable, TypeVar

import keras
import tensorflow as tf

_Function = TypeVar("_Function", bound=Callable)

# The releases the test suite passes on, oldest and newest (major.minor, both included).
TESTED_TENSORFLOW = ("2.16", "2.21")
TESTED_KERAS = ("3.7", "3.15")
# Set to 1 to use an untested release anyway (the guard then only warns once).
UNTESTED_ENVIRONMENT_VARIABLE = "TF_REPULSIVE_ALLOW_UNTESTED_FRAMEWORK"


class UntestedFrameworkError(RuntimeError):
  """TensorFlow or Keras is outside the tested range, or an internal the package reads has moved."""


def _minor(version: str) -> tuple[int, int]:
  """(major, minor) of a version string such as "2.21.0" or "3.15.1.dev2"."""
  found = re.match(r"(\d+)\.(\d+)", version)
  if found is None:
    raise UntestedFrameworkError(f"tf_repulsive cannot read the version {version!r}.")
  return int(found.group(1)), int(found.group(2))


def _tested_range() -> str:
  return (f"TensorFlow {TESTED_TENSORFLOW[0]} to {TESTED_TENSORFLOW[1]} and Keras {TESTED_KERAS[0]} to "
          f"{TESTED_KERAS[1]}")


def _outside_range() -> str | None:
  """What is installed outside the tested range, or None."""
  outside = []
  for name, installed, (oldest, newest) in (("TensorFlow", tf.__version__, TESTED_TENSORFLOW),
                                            ("Keras", keras.__version__, TESTED_KERAS)):
    if not _minor(oldest) <= _minor(installed) <= _minor(newest):
      outside.append(f"{name} {installed}")
  return " and ".join(outside) or None


def _allowed_anyway() -> bool:
  return os.environ.get(UNTESTED_ENVIRONMENT_VARIABLE, "") == "1"


@functools.cache
def check_tested() -> None:
  """Raises `UntestedFrameworkError` unless TensorFlow and Keras are in the tested range.

  Checked once per process (the first use of an internal). With the environment variable
  `TF_REPULSIVE_ALLOW_UNTESTED_FRAMEWORK=1` an untested release is used anyway.
  """
  outside = _outside_range()
  if outside is None or _allowed_anyway():
    return
  raise UntestedFrameworkError(
      f"tf_repulsive is tested on {_tested_range()}; this process has {outside}. tf_repulsive reads "
      "internals of TensorFlow's tf.data and of Keras' fit that a release may move, and this one was "
      "not tested. Install a tested release (pip install 'tf_repulsive[cpu]' picks one), or set "
      f"{UNTESTED_ENVIRONMENT_VARIABLE}=1 to try it anyway.")


def moved(what: str, error: BaseException) -> UntestedFrameworkError:
  """The error for an internal `what` that this TensorFlow or Keras does not have (raise it `from error`)."""
  return UntestedFrameworkError(
      f"tf_repulsive reads {what}, which TensorFlow {tf.__version__} / Keras {keras.__version__} does not "
      f"provide ({type(error).__name__}: {error}). tf_repulsive is tested on {_tested_range()}: install one of "
      "those releases.")


def guarded(function: _Function) -> _Function:
  """`function`, which reads a framework internal, behind `check_tested`."""
  @functools.wraps(function)
  def checked(*args, **kwargs):
    check_tested()
    return function(*args, **kwargs)
  return checked  # type: ignore[return-value]
