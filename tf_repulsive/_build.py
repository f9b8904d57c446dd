"""Applying a batcher to a dataset: reading it once, building the sampler's drawer and the parts around the draw.

`build` returns a `Built`: the drawer, the elements, and the objects that own the stream's state
(its record, the refreshes of a `ModelSpace`, the data files, the inclusion weights). It also
traces the draw once, the trace the stream copies in, and checks the first batch.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _arrays
from tf_repulsive import _contract
from tf_repulsive import _data_files
from tf_repulsive import _draw_record
from tf_repulsive import _drawers
from tf_repulsive import _inclusion_weights
from tf_repulsive import _model_space
from tf_repulsive import _options
from tf_repulsive import _reading
from tf_repulsive import _refresh
from tf_repulsive import _training_features


@dataclasses.dataclass(frozen=True, eq=False)
class Config:
  """What a batcher's build depends on (the arguments of `repulsive_batch`)."""

  batch_size: int
  sampler: _contract.Sampler
  features: Any  # None, a function of an element, or a ModelSpace
  labels: Any  # None or a function of an element
  seed: int
  key: tf.Tensor  # the stream's stateless key
  inclusion_weights: str | None  # None, or the form (`_inclusion_weights.UNBIASED`, `SELF_NORMALIZED`)
  options: _options.BatcherOptions

  @property
  def space(self) -> _model_space.ModelSpace | None:
    return self.features if isinstance(self.features, _model_space.ModelSpace) else None


class Built:
  """What applying a batcher to a dataset produced: the data, the drawer, and the parts around the draw."""

  def __init__(self, config: Config, drawer: _contract.BatchDrawer, data: _reading.Materialized,
               refresher: _refresh.FeatureRefresher | None):
    self.config = config
    self.drawer = drawer
    self.elements = data.elements
    self.labels = data.labels
    self.num_points = data.features.shape[0]
    # Created once, outside the dataset functions, so that the functions capture them as inputs.
    self.element_tensors = tf.nest.map_structure(_arrays.to_tensor, data.elements)
    options = config.options
    self.files = (None if options.data_dir is None
                  else _data_files.DataFiles(os.fspath(options.data_dir), options.verbose))
    # What the stream's functions read for an eager tensor: its file's contents (`data_dir`), or
    # the tensor itself, which they capture.
    self.read: Callable[[tf.Tensor], tf.Tensor] = (lambda value: value) if self.files is None else self.files.read
    self.record = _draw_record.DrawRecord(drawer.groups, regroupable=refresher is not None)
    self.refresher = refresher
    self.weights: _inclusion_weights.InclusionWeights | None = None
    if config.inclusion_weights:
      self.weights = _inclusion_weights.InclusionWeights(config.inclusion_weights, config.seed,
                                                         refreshable=refresher is not None, verbose=options.verbose)
      self.weights.install(config.sampler, drawer, self.num_points, config.batch_size)
    traced_draw = drawer.traced_draw()
    # A partial, not a lambda: TensorFlow counts traces per code object, and would call one trace
    # per batcher "retracing" after a few batchers.
    copied_draw = tf.function(functools.partial(_drawers.checked_draw, drawer, config.key,
                                                batch_size=config.batch_size))
    # The function whose trace the stream copies in: the batcher's own trace for a drawer without
    # one (`BatchDrawer.traced_draw`), also for one with it under `data_dir`, where the copy is
    # where every array the draw takes passes through `read`. None: the stream calls `draw`.
    self.copied_draw = copied_draw if traced_draw is None or self.files is not None else None
    # The draw covering a step, for `batch_indices` and the record.
    self.draw_once = copied_draw if traced_draw is None else functools.partial(traced_draw, config.key)

  def draws_of(self, first_step: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """`[count, k]` indices and `[count]` fallback counts of the batches of `first_step` onwards.

    One draw covers `steps_per_draw` steps, so consecutive steps take one draw per block of them.
    """
    steps_per_draw = self.drawer.steps_per_draw
    first_block = first_step - first_step % steps_per_draw
    drawn = [self.draw_once(tf.constant(block, tf.int64))
             for block in range(first_block, first_step + count, steps_per_draw)]
    rows = slice(first_step - first_block, first_step - first_block + count)
    return (np.concatenate([indices.numpy() for indices, _ in drawn])[rows],
            np.concatenate([fallback.numpy() for _, fallback in drawn])[rows])

  def draw_of(self, step: int) -> tuple[np.ndarray, int]:
    """The indices and fallback count of the batch of `step` (from the draw that covers it)."""
    indices, fallback = self.draws_of(step, 1)
    return indices[0], int(fallback[0])

  def installed_draws_of(self, first_step: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """`draws_of`, for steps drawn on the features installed (a ValueError otherwise)."""
    if self.refresher is not None:
      # A refresh's steps are consecutive: the first and the last step bound those in between.
      self.refresher.check_installed(first_step)
      self.refresher.check_installed(first_step + count - 1)
    return self.draws_of(first_step, count)

  def training_features(self) -> _training_features.TrainingFeatures:
    """The refresher's table of features from the training step, or a ValueError saying it has none."""
    if self.refresher is None or self.refresher.training is None:
      raise ValueError("this batcher takes no features from the training step: use "
                       "features=tf_repulsive.ModelSpace(..., from_training_step=True).")
    return self.refresher.training

  def install(self, features: np.ndarray, from_build: bool) -> None:
    """Hands the stream's drawer the state of a drawer built on refreshed `features`."""
    drawer = build_drawer(self.config, features, self.labels, previous=self.drawer)
    self.drawer.refresh_from(drawer)
    self.record.regroup(drawer.groups)
    # The build's features come with the build's inclusion weights.
    if self.weights is not None and not from_build:
      self.weights.install(self.config.sampler, drawer, self.num_points, self.config.batch_size)


def build(config: Config, dataset: tf.data.Dataset) -> Built:
  """Reads `dataset` once and builds the drawer and the parts of its stream."""
  sampler, options, space = config.sampler, config.options, config.space
  if config.inclusion_weights:
    _inclusion_weights.check_weighable(dataset.element_spec)
  if options.data_dir is not None:
    _data_files.check_mappable(dataset.element_spec)
  if sampler.label_kind not in ("class", "target"):
    raise ValueError(f"{type(sampler).__name__}.label_kind must be 'class' or 'target'; got {sampler.label_kind!r}.")
  # A ModelSpace batcher measures distances on the model's features (computed below), not the input's.
  feature_fn = _no_input_features if space is not None else config.features
  data = _reading.materialize(dataset, feature_fn, config.labels, sampler.needs_labels, options.max_elements,
                              options.verbose, sampler.label_kind)
  num_points = data.features.shape[0]
  if config.batch_size > num_points:
    raise ValueError(
        f"`batch_size` = {config.batch_size} exceeds the dataset size N = {num_points}; a batch "
        "holds distinct elements.")
  if space is None:
    built = Built(config, build_drawer(config, data.features, data.labels), data, refresher=None)
  else:
    # The model as it is now: the drawer's shapes and the build's checks. Which refresh the
    # stream draws on is installed later, by `refresh_features`.
    build_features = _model_space.compute(space, data.elements)
    drawer = _refresh.refuse_unrefreshable(sampler, build_drawer(config, build_features, data.labels))
    training = None
    if space.from_training_step:
      _, source_labels = _model_space.model_inputs(data.elements, space.source)
      training = _training_features.TrainingFeatures(
          space, build_features, None if source_labels is None else np.asarray(source_labels), config.batch_size)
    built = Built(config, drawer, data, _refresh.FeatureRefresher(space, data.elements, build_features, training))
  _check_drawer_needs(built.drawer, config, dataset.element_spec)
  # Traces the draw (the stream copies that trace in) and checks the fill at step 0.
  _warn_if_first_batch_needs_the_fill(built)
  return built


def _check_drawer_needs(drawer: _contract.BatchDrawer, config: Config, element_spec: Any) -> None:
  """Refuses what a drawer that weighs its batches, or learns from losses, cannot work with."""
  name = type(config.sampler).__name__
  weighs = tf.function(drawer.sample_weights).get_concrete_function(
      tf.TensorSpec([drawer.steps_per_draw, config.batch_size], tf.int32)).structured_outputs is not None
  if weighs:
    if config.inclusion_weights is not None:
      raise ValueError(f"{name} weighs its batches itself: build the batcher without inclusion_weights.")
    _inclusion_weights.check_weighable(element_spec, name)
  if drawer.learns_from_losses:
    if drawer.steps_per_draw != 1:
      raise ValueError(f"{type(drawer).__name__} learns from losses and must draw one step per draw; its "
                       f"steps_per_draw is {drawer.steps_per_draw}.")
    if config.options.data_dir is not None:
      raise ValueError(
          f"{name} draws on the losses this process records, and a stream shipped elsewhere (what data_dir "
          "is for) could not see them: build the batcher without a data_dir.")


def build_drawer(config: Config, features: np.ndarray, labels: np.ndarray | None,
                 previous: _contract.BatchDrawer | None = None) -> _contract.BatchDrawer:
  """The sampler's drawer for these features (replacing `previous`), checked against the contract."""
  return _drawers.build(config.sampler, _contract.SamplingContext(
      features=features, labels=labels, batch_size=config.batch_size,
      # A refresh would compute the N x N matrix again (N^2 d work every R steps): more than
      # its lookups save in R steps.
      distance_cache_bytes=config.options.distance_cache_bytes if config.space is None else 0,
      verbose=config.options.verbose,
      # A `ModelSpace` stream draws one step at a time.
      max_steps_per_draw=_contract.MOST_STEPS_PER_DRAW if config.space is None else 1), previous)


def _no_input_features(*components: Any) -> tf.Tensor:
  """The feature function of a ModelSpace batcher's reading: the input's features are not used."""
  del components
  return tf.zeros([1])


def _warn_if_first_batch_needs_the_fill(built: Built) -> None:
  # A filled batch is still k distinct points, but partly uniform: say so once, at build time,
  # rather than let the repulsion weaken unnoticed.
  fallback = built.draw_of(0)[1]
  if not fallback:
    return
  batch_size, sampler, report = built.config.batch_size, built.config.sampler, built.drawer.report
  details = "".join(f", {name} {value:.4g}" for name, value in report.items())
  advice = ""
  if "radius" in report:  # a disk sampler's: say what to change
    favoured = _drawers.checked_pi(built.drawer, 0) is not None
    where = "on the points that pi favours at step 0" if favoured else "on this data"
    advice = (f" The radius is too large for this batch size {where}: pass radius=\"auto\" or a smaller "
              "`radius` to the sampler (or raise `max_darts` if the disks do fit).")
  # (The caller of `dataset.apply(batcher)`: build, the batcher's _build and __call__, apply.)
  warnings.warn(
      f"the darts filled only {batch_size - fallback} of {batch_size} points of the "
      f"first batch ({type(sampler).__name__}{details}); a uniform fill supplied the other "
      f"{fallback}.{advice}", RuntimeWarning, stacklevel=6)
