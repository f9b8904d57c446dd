"""What a callback can learn of the `fit` that runs it, from the Python frames that called it.

A Keras callback is not told which callbacks run beside it, nor what dataset `fit` iterates. Both
are in the frames of the call: `keras.callbacks.CallbackList`, whose hook called the callback's,
and `Model.fit(x, ...)`. Everything here that reads frames is in this module, and
`tests/test_keras_frames.py` fails when a Keras release stops calling callbacks so (the checks
that rely on it would otherwise do nothing).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import keras

from tf_repulsive import _framework

# Frames between a callback's hook and `fit` (the hook, CallbackList's hook, fit, a decorator or
# two); the search is bounded so that a hook called from elsewhere costs little.
_MAX_FRAMES = 24


def callback_list() -> keras.callbacks.CallbackList | None:
  """The `CallbackList` whose hook (directly or through a subclass's `super()`) is running, or None."""
  _framework.check_tested()  # (not a decorator: a wrapper would be one more frame to walk)
  for frame_locals in _caller_locals():
    candidate = frame_locals.get("self")
    if isinstance(candidate, keras.callbacks.CallbackList):
      return candidate
  return None


def fit_input() -> Any:
  """The `x` given to the `Model.fit` call that is running, or None outside `fit`."""
  _framework.check_tested()
  frame: types.FrameType | None = sys._getframe(1)  # pylint: disable=protected-access
  for _ in range(_MAX_FRAMES):
    if frame is None:
      return None
    if frame.f_code.co_name == "fit" and isinstance(frame.f_locals.get("self"), keras.Model):
      return frame.f_locals.get("x")
    frame = frame.f_back
  return None


def _caller_locals():
  frame: types.FrameType | None = sys._getframe(2)  # pylint: disable=protected-access
  for _ in range(_MAX_FRAMES):
    if frame is None:
      return
    yield frame.f_locals
    frame = frame.f_back
