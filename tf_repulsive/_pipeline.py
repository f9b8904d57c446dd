"""`repulsive_batch`: the tf.data transformation that draws each mini-batch from a point process."""

from __future__ import annotations

import dataclasses
import math
import numbers
import random
import warnings
import weakref
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _mingling
from tf_repulsive import _radius
from tf_repulsive import _samplers

_READ_CHUNK = 4096
_DEFAULT_MAX_ELEMENTS = 10_000_000
_DEFAULT_DISTANCE_CACHE_BYTES = 512 * 2**20
_KEY_SALT = 0x5EED

# The runtime (step clock, statistics, draw function) of the pipeline each sampler drives.
_RUNTIMES: "weakref.WeakKeyDictionary[_samplers.Sampler, PipelineRuntime]" = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class SamplingStats:
  """Counters of a pipeline since it was built (not part of iterator checkpoints).

  Attributes:
    batches: batches drawn.
    fallback_batches: batches the darts could not fill within `max_darts` (radius too large for
      the data near the packing limit); their remaining slots were filled uniformly at random.
    fallback_points: points supplied by that fill, over all batches.
    next_epoch_step: global step n at which the next epoch (new iterator) will start.
    radius: the disk radius in use (the estimate when the sampler's is None); None without disks.
  """

  batches: int
  fallback_batches: int
  fallback_points: int
  next_epoch_step: int
  radius: float | None


@dataclasses.dataclass(frozen=True)
class _Materialized:
  """The input dataset read once into memory."""

  elements: Any  # nested structure of numpy arrays with leading dimension N
  features: np.ndarray  # [N, d] float32
  labels: np.ndarray | None  # [N] int64


class PipelineRuntime:
  """State shared by every iterator of one `repulsive_batch` pipeline.

  The step clock holds the global step at which the next iteration (epoch) starts. An iteration
  reads its start step from the clock and moves the clock past its block of steps. The start step
  is part of the iterator's state and restoring an iterator moves the clock past its block again,
  so a restored iterator continues with exactly the steps (hence batches) it would have drawn,
  and the iterations after it follow on.
  """

  def __init__(self, drawer: _samplers.BatchDrawer, elements: Any, labels: np.ndarray | None,
               categories: np.ndarray | None, num_categories: int, radius: float | None, seed: int,
               steps_per_epoch: int):
    self.drawer = drawer
    self.elements = elements  # the materialised input: nested numpy arrays, leading dimension N
    self.labels = labels
    self.num_categories = num_categories
    self.radius = radius
    self.steps_per_epoch = steps_per_epoch
    self.key = tf.constant([seed, _KEY_SALT], tf.int64)
    self.categories = categories
    self.clock = tf.Variable(0, dtype=tf.int64, trainable=False, name="repulsive_step_clock")
    # Batches drawn, batches that needed the fallback fill, points the fill supplied.
    self._counters = tf.Variable(tf.zeros([3], tf.int64), trainable=False)

  def batch_indices(self, step: int) -> np.ndarray:
    """The `[k]` point indices of the batch drawn at global step `step` (pure; no counters)."""
    return self._draw(tf.constant(step, tf.int64))[0].numpy()

  def fallback_points(self, step: int) -> int:
    """How many points of the batch at `step` the fallback fill supplied (pure; no counters)."""
    return int(self._draw(tf.constant(step, tf.int64))[1])

  @tf.function
  def _draw(self, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return self.drawer.draw(self.key, step)

  def pi(self, step: int) -> np.ndarray | None:
    """pi over mingling values at `step` for Dense / Anneal PDS, else None."""
    if self.drawer.category_pi is None:
      return None
    pi = self.drawer.category_pi(tf.constant(step, tf.int64))
    return np.asarray(pi, dtype=np.float64) / float(np.sum(pi))

  def composition(self, step: int) -> np.ndarray | None:
    """Fraction of the batch at `step` per mingling value, when mingling values are known."""
    if self.categories is None:
      return None
    counts = np.bincount(self.categories[self.batch_indices(step)], minlength=self.num_categories)
    return counts / counts.sum()

  def stats(self) -> SamplingStats:
    batches, fallback_batches, fallback_points = self._counters.numpy().tolist()
    return SamplingStats(
        batches=batches,
        fallback_batches=fallback_batches,
        fallback_points=fallback_points,
        next_epoch_step=int(self.clock.numpy()),
        radius=self.radius)

  def dataset(self) -> tf.data.Dataset:
    """The batch dataset: `steps_per_epoch` batches per iteration, each a gather of the elements."""
    steps = self.steps_per_epoch
    elements = tf.nest.map_structure(tf.constant, self.elements)

    def epoch_start(_):
      return self.clock.read_value()

    def draw_batch(step):
      indices, fallback = self.drawer.draw(self.key, step)
      fallback = tf.cast(fallback, tf.int64)
      counted = self._counters.assign_add(
          tf.stack([tf.constant(1, tf.int64), tf.minimum(fallback, 1), fallback]))
      with tf.control_dependencies([counted]):
        return tf.nest.map_structure(lambda component: tf.gather(component, indices), elements)

    # Runs when an iteration starts and again when a saved iterator is restored (flat_map
    # rebuilds its inner dataset from the saved start step), so the clock always points past the
    # iteration in progress. The parallel map sits inside, so batches drawn ahead of the consumer
    # keep the iteration in progress until they are consumed.
    def epoch_batches(start):
      with tf.control_dependencies([self.clock.assign(start + steps)]):
        end = tf.identity(start + steps)
      return tf.data.Dataset.range(start, end).map(
          draw_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    options = tf.data.Options()
    # The clock is a variable: its value is not in iterator checkpoints, and need not be, since
    # each iteration's start step is (see the class docstring).
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return (tf.data.Dataset.from_tensors(tf.constant(0, tf.int64))
            .map(epoch_start)
            .flat_map(epoch_batches)
            .apply(tf.data.experimental.assert_cardinality(steps))
            .with_options(options))


def runtime_for(sampler: _samplers.Sampler) -> PipelineRuntime:
  """The runtime of the pipeline `sampler` drives; raises if it drives none."""
  runtime = _RUNTIMES.get(sampler)
  if runtime is None:
    raise ValueError(
        f"{type(sampler).__name__} instance has not been applied to a dataset: build the pipeline "
        "with dataset.apply(tf_repulsive.repulsive_batch(batch_size, sampler)) first.")
  return runtime


def sampling_stats(sampler: _samplers.Sampler) -> SamplingStats:
  """Counters of the pipeline `sampler` drives: batches drawn and how many needed the fallback fill.

  Args:
    sampler: a sampler already passed to `repulsive_batch` and applied to a dataset.

  Returns:
    A `SamplingStats` snapshot.

  Raises:
    ValueError: if the sampler drives no pipeline.
  """
  return runtime_for(sampler).stats()


def batch_indices(sampler: _samplers.Sampler, step: int) -> np.ndarray:
  """The dataset indices of the batch `sampler`'s pipeline draws at global step `step`.

  Batches are a pure function of (seed, step): this recomputes one without touching the pipeline,
  e.g. to inspect what a training step saw or to collect many draws for diagnostics.

  Args:
    sampler: a sampler already passed to `repulsive_batch` and applied to a dataset.
    step: the global step n (>= 0).

  Returns:
    `[batch_size]` int32 array of distinct indices into the input dataset, in acceptance order.

  Raises:
    ValueError: if the sampler drives no pipeline or `step` < 0.
  """
  if isinstance(step, bool) or not isinstance(step, numbers.Integral):
    raise TypeError(f"`step` must be an int; got {step!r}.")
  if step < 0:
    raise ValueError(f"`step` must be >= 0; got {step}.")
  return runtime_for(sampler).batch_indices(step)


def _warn_if_first_batch_needs_the_fill(runtime: PipelineRuntime, batch_size: int) -> None:
  # A filled batch is still k distinct points, but partly uniform: say so once, at build time,
  # rather than let the repulsion weaken unnoticed.
  fallback = runtime.fallback_points(0)
  if fallback:
    cause = ("The radius is too large for this batch size on this data" if runtime.drawer.category_pi is None
             else "The radius is too large for this batch size on the points that pi favours at step 0")
    warnings.warn(
        f"the darts filled only {batch_size - fallback} of {batch_size} points of the first batch "
        f"with disks of radius {runtime.radius:.4g}; a uniform fill supplied the other {fallback}. "
        f"{cause}: pass a smaller `radius` to the sampler (or raise `max_darts` if the disks do "
        "fit).", RuntimeWarning, stacklevel=4)


def _call_like_map(fn: Callable[..., Any], element: Any) -> Any:
  return fn(*element) if isinstance(element, tuple) else fn(element)


def _default_features(*components: Any) -> tf.Tensor:
  return tf.nest.flatten(components)[0]


def _default_label(*components: Any) -> tf.Tensor:
  return tf.nest.flatten(components)[-1]


def _as_feature_vector(features: Any) -> tf.Tensor:
  if not isinstance(features, (tf.Tensor, np.ndarray)) and not tf.is_tensor(features):
    raise TypeError(f"`feature_fn` must return a tensor; got {type(features).__name__}.")
  if not (features.dtype.is_floating or features.dtype.is_integer or features.dtype.is_bool):
    raise TypeError(
        f"features must be numeric; got dtype {features.dtype.name}. Pass a `feature_fn` that "
        "returns the numeric vector distances are measured in.")
  return tf.reshape(tf.cast(features, tf.float32), [-1])


def _as_label(label: Any) -> tf.Tensor:
  if not tf.is_tensor(label) or not label.dtype.is_integer:
    dtype = getattr(label, "dtype", type(label).__name__)
    raise TypeError(
        f"labels must be integer class ids; got {dtype}. The default `label_fn` takes the last "
        "component of each element; pass `label_fn`, e.g. lambda x, y: tf.argmax(y) for one-hot.")
  if label.shape.rank is not None and label.shape.num_elements() not in (None, 1):
    raise ValueError(
        f"`label_fn` must return one integer class id per element; got shape {label.shape}. "
        "For one-hot labels use lambda x, y: tf.argmax(y).")
  return tf.reshape(tf.cast(label, tf.int64), [])


def _materialize(dataset: tf.data.Dataset, feature_fn, label_fn, needs_labels: bool,
                 max_elements: int) -> _Materialized:
  """Reads the finite dataset once: elements, their feature vectors and (if needed) labels."""
  cardinality = int(dataset.cardinality())
  if cardinality == tf.data.INFINITE_CARDINALITY:
    raise ValueError(
        "the input dataset is infinite; repulsive_batch draws from a finite dataset. Apply it "
        "before .repeat().")
  for spec in tf.nest.flatten(dataset.element_spec):
    if not isinstance(spec, tf.TensorSpec):
      raise TypeError(
          f"elements must be dense tensors; got {type(spec).__name__}. Pad ragged or densify "
          "sparse components first (e.g. with Dataset.map).")
  is_tuple = isinstance(dataset.element_spec, tuple)
  if needs_labels and label_fn is None and len(tf.nest.flatten(dataset.element_spec)) < 2:
    raise ValueError(
        "this sampler needs class labels but the elements have a single component; use "
        "(features, label) elements or pass `label_fn`.")

  def extract(*components):
    element = components if is_tuple else components[0]
    features = _as_feature_vector(_call_like_map(feature_fn or _default_features, element))
    if not needs_labels:
      return element, features
    return element, features, _as_label(_call_like_map(label_fn or _default_label, element))

  chunks = []
  read = 0
  try:
    for chunk in dataset.map(extract).batch(_READ_CHUNK).as_numpy_iterator():
      chunks.append(chunk)
      read += len(chunk[1])
      if read > max_elements:
        raise ValueError(
            f"the input dataset has more than `max_elements` = {max_elements} elements (or is "
            "infinite); pass a larger max_elements or a smaller dataset.")
  except tf.errors.InvalidArgumentError as error:
    if "Cannot add tensor to the batch" not in error.message and "different shapes" not in error.message:
      raise
    raise ValueError(
        "elements (or the feature vectors of `feature_fn`) differ in shape across the dataset; "
        f"they must have one shape to be batched. Pad or resize them first. ({error.message})"
    ) from error
  if not chunks:
    raise ValueError("the input dataset is empty; repulsive_batch needs at least batch_size elements.")
  element_chunks = [chunk[0] for chunk in chunks]
  elements = tf.nest.map_structure(lambda *parts: np.concatenate(parts), *element_chunks)
  features = np.concatenate([chunk[1] for chunk in chunks])
  bad_rows = ~np.all(np.isfinite(features), axis=1)
  if np.any(bad_rows):
    raise ValueError(
        f"{int(bad_rows.sum())} elements have NaN or infinite features (first at index "
        f"{int(np.argmax(bad_rows))}); clean them or pass a `feature_fn` that maps them to finite values.")
  labels = np.concatenate([chunk[2] for chunk in chunks]) if needs_labels else None
  return _Materialized(elements=elements, features=features, labels=labels)


def repulsive_batch(
    batch_size: int,
    sampler: _samplers.Sampler,
    *,
    feature_fn: Callable[..., tf.Tensor] | None = None,
    label_fn: Callable[..., tf.Tensor] | None = None,
    seed: int | None = None,
    max_elements: int = _DEFAULT_MAX_ELEMENTS,
    distance_cache_bytes: int = _DEFAULT_DISTANCE_CACHE_BYTES,
) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
  """Draws every mini-batch of a finite dataset from a repulsive point process.

  For use with `tf.data.Dataset.apply`. The input is read into memory once (with feature vectors,
  labels, mingling values and the radius estimate: one-time preprocessing); then every batch is
  one draw of `sampler` over the whole dataset, as TensorFlow graph ops with stateless randomness
  keyed by `(seed, n)`, n the global step. One iteration (epoch) yields ceil(N / batch_size)
  batches with the structure `Dataset.batch` gives and a static leading dimension `batch_size`;
  each new iteration continues the step count, so epochs differ; `.repeat()` goes on.

  Args:
    batch_size: k, the number of distinct elements per batch; 1 <= k <= N.
    sampler: `Uniform()`, `VanillaPDS()`, `EasyPDS()`, `DensePDS(pi)` or `AnnealPDS()`. An instance
      drives one pipeline; create a new one per pipeline.
    feature_fn: called like a `Dataset.map` function on an element; returns the vector distances
      are measured in (Euclidean). Default: the first component, flattened, as float32.
    label_fn: likewise, returns the integer class label the mingling-index samplers need.
      Default: the last component.
    seed: seed of the batch draws; None picks one at random (batches differ run to run).
    max_elements: bound on how many elements are read; more raises (guards unknown-size inputs).
    distance_cache_bytes: when the N x N float32 squared-distance matrix fits in this many bytes
      (default 512 MiB: N up to ~11,500), it is computed once and disk tests become lookups;
      otherwise each batch computes its distances from the features (Gram blocks). 0 disables.

  Returns:
    A function from the input dataset to the batch dataset.

  Raises:
    TypeError: for arguments of the wrong type, non-numeric features, non-integer labels.
    ValueError: for batch_size outside [1, N], an empty or infinite dataset, ragged or non-finite
      features, missing labels, neighbors >= N, a sampler already driving a pipeline.
  """
  for value, name, least in ((batch_size, "batch_size", 1), (max_elements, "max_elements", 1),
                             (distance_cache_bytes, "distance_cache_bytes", 0)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
      raise TypeError(f"`{name}` must be an int; got {value!r}.")
    if value < least:
      raise ValueError(f"`{name}` must be >= {least}; got {value}.")
  if not isinstance(sampler, _samplers.Sampler):
    raise TypeError(
        f"`sampler` must be a tf_repulsive sampler (Uniform, VanillaPDS, EasyPDS, DensePDS, "
        f"AnnealPDS); got {sampler!r}.")
  for fn, name in ((feature_fn, "feature_fn"), (label_fn, "label_fn")):
    if fn is not None and not callable(fn):
      raise TypeError(f"`{name}` must be callable or None; got {fn!r}.")
  if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
    raise TypeError(f"`seed` must be an int or None; got {seed!r}.")
  if seed is None:
    seed = random.SystemRandom().randrange(2**62)

  def _apply_fn(dataset: tf.data.Dataset) -> tf.data.Dataset:
    if not isinstance(dataset, tf.data.Dataset):
      raise TypeError(f"repulsive_batch applies to a tf.data.Dataset; got {type(dataset).__name__}.")
    if sampler in _RUNTIMES:
      raise ValueError(
          f"this {type(sampler).__name__} instance already drives a pipeline; create a new sampler "
          "for each pipeline (it carries the pipeline's step clock).")
    data = _materialize(dataset, feature_fn, label_fn, sampler.needs_labels, max_elements)
    num_points = data.features.shape[0]
    if batch_size > num_points:
      raise ValueError(
          f"`batch_size` = {batch_size} exceeds the dataset size N = {num_points}; a batch holds "
          "distinct elements.")
    categories = None
    if sampler.uses_mingling:
      if not sampler.neighbors < num_points:
        raise ValueError(
            f"`neighbors` = {sampler.neighbors} must be < N = {num_points}; use fewer neighbours.")
      categories = _mingling.mingling_disagreements(data.features, data.labels, sampler.neighbors)
    radius = None
    if sampler.has_disk:
      radius = sampler.radius
      if radius is None:
        radius = _radius.half_median_distance(data.features) if num_points > 1 else 0.0
    drawer = sampler.build(_samplers.SamplingContext(
        features=data.features, labels=data.labels, categories=categories, batch_size=batch_size,
        radius=radius,
        distance_cache_bytes=distance_cache_bytes))
    runtime = PipelineRuntime(
        drawer, data.elements, data.labels, categories,
        num_categories=sampler.neighbors + 1 if sampler.uses_mingling else 0, radius=radius,
        seed=seed, steps_per_epoch=math.ceil(num_points / batch_size))
    _RUNTIMES[sampler] = runtime
    if sampler.has_disk:
      _warn_if_first_batch_needs_the_fill(runtime, batch_size)
    return runtime.dataset()

  return _apply_fn
