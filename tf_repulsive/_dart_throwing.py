"""Dart throwing for Poisson disk sampling over a finite point set, as TensorFlow graph ops.

`DartThrower` is the drawer of the built-in Poisson disk samplers and of `Uniform`. It prepares
the per-dataset tensors once (`_dart_state`), draws through the one trace of its configuration
(`_dart_config.DrawConfig`, `_dart_blocks.traced_draws`), which throws darts in blocks and
accepts them (`_dart_blocks`), and estimates its inclusion probabilities (`_dart_inclusion`). A sampler
gives it a `DartPlan`, and may give it a `DartTuning`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
from typing import Callable, Mapping

import numpy as np
import tensorflow as tf

from tf_repulsive import _dart_blocks
from tf_repulsive import _dart_inclusion
from tf_repulsive import _dart_state
from tf_repulsive import _stream_ops
from tf_repulsive._contract import MOST_STEPS_PER_DRAW
from tf_repulsive._contract import BatchDrawer
from tf_repulsive._contract import PointGroups
from tf_repulsive._dart_config import DartPlan
from tf_repulsive._dart_config import DartTuning
from tf_repulsive._dart_config import DrawConfig

__all__ = ("DartPlan", "DartThrower", "DartTuning")


class DartThrower(BatchDrawer):
  """Draws the indices of mini-batches as a pure function of a stateless key and the steps."""

  def __init__(self, features: np.ndarray, plan: DartPlan, batch_size: int, distance_cache_bytes: int = 0,
               verbose: bool = False, max_steps_per_draw: int = MOST_STEPS_PER_DRAW, tuning: DartTuning = DartTuning()):
    """Prepares the per-dataset tensors once.

    Args:
      features: `[N, d]` float array; distances are Euclidean in this space.
      plan: the sampler's resolved plan.
      batch_size: k, the number of distinct points in a batch (<= N).
      distance_cache_bytes: when the `[N, N]` float32 matrix of squared distances fits in this
        many bytes and d >= `tuning.cache_from_dim`, it is computed here once and disk tests look
        distances up (O(k^2) per batch instead of O(k^2 d)).
      verbose: show a progress bar if computing that matrix takes more than about 2 s.
      max_steps_per_draw: the most steps one draw covers (`steps_per_draw`).
      tuning: block sizes and thresholds.
    """
    num_points, dim = features.shape
    self._plan = plan
    self._tuning = tuning
    self._state, one_disk_radius = _dart_state.prepare(features, plan, tuning, distance_cache_bytes, verbose)
    self._config = DrawConfig.of(
        plan, tuning, num_points=num_points, dim=dim, batch_size=batch_size, max_steps_per_draw=max_steps_per_draw,
        one_radius=self._state.uniform_radius is not None, one_disk_radius=one_disk_radius,
        distance_cache=self._state.sq_distances is not None)
    self.steps_per_draw = self._config.steps_per_draw
    # Every disk radius is multiplied by this (see `with_radius_scale`).
    self.radius_scale = 1.0
    # The trace of this configuration's draws, which takes the per-dataset tensors.
    self._draws_on_state = _dart_blocks.traced_draws(self._config)
    # The variables of a refreshable thrower (`refreshable`), by argument name; None: constants.
    self._variables: dict[str, tf.Variable] | None = None
    # A refreshable thrower's draw, traced once on its variables (`refreshable`).
    self._traced_variable_draw: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None = None

  def refreshable(self) -> DartThrower:
    """This thrower with its per-dataset tensors in variables on the host, for `refresh_from`.

    It draws what this thrower draws. The variables let a thrower of the same plan built on new
    features of the same shape (features recomputed from a model as it trains) hand over its
    tensors without a new trace of the draw. One radius for all points stays one radius only
    when the plan says so (`DartPlan.one_radius`), not because the first data gave it.
    """
    live = copy.copy(self)
    if not self._plan.one_radius:
      live._state = dataclasses.replace(live._state, uniform_radius=None)
      live._config = dataclasses.replace(live._config, one_radius=False)
    if live._config.one_disk_radius and not (self._plan.one_radius or self._plan.one_disk_radius):
      live._config = dataclasses.replace(live._config, one_disk_radius=False)
    if live._config != self._config:
      live._draws_on_state = _dart_blocks.traced_draws(live._config)
    arguments = {**live._state.arguments(), "radius_scale": tf.constant(self.radius_scale, tf.float32)}
    with tf.device("CPU:0"):
      live._variables = {name: tf.Variable(value, trainable=False) for name, value in arguments.items()}
    # The trace draws with a copy that does not hold the trace.
    live._traced_variable_draw = tf.function(functools.partial(DartThrower.draw, copy.copy(live)), autograph=False,
                                             input_signature=(tf.TensorSpec([2], tf.int64),
                                                              tf.TensorSpec([], tf.int64)))
    return live

  def refresh_from(self, other: BatchDrawer) -> None:
    """Makes this refreshable thrower draw what `other` draws: its tensors, report and groups.

    Args:
      other: a thrower of the same sampler built on new features of the same shape.

    Raises:
      ValueError: if this thrower is not refreshable, or `other` has other tensors or shapes.
    """
    if self._variables is None or not isinstance(other, DartThrower):
      raise ValueError("refresh_from needs a thrower made by refreshable() and a DartThrower to take over.")
    arguments = other._state.arguments()
    values = {name: arguments.get(name) for name in self._variables}
    values["radius_scale"] = tf.constant(other.radius_scale, tf.float32)
    for name, value in values.items():
      variable = self._variables[name]
      if value is None or value.shape != variable.shape or value.dtype != variable.dtype:
        raise ValueError(
            f"the refreshed thrower's {name} is "
            f"{'missing' if value is None else f'{value.dtype.name} {value.shape}'}, not "
            f"{variable.dtype.name} {variable.shape}: a refresh keeps the sampler, the data size and the "
            "feature dimension.")
    for name, value in values.items():
      self._variables[name].assign(value)
    self.report, self.groups = other.report, other.groups

  def _current(self) -> tuple[_dart_state.DrawState, float | tf.Tensor]:
    """The per-dataset tensors and radius scale to draw with: a refreshable thrower's variables read once."""
    if self._variables is None:
      return self._state, self.radius_scale
    values = {name: variable.read_value() for name, variable in self._variables.items()}
    radius_scale = values.pop("radius_scale")
    return _dart_state.DrawState(**values), radius_scale

  def with_radius_scale(self, radius_scale: float) -> DartThrower:
    """This thrower with every disk radius multiplied by `radius_scale` (shares all tensors)."""
    scaled = copy.copy(self)
    scaled.radius_scale = float(radius_scale)
    return scaled

  def described(self, report: Mapping[str, float], groups: PointGroups | None = None) -> DartThrower:
    """This thrower with the `report` and `groups` its sampler gives it (shares all tensors)."""
    described = copy.copy(self)
    described.report = types.MappingProxyType(dict(report))
    described.groups = groups
    return described

  def pi(self, step: tf.Tensor) -> tf.Tensor | None:
    return None if self._plan.pi is None else self._plan.pi(self._state.value_histogram, step)

  def inclusion_probabilities(self, key: tf.Tensor, verbose: bool) -> np.ndarray | None:
    """`[N]` each point's probability of being in a batch (`_dart_inclusion`); None under Anneal PDS.

    Args:
      key: `[2]` int64 stateless key of these draws (not the stream's).
      verbose: show a progress bar if the estimate takes more than about 2 s.
    """
    num_points, k = self._config.num_points, self._config.batch_size
    if self._plan.pi_follows_step:
      return None
    if self._plan.point_radius is None and self._plan.pi is None and self._plan.point_weights is None:
      return np.full(num_points, k / num_points)
    state, radius_scale = self._current()
    return _dart_inclusion.inclusion_probabilities(self._config, state, radius_scale, self.traced_draw(), key,
                                                   self._tuning, verbose)

  def count_fills(self, radius_scale: float, key: tf.Tensor, steps: int, max_darts: int) -> int:
    """How many draws of steps 0 .. steps - 1 (whole draws) need the fallback fill within `max_darts` darts a batch.

    Stops counting at the first draw with a fill. For calibrating the radius: every scale and
    budget runs the one trace of `traced_draw`.
    """
    _, _, filled = self._draws_on_state(
        self._state.arguments(), key, tf.constant(0, tf.int64),
        tf.constant(-(-steps // self.steps_per_draw), tf.int32), tf.constant(radius_scale, tf.float32),
        tf.constant(max_darts, tf.int32))
    return int(filled)

  def traced_draw(self) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """`draw` through the calibration's trace, at this thrower's radius scale and dart budget."""
    if self._traced_variable_draw is not None:
      return self._traced_variable_draw
    state, settings = self._one_draw_arguments(self._state, self.radius_scale)

    def draw(key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
      indices, fallback, _ = self._draws_on_state(state, key, first_step, *settings)
      return indices, fallback

    return draw

  def _one_draw_arguments(self, state: _dart_state.DrawState, radius_scale: float | tf.Tensor) -> tuple[
      dict[str, tf.Tensor], tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
    """What the trace takes besides the key and first step, for one draw of `state` at `radius_scale`.

    The per-dataset tensors, and the number of draws (1), radius scale and dart budget.
    """
    return state.arguments(), (tf.constant(1, tf.int32), tf.cast(radius_scale, tf.float32),
                               tf.constant(self._plan.max_darts, tf.int32))

  # The built-in drawers' control flow is explicit TensorFlow ops: AutoGraph would only re-read
  # their source, on the first trace in each process (~0.6 s of a first build). Custom drawers
  # are converted as usual.
  @tf.autograph.experimental.do_not_convert
  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The batches of steps `first_step` ... `first_step + steps_per_draw - 1`, thrown side by side.

    Args:
      key: `[2]` int64 stateless seed of the pipeline.
      first_step: int64 scalar, a multiple of `steps_per_draw`.

    Returns:
      `indices`: `[steps_per_draw, k]` int32, per step k distinct point indices in acceptance
      order; `fallback`: `[steps_per_draw]` int32, how many of each step's the fallback fill
      supplied because the dart budget ran out.
    """
    if tf.executing_eagerly():
      return self.traced_draw()(key, first_step)
    # Traced into the pipeline's map: the body of the one trace of the draw, copied in. A second
    # trace would cost as much as the first (a fifth to two fifths of a small build); a call of
    # the function would make tf.data instantiate the map as a multi-device function for every
    # iterator.
    state, settings = self._one_draw_arguments(*self._current())
    indices, fallback, _ = _stream_ops.inlined(self._draws_on_state, state, key, first_step, *settings)
    return indices, fallback
