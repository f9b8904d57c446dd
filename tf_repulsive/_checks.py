"""Argument checks shared by the public API: one wording for every int and number argument."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np


def integer(value: Any, name: str, least: int | None = None, hint: str = "") -> int:
  """`value` as an int, or TypeError (not an int, or a bool) / ValueError (below `least`).

  Args:
    value: the argument.
    name: its name, as the caller wrote it.
    least: the smallest allowed value; None for no bound.
    hint: appended to the ValueError, e.g. how to choose a valid value.
  """
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise TypeError(f"`{name}` must be an int; got {value!r}.")
  if least is not None and value < least:
    raise ValueError(f"`{name}` must be >= {least}; got {value}.{' ' + hint if hint else ''}")
  return int(value)


def count_fields(config: Any, *names: str) -> None:
  """Checks fields of a frozen dataclass that hold None or an int >= 1, and stores them as ints.

  (A numpy integer is accepted and stored as the int it is.)
  """
  for name in names:
    value = getattr(config, name)
    object.__setattr__(config, name, None if value is None else integer(value, name, 1))


def irreducible_loss(value: Any) -> None:
  """Raises unless `value` is None or `[N]` finite numbers: the `irreducible_loss` of a sampler."""
  if value is None:
    return
  losses = np.asarray(value)
  if losses.ndim != 1 or losses.dtype.kind not in "fiu" or not np.all(np.isfinite(losses)):
    raise ValueError(f"`irreducible_loss` must be None or [N] finite losses, one per element in dataset order; "
                     f"got {losses.dtype} {losses.shape}.")


def irreducible_for(value: Any, num_points: int) -> np.ndarray | None:
  """`irreducible_loss` as float32 `[N]` for a dataset of `num_points` elements (None stays None)."""
  if value is None:
    return None
  losses = np.asarray(value, np.float32)
  if losses.shape != (num_points,):
    raise ValueError(f"`irreducible_loss` holds {losses.shape[0]} losses and the dataset {num_points} elements: "
                     "give one per element, in dataset order.")
  return losses


def real(value: Any, name: str, *, positive: bool, type_hint: str = "a number") -> float:
  """`value` as a float, finite and > 0 (`positive`) or >= 0; TypeError / ValueError otherwise.

  Args:
    value: the argument.
    name: its name, as the caller wrote it.
    positive: whether 0 is excluded.
    type_hint: what the TypeError says the argument must be (other accepted forms included).
  """
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise TypeError(f"`{name}` must be {type_hint}; got {value!r}.")
  number = float(value)
  if not math.isfinite(number) or number < 0 or (positive and number == 0):
    raise ValueError(f"`{name}` must be finite and {'>' if positive else '>='} 0; got {value}.")
  return number
