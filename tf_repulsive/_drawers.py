"""Building a sampler's drawer for a batcher, and holding it to the `BatchDrawer` contract.

A sampler of the user's own is held to the same checks as the built-in ones, with messages that
name the drawer and the fix: its type, `steps_per_draw`, `report`, `groups` and the shapes its
`draw` returns.
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from tf_repulsive import _checks
from tf_repulsive import _contract


def build(sampler: _contract.Sampler, context: _contract.SamplingContext,
          previous: _contract.BatchDrawer | None = None) -> _contract.BatchDrawer:
  """`sampler.build(context)`, checked (at a refresh, against the drawer it replaces, `previous`)."""
  drawer = sampler.build(context)
  if not isinstance(drawer, _contract.BatchDrawer):
    raise TypeError(
        f"{type(sampler).__name__}.build must return a tf_repulsive.BatchDrawer (subclass it); got "
        f"{type(drawer).__name__}.")
  _checks.integer(drawer.steps_per_draw, f"{type(drawer).__name__}.steps_per_draw", 1,
                  hint="It is the number of steps one draw covers.")
  if drawer.steps_per_draw > context.max_steps_per_draw:
    raise ValueError(
        f"{type(drawer).__name__}.steps_per_draw = {drawer.steps_per_draw} exceeds the context's "
        f"max_steps_per_draw = {context.max_steps_per_draw}.")
  _check_report(drawer, context.features.shape[0], previous)
  return drawer


def checked_draw(drawer: _contract.BatchDrawer, key: tf.Tensor, first_step: tf.Tensor,
                 batch_size: int) -> tuple[tf.Tensor, tf.Tensor]:
  """`drawer.draw`, its result's shapes checked against the contract when it is traced."""
  indices, fallback = drawer.draw(key, first_step)
  steps_per_draw = drawer.steps_per_draw
  if (not indices.shape.is_compatible_with([steps_per_draw, batch_size])
      or not fallback.shape.is_compatible_with([steps_per_draw])):
    raise ValueError(
        f"{type(drawer).__name__}.draw must return indices of shape [steps_per_draw, batch_size] = "
        f"[{steps_per_draw}, {batch_size}] and fallback counts of shape [{steps_per_draw}]; got "
        f"{indices.shape} and {fallback.shape}. (A drawer of one step per draw returns "
        "indices[None], fallback[None].)")
  return tf.ensure_shape(tf.cast(indices, tf.int32), [steps_per_draw, batch_size]), tf.cast(fallback, tf.int32)


def checked_record_losses(drawer: _contract.BatchDrawer, sampler: _contract.Sampler, batch_size: int, step: Any,
                          losses: Any) -> tf.Operation:
  """`drawer.record_losses(step, losses)`, for a drawer that learns from losses and `[k]` losses."""
  if not drawer.learns_from_losses:
    raise ValueError(f"{type(sampler).__name__} does not draw on recorded losses: record_losses is for "
                     "EpochPruning and RandomPruning batchers.")
  losses = tf.convert_to_tensor(losses)
  if losses.shape.rank is not None and losses.shape.num_elements() not in (None, batch_size):
    raise ValueError(f"`losses` must hold one loss per element of the batch ({batch_size}); got shape {losses.shape}.")
  return drawer.record_losses(tf.cast(step, tf.int64), losses)


def checked_pi(drawer: _contract.BatchDrawer, step: int) -> np.ndarray | None:
  """`drawer.pi(step)` normalised, or None; a ValueError if it does not weigh the drawer's groups."""
  pi = drawer.pi(tf.constant(step, tf.int64))
  if pi is None:
    return None
  pi = np.asarray(pi, dtype=np.float64)
  groups = len(drawer.groups.levels) if drawer.groups is not None else 0
  if pi.shape != (groups,) or not np.isfinite(pi).all() or (pi < 0).any() or not pi.sum() > 0:
    raise ValueError(f"{type(drawer).__name__}.pi({step}) must be [G] = [{groups}] non-negative weights of its "
                     f"groups (BatchDrawer.groups), not all 0; got {pi!r}.")
  return pi / pi.sum()


def _check_report(drawer: _contract.BatchDrawer, num_points: int, previous: _contract.BatchDrawer | None) -> None:
  """Raises unless the drawer's `report` and `groups` are as `BatchDrawer` says (at a refresh: as `previous`'s)."""
  name = type(drawer).__name__
  if not isinstance(drawer.report, Mapping) or not all(
      isinstance(key, str) and isinstance(value, numbers.Real) and not isinstance(value, bool)
      for key, value in drawer.report.items()):
    raise TypeError(f"{name}.report must map names (str) to numbers, e.g. {{'radius': 0.5}}; got {drawer.report!r}.")
  groups = drawer.groups
  if groups is None:
    if previous is not None and previous.groups is not None:
      raise ValueError(f"the refreshed {name} has no groups, and the one it replaces had; a refresh keeps them.")
    return
  if not isinstance(groups, _contract.PointGroups):
    raise TypeError(f"{name}.groups must be a tf_repulsive.PointGroups or None; got {type(groups).__name__}.")
  # AnnealingCallback's keys `<name>_pi_<g>` and `<name>_fallback_batches` are taken.
  if not isinstance(groups.name, str) or not groups.name.isidentifier() or groups.name in ("pi", "fallback_batches"):
    raise ValueError(f"{name}.groups.name must be a name for log keys other than 'pi' and 'fallback_batches', "
                     f"such as 'mingling'; got {groups.name!r}.")
  levels = np.asarray(groups.levels)
  if levels.ndim != 1 or not levels.size or not np.issubdtype(levels.dtype, np.number) or not np.isfinite(levels).all():
    raise ValueError(f"{name}.groups.levels must be a [G] array of finite numbers, G >= 1; got {groups.levels!r}.")
  of_points = np.asarray(groups.of_points)
  if (of_points.shape != (num_points,) or not np.issubdtype(of_points.dtype, np.integer)
      or of_points.min(initial=0) < 0 or of_points.max(initial=0) >= levels.size):
    raise ValueError(
        f"{name}.groups.of_points must be [N] = [{num_points}] integers in 0 ... {levels.size - 1} (one group "
        f"per point, G = len(levels) = {levels.size}); got {of_points.dtype.name} {of_points.shape}.")
  before = None if previous is None else previous.groups
  if before is not None and (before.name, len(before.levels)) != (groups.name, levels.size):
    raise ValueError(
        f"the refreshed {name}'s groups are {groups.name!r} with {levels.size} groups, and the ones it "
        f"replaces {before.name!r} with {len(before.levels)}; a refresh keeps them.")
