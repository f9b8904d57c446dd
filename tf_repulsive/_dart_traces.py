"""Traced draws by configuration: throwers of one configuration draw with one trace.

One trace serves every draw of a thrower: the radius calibration's, at any radius scale and dart
budget, the batcher's (`DartThrower.traced_draw`), at any key, and the pipeline's
(`DartThrower.draw` copies it in). The per-dataset tensors are its arguments, so that every
thrower of the same configuration reuses it: a refresh's, another batcher's on data of the same
shape (a trace costs more than all of a calibration's draws). The traced function holds the
configuration only: one that referenced the thrower holding it would be a cycle, and keep the
tensors (the distance cache, say) until the next garbage collection; a kept function would keep
the plan's per-point arrays.
"""

from __future__ import annotations

import collections
import functools

import tensorflow as tf

from tf_repulsive import _dart_blocks
from tf_repulsive._dart_config import DrawConfig


class DrawTraces:
  """Traced draws (`_dart_blocks.draws`) by configuration, the most recently used kept.

  Bounded, as each holds its traced graph (about 8 MiB of Python objects for Anneal PDS); a
  function holds no per-dataset tensor (they are its arguments).
  """

  def __init__(self, max_traces: int = 8):
    """A cache of at most `max_traces` traced draws."""
    self.max_traces = max_traces
    # Most recently used last.
    self._functions: collections.OrderedDict[DrawConfig, tf.types.experimental.PolymorphicFunction] = (
        collections.OrderedDict())

  def draws(self, config: DrawConfig) -> tf.types.experimental.PolymorphicFunction:
    """The traced draws of `config`: the one traced before, or a new one.

    It takes `(state, key, first_step, num_draws, radius_scale, max_darts)`, `state` the
    per-dataset tensors (`DrawState.arguments`), and returns `BlockDraws.draws`'s three tensors.
    """
    function = self._functions.pop(config, None)
    if function is None:
      function = tf.function(functools.partial(_dart_blocks.draws, config), autograph=False)
    self._functions[config] = function
    while len(self._functions) > self.max_traces:
      self._functions.popitem(last=False)
    return function

  def clear(self) -> None:
    """Forgets every trace (throwers keep theirs)."""
    self._functions.clear()


# The traces of the built-in samplers' throwers: one cache for the process, so that throwers of
# the same configuration draw with one trace, whichever batcher built them.
DEFAULT_TRACES = DrawTraces()
