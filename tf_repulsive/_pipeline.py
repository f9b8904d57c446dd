"""`repulsive_batch`: the tf.data transformation that draws each mini-batch from a point process.

The batches are a map over a stream of step numbers: the batch of step n is a pure function of
(seed, n), and n itself is data (a `Dataset.range` position), so iterator checkpoints, tf.data
service and `tf.distribute` carry it like any other element.

`RepulsiveBatcher` is the handle to the stream, which `_stream` assembles. The jobs around the draw live
in modules of their own, each owning its state and its messages: where a stream starts
(`_stream_start`), what the stream records (`_draw_record`), the refreshes of a `ModelSpace`
(`_refresh`), arrays as files (`_data_files`) and inclusion weights (`_inclusion_weights`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _build
from tf_repulsive import _checks
from tf_repulsive import _contract
from tf_repulsive import _data_files
from tf_repulsive import _dataset_graph
from tf_repulsive import _draw_record
from tf_repulsive import _drawers
from tf_repulsive import _inclusion_weights
from tf_repulsive import _model_space
from tf_repulsive import _options
from tf_repulsive import _stream
from tf_repulsive import _stream_start
from tf_repulsive import _training_features

_KEY_SALT = 0x5EED


# Public names the batcher had, and what replaced them.
_REMOVED = {
    "allow_build_probe": "the package's callbacks let a stream deliver its build probe themselves",
    "transformations_after": "give the callback the dataset fit trains on, AnnealingCallback(batcher, dataset=...), "
                             "which checks the transformations after the batcher",
    "last_start": "the step at which the last stream started is batcher.stats().last_start",
    "labels": "the [N] labels of the elements are batcher.element_labels (`labels=` is the function that reads them)",
    "model_space": "the ModelSpace is the one passed as `features=`",
}


class RepulsiveBatcher:
  """A `repulsive_batch` pipeline: what `Dataset.apply` takes, and the handle to its batches.

  `dataset.apply(batcher)` reads the dataset once and returns the stream of its batches. The
  batch of step n is one draw of the sampler over the whole dataset, a pure function of
  (seed, n). The stream is unbounded: give `model.fit` its `steps_per_epoch`. A stream starts at
  `start_step`, or, with `start_step=None`, where `AnnealingCallback(batcher)` (or `start_at`)
  says. A batcher applies to one dataset.

  Attributes:
    batch_size: k, the global batch.
    sampler: the sampler configuration.
    seed: the seed of the draws.
    start_step: the fixed first step of every stream, or None (set by the callbacks or `start_at`).
    inclusion_weights: None, or the form of the inverse inclusion probabilities each batch
      carries as Keras sample weights ("unbiased" or "self_normalized").
    options: the build's `BatcherOptions`.
  """

  def __init__(self, batch_size: int, sampler: _contract.Sampler, *, features: Any, labels: Any, seed: int,
               start_step: int | None, inclusion_weights: str | None, options: _options.BatcherOptions):
    self.batch_size = batch_size
    self.sampler = sampler
    self.seed = seed
    self.start_step = start_step
    self.inclusion_weights = inclusion_weights
    self.options = options
    self._config = _build.Config(batch_size=batch_size, sampler=sampler, features=features, labels=labels, seed=seed,
                                 key=tf.constant([seed, _KEY_SALT], tf.int64), inclusion_weights=inclusion_weights,
                                 options=options)
    self._start = _stream_start.StreamStart(start_step)
    self._built: _build.Built | None = None
    self._stream: _stream.BatchStream | None = None
    self._per_replica_slices = False

  def __call__(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The stream of global batches of `dataset` (what `Dataset.apply` calls)."""
    self._stream = _stream.BatchStream(self._build(dataset), self._start)
    return self._stream.global_batches()

  def per_replica(self, input_context: tf.distribute.InputContext) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """The form of this batcher for `distribute_datasets_from_function`, given its `input_context`.

    Returns a function for `Dataset.apply`. Its stream holds, for each step, this input
    pipeline's replicas' slices of the global draw, in replica order: replica r of step n gets
    elements r·b ... (r + 1)·b − 1 of draw n, b = batch_size / num_replicas_in_sync.
    """
    if not isinstance(input_context, tf.distribute.InputContext):
      raise TypeError(f"`input_context` must be a tf.distribute.InputContext; got {input_context!r}.")
    if self._config.space is not None:
      raise ValueError(
          "a ModelSpace batcher refreshes its features in this process and draws its global batches "
          "here: give the strategy its stream (strategy.experimental_distribute_dataset, or fit under "
          "MirroredStrategy), not per_replica pipelines.")
    replicas = input_context.num_replicas_in_sync
    pipelines = input_context.num_input_pipelines
    if self.batch_size % replicas or replicas % pipelines:
      raise ValueError(
          f"`batch_size` = {self.batch_size} (the global batch) must be a multiple of the "
          f"{replicas} replicas in sync, spread evenly over {pipelines} input pipelines.")
    local = replicas // pipelines

    def apply(dataset: tf.data.Dataset) -> tf.data.Dataset:
      built = self._build(dataset)
      if built.drawer.learns_from_losses:
        raise ValueError(
            f"{type(self.sampler).__name__} draws on the losses this process records, and per_replica pipelines "
            "draw elsewhere: give the strategy the batcher's own stream (one worker).")
      self._per_replica_slices = True
      self._stream = _stream.BatchStream(built, self._start)
      return self._stream.replica_slices(replicas, input_context.input_pipeline_id * local, local)

    return apply

  # The handle: what callbacks, diagnostics and users ask of a built pipeline.

  @property
  def steps_per_epoch(self) -> int:
    """ceil(N / batch_size), the steps of one epoch (for `model.fit(steps_per_epoch=...)`)."""
    return math.ceil(self._require_built().num_points / self.batch_size)

  @property
  def num_points(self) -> int:
    """N, the number of elements the batches are drawn from."""
    return self._require_built().num_points

  @property
  def elements(self) -> Any:
    """The materialised elements, nested numpy arrays with leading dimension N."""
    return self._require_built().elements

  @property
  def element_labels(self) -> np.ndarray | None:
    """`[N]` the elements' labels (read by `labels=`), for samplers that need them; else None."""
    return self._require_built().labels

  @property
  def drawer(self) -> _contract.BatchDrawer:
    """The sampler's per-dataset draw (see `Sampler.build`)."""
    return self._require_built().drawer

  @property
  def sampler_state(self) -> Any:
    """The variables the draws depend on beyond (seed, step) (`BatchDrawer.state`), or None: checkpoint them.

    For `EpochPruning` and `ActiveBias`; a `RecordingModel` carries them in the model's checkpoints.
    """
    return self._require_built().drawer.state

  def record_losses(self, step: Any, losses: Any) -> tf.Operation:
    """Records `losses`, the `[k]` unweighted per-element losses of the batch of optimizer step `step`.

    For a sampler that learns from them: a custom loop calls it in each training step, after the
    loss (`RecordingModel` does in `fit`). A ValueError for another sampler.
    """
    return _drawers.checked_record_losses(self._require_built().drawer, self.sampler, self.batch_size, step, losses)

  @property
  def training_features(self) -> _training_features.TrainingFeatures:
    """The table of features from the training step (`ModelSpace(from_training_step=True)`): state to checkpoint."""
    return self._require_built().training_features()

  @property
  def per_replica_slices(self) -> bool:
    """Whether the stream holds replicas' slices (`per_replica`) rather than whole global batches."""
    return self._per_replica_slices

  @property
  def data_files(self) -> list[str]:
    """The files under `options.data_dir` the stream reads (every process that runs it must see them); [] without."""
    files = self._require_built().files
    return [] if files is None else files.paths

  def check_data_files(self, service: str, timeout: float = 60.0, contents: bool = False) -> int:
    """Checks, before the stream is shipped, that every tf.data service worker sees `data_files` whole.

    Returns the number of workers that answered. Raises a ValueError that names the files a
    worker does not see, sees at another length, or (with `contents`: every byte compared with
    the build's) with other bytes; a TimeoutError without an answer within `timeout` seconds.
    `service` is the dispatcher's address, as `tf.data.experimental.service.distribute` takes it.
    """
    return _data_files.check_seen_by_workers(self._require_built().files, service, timeout, contents)

  @property
  def inclusion_probabilities(self) -> np.ndarray | None:
    """`[N]` each element's estimated probability of being in a batch, behind `inclusion_weights`; else None.

    For a `ModelSpace` batcher, those of the refresh installed last.
    """
    weights = self._require_built().weights
    return None if weights is None else weights.probabilities

  def refresh_features(self, step: int) -> float:
    """Installs the features in force at optimizer step `step`; returns the seconds it took (`ModelSpace` batchers).

    The callbacks call this in `fit`. A custom loop calls it before it takes the batch of each
    step: a no-op except at a refresh (and, with `from_training_step`, the record of the step
    before). At a refresh's own step the features come from the model as it is now; between
    two refreshes (a resumed run), from the ModelSpace's `directory`.

    Raises:
      ValueError: for a batcher without a ModelSpace, or a step between two refreshes whose
        features were not saved.
    """
    built = self._require_built()
    if built.refresher is None:
      raise ValueError("this batcher measures distances on fixed features; refreshes need "
                       "repulsive_batch(..., features=tf_repulsive.ModelSpace(...)).")
    return built.refresher.refresh(_check_step(step), built.install)

  def batch_indices(self, step: int) -> np.ndarray:
    """The dataset indices of the global batch of step `step` (pure: the pipeline is not touched).

    Returns:
      `[batch_size]` int32 array of distinct indices into the input dataset, in acceptance order.

    Raises:
      TypeError, ValueError: for a step that is not an int >= 0, or a batcher not applied yet.
    """
    step = _check_step(step)
    return self._require_built().installed_draws_of(step, 1)[0][0]

  def fallback_points(self, step: int) -> int:
    """How many points of the batch of `step` the fallback fill supplied (pure)."""
    step = _check_step(step)
    return int(self._require_built().installed_draws_of(step, 1)[1][0])

  def pi(self, step: int) -> np.ndarray | None:
    """The distribution over the drawer's point groups that the draws follow at `step`, or None.

    For Dense and Anneal PDS: pi over the mingling values 0, 1/K, ..., 1 (`BatchDrawer.pi`).
    """
    step = _check_step(step)
    return _drawers.checked_pi(self._require_built().drawer, step)

  def group_mixes(self, steps) -> np.ndarray | None:
    """`[len(steps), G]` the share of each point group in the batches of `steps`, or None without groups.

    Read from what the stream recorded as it drew those steps in this process. Steps it did not
    draw here, or drew more than 4096 steps ago, are drawn again.
    """
    if self._require_built().drawer.groups is None:
      return None
    counts = self._recorded(steps)[0][:, 1:].astype(np.float64)
    return counts / counts.sum(axis=1, keepdims=True)

  def fallback_counts(self, steps) -> np.ndarray:
    """`[len(steps)]` points of each step's batch that the fallback fill supplied (as `fallback_points`).

    Read as `group_mixes` reads its steps.
    """
    return self._recorded(steps)[0][:, 0]

  def _recorded(self, steps, redraw_at_most: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per step `[fallback points, points per group ...]` from the record, and which steps it holds.

    For the callbacks' logs. Steps the record lacks are drawn again when there are at most
    `redraw_at_most` of them (None: any number; a step of another refresh then raises).
    """
    built = self._require_built()
    steps = _draw_record.checked_steps(steps, _check_step)
    refresher = built.refresher

    def redraw(step: int) -> tuple[np.ndarray, int]:
      # (Any step, without a bound: one of a refresh not installed raises.)
      if refresher is not None and redraw_at_most is None:
        refresher.check_installed(step)
      return self._draw_of(step)

    # Only steps of the refresh installed can be drawn again when the caller bounds the redraws.
    redrawable = (steps // refresher.space.refresh_every == refresher.installed()
                  if refresher is not None and redraw_at_most is not None else np.ones(steps.shape, bool))
    return built.record.rows(steps, redraw, built.drawer.groups, redrawable, redraw_at_most)

  def stats(self) -> _draw_record.SamplingStats:
    """Counters of the draws (and refreshes) this pipeline made in this process."""
    built = self._require_built()
    return built.record.stats(built.drawer.report, built.refresher, self._start.last_start())

  def start_at(self, step: int) -> None:
    """Makes the next stream of this batcher (a new iterator) start at `step` (`start_step=None` batchers).

    `AnnealingCallback` calls it at every epoch. One call starts one stream: a later stream
    without a call of its own fails rather than repeat the batches of this one.
    """
    self._start.start_at(_check_step(step))

  def _allow_build_probe(self) -> None:
    """Lets the next stream of a callback-started batcher deliver one batch (of step 0) unstarted.

    For the package's callbacks: under a distribution strategy, Keras' `fit` takes one batch from
    a stream of its own to build the model before any callback runs, and drops that stream. A
    real start (`start_at`) replaces the allowance.
    """
    self._start.allow_build_probe()

  def _transformations_after(self, dataset: tf.data.Dataset) -> list[str] | None:
    """The tf.data transformations between this batcher's stream and `dataset`, nearest the stream first.

    E.g. `["Map", "Prefetch"]` for `ds.apply(batcher).map(f).prefetch(2)`; None if `dataset` is
    not made from the stream.
    """
    self._require_built()
    stream = None if self._stream is None else self._stream.dataset()
    if stream is None or not isinstance(dataset, tf.data.Dataset):
      return None
    return _dataset_graph.transformations_between(dataset, stream)

  def __getattr__(self, name: str):  # only for names not found: a removed public name says where it went
    raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}"
                         + (f": {_REMOVED[name]}." if name in _REMOVED else ""))

  def _require_built(self) -> _build.Built:
    if self._built is None:
      raise ValueError(
          "this batcher has not been applied to a dataset yet: build the pipeline with "
          "dataset.apply(batcher) first.")
    return self._built

  def _build(self, dataset: tf.data.Dataset) -> _build.Built:
    if not isinstance(dataset, tf.data.Dataset):
      raise TypeError(f"repulsive_batch applies to a tf.data.Dataset; got {type(dataset).__name__}.")
    if self._built is not None:
      raise ValueError(
          "this batcher already drives a pipeline; call tf_repulsive.repulsive_batch(...) again "
          "for another dataset (a sampler may configure any number of batchers).")
    self._built = _build.build(self._config, dataset)
    return self._built

  def _draw_of(self, step: int) -> tuple[np.ndarray, int]:
    return self._require_built().draw_of(step)

  def _batches_of(self, first_step: int, count: int) -> np.ndarray:
    """`[count, k]` what `batch_indices` gives for steps `first_step` onwards, one draw per block of steps."""
    return self._require_built().installed_draws_of(first_step, count)[0]


@dataclasses.dataclass(frozen=True)
class BatcherHooks:
  """What the package's callbacks, `RecordingModel` and diagnostics ask of a batcher beyond its public handle.

  The one place of that contract: no other module reads a batcher's private attributes.

  Attributes:
    space: the `ModelSpace` passed as `features=`, or None (fixed features).
    recorded: `(steps, redraw_at_most)` -> per step `[fallback points, points per group ...]`
      and which steps the record holds (`RepulsiveBatcher._recorded`).
    batches_of: `(first_step, count)` -> `[count, k]` the batches of those consecutive steps, as
      `batch_indices` gives them (`diagnostics.draw_batches`).
    allow_build_probe: lets the next stream deliver its build probe unstarted.
    transformations_after: the tf.data transformations between the stream and a dataset.
  """

  space: _model_space.ModelSpace | None
  recorded: Callable[..., tuple[np.ndarray, np.ndarray]]
  batches_of: Callable[[int, int], np.ndarray]
  allow_build_probe: Callable[[], None]
  transformations_after: Callable[[tf.data.Dataset], list[str] | None]


def hooks(batcher: RepulsiveBatcher) -> BatcherHooks:
  """The hooks of `batcher` for the package's callbacks, `RecordingModel` and diagnostics."""
  return BatcherHooks(space=batcher._config.space, recorded=batcher._recorded,  # pylint: disable=protected-access
                      batches_of=batcher._batches_of,  # pylint: disable=protected-access
                      allow_build_probe=batcher._allow_build_probe,  # pylint: disable=protected-access
                      transformations_after=batcher._transformations_after)  # pylint: disable=protected-access


def _check_step(step: Any) -> int:
  return _checks.integer(step, "step", 0)


@_options.refuses(_options.REMOVED_ARGUMENTS)
def repulsive_batch(
    batch_size: int,
    sampler: _contract.Sampler,
    *,
    features: Callable[..., tf.Tensor] | _model_space.ModelSpace | None = None,
    labels: Callable[..., tf.Tensor] | None = None,
    seed: int | None = None,
    start_step: int | None = None,
    inclusion_weights: str | None = None,
    options: _options.BatcherOptions | None = None,
) -> RepulsiveBatcher:
  """Draws every mini-batch of a finite dataset from a repulsive point process.

  For use with `tf.data.Dataset.apply`. The build reads the input into memory once and prepares
  the sampler (feature vectors, labels, mingling values, the radius). Then the batch of global
  step n is one draw of `sampler` over the whole dataset, as TensorFlow graph ops with stateless
  randomness keyed by `(seed, n)`. The result is an unbounded stream of batches with the
  structure `Dataset.batch` gives and a static leading dimension `batch_size`. One epoch is
  `batcher.steps_per_epoch` steps.

  Example:

  >>> import numpy as np, tensorflow as tf, tf_repulsive
  >>> points = tf.data.Dataset.from_tensor_slices(np.arange(100, dtype=np.float32)[:, None])
  >>> batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.VanillaPDS(radius=3.0), seed=0,
  ...                                        start_step=0)
  >>> batches = points.apply(batcher)
  >>> first = next(iter(batches)).numpy().ravel()
  >>> bool(np.all(np.diff(np.sort(first)) >= 3.0)), batcher.steps_per_epoch
  (True, 10)

  Args:
    batch_size: k, the number of distinct elements per batch (the global batch); 1 <= k <= N.
    sampler: a sampler configuration (`Uniform()`, `VanillaPDS()`, `AnnealPDS()`, ... or one of
      your own), reusable across batchers.
    features: where distances are measured. None (default): every numeric tensor of `x` for
      Keras' `(x,)`, `(x, y)` and `(x, y, sample_weight)` tuples, the one numeric component
      besides "label" of a dict, or a single tensor itself. A function of an element, called like
      a `Dataset.map` function, returning the tensors to measure on. Or a `ModelSpace`: features
      computed from the model being trained, refreshed as it trains (the sampler must be Uniform
      or a Poisson disk sampler).
    labels: a function of an element returning its class id (or regression target), for the
      samplers that need labels. None (default): `y` of Keras tuples, or the "label" key of dicts.
    seed: the seed of the draws, a 64-bit integer. None: drawn as TensorFlow ops draw theirs, so
      reproducible after `tf.random.set_seed` / `keras.utils.set_random_seed`.
    start_step: the step of the stream's first batch. None (default): set by
      `AnnealingCallback(batcher)` to the optimizer's step when `fit` starts; iterating without
      it raises. An int: fixed (custom loops, tf.data service).
    inclusion_weights: weight every element of a batch by the inverse of pi_i, its probability of
      being in a batch. "unbiased": w_i = k / (N pi_i), so that Keras' mean loss is an unbiased
      (Horvitz–Thompson) estimate of the dataset's mean loss. "self_normalized": 1 / pi_i scaled
      to average 1 over the global batch, the ratio estimate (less variance, biased at finite k).
      None (default): no weights. The elements become `(x, y, sample_weight)`. Needs `(x, y)` or
      `(x, y, sample_weight)` elements and a sampler whose law is the same at every step:
      Uniform, VanillaPDS, EasyPDS, DensePDS, Importance, ImportancePDS or Marginals.
    options: a `BatcherOptions` of the build's deployment and tuning knobs (memory bounds,
      `data_dir`, progress bars). None: the defaults.

  Returns:
    `RepulsiveBatcher`: `dataset.apply(batcher)` gives the batches; the batcher is the handle
    for `steps_per_epoch`, `batch_indices(step)`, `stats()` and the callbacks.

  Raises:
    TypeError: for arguments of the wrong type (a removed argument's message names its
      replacement), ragged or sparse components, non-numeric features, non-integer labels.
    ValueError: for batch_size outside [1, N], an empty or infinite dataset, an input that differs
      from run to run or carries randomness (apply augmentation after the batcher), elements
      whose features or labels the defaults cannot tell, non-finite features, missing labels or
      a single class for the mingling samplers, a batcher applied twice, string elements or a
      ModelSpace with a `data_dir`.
  """
  batch_size = _checks.integer(batch_size, "batch_size", 1)
  if not isinstance(sampler, _contract.Sampler):
    raise TypeError(
        f"`sampler` must be a tf_repulsive sampler (an instance of a tf_repulsive.Sampler subclass, "
        f"such as tf_repulsive.VanillaPDS(), or one of your own); got {sampler!r}.")
  if features is not None and not callable(features) and not isinstance(features, _model_space.ModelSpace):
    raise TypeError(
        f"`features` must be None, a function of an element or a tf_repulsive.ModelSpace; got {features!r}.")
  if labels is not None and not callable(labels):
    raise TypeError(f"`labels` must be a function of an element or None; got {labels!r}.")
  if seed is not None:
    seed = _checks.integer(seed, "seed")
    if not -2**63 <= seed < 2**63:
      raise ValueError(f"`seed` must be a 64-bit integer, in [-2**63, 2**63 - 1]; got {seed}.")
  if start_step is not None:
    start_step = _check_step(start_step)
  inclusion_weights = _inclusion_weights.checked_form(inclusion_weights)
  if options is None:
    options = _options.BatcherOptions()
  elif not isinstance(options, _options.BatcherOptions):
    raise TypeError(f"`options` must be a tf_repulsive.BatcherOptions or None; got {options!r}.")
  if options.data_dir is not None and isinstance(features, _model_space.ModelSpace):
    raise ValueError(
        "a ModelSpace batcher refreshes its features in this process, and a stream shipped elsewhere "
        "(what data_dir is for) could not follow them: pass a ModelSpace or a data_dir, not both.")
  if seed is None:
    # Like TensorFlow's own ops with seed=None: reproducible under tf.random.set_seed (or
    # keras.utils.set_random_seed), random otherwise.
    seed = int(tf.random.uniform([], maxval=2**62, dtype=tf.int64))
  return RepulsiveBatcher(batch_size, sampler, features=features, labels=labels, seed=seed, start_step=start_step,
                          inclusion_weights=inclusion_weights, options=options)

