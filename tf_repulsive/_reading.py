"""Reading the input dataset once: what the elements are, their feature vectors and labels.

The element conventions are Keras': a tuple element is `(x,)`, `(x, y)` or `(x, y, sample_weight)`
(`keras.utils.unpack_x_y_sample_weight`), so the label is `y`, the second component, never the
sample weight; the features are every numeric tensor of `x` (one input, a tuple of inputs or a
dict of them), flattened and concatenated. A dict element (TFDS style) has its label under
"label" and its features in the one other numeric component. Everything else is said with
`repulsive_batch`'s `features` / `labels` functions, and every default that does not apply fails here, before reading,
with the argument to pass.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _arrays
from tf_repulsive import _progress
from tf_repulsive import _dataset_graph

_READ_CHUNK = 4096
# In the error of an element whose shape differs from the first element's.
_SHAPE_MISMATCH = "tf_repulsive: an element shape differs from that of the first element"
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True)
class Materialized:
  """The input dataset read once into memory."""

  elements: Any  # nested structure of numpy arrays with leading dimension N
  features: np.ndarray  # [N, d] float32
  labels: np.ndarray | None  # [N] int64 class ids, or float64 regression targets


@dataclasses.dataclass(frozen=True)
class _Conventions:
  """How an element's features and label are found, and how to write a function of an element."""

  feature_fn: Callable[..., Any]
  label_fn: Callable[..., Any] | None
  # The parameters of a function called like a `Dataset.map` function, e.g. "x, y, sample_weight".
  parameters: str
  # Whether `feature_fn` is the default, which keeps the numeric tensors of what it selects.
  default_features: bool


def materialize(dataset: tf.data.Dataset, feature_fn, label_fn, needs_labels: bool, max_elements: int,
                verbose: bool, label_kind: str) -> Materialized:
  """Reads the finite dataset once: elements, their feature vectors and (if needed) labels.

  The labels are int64 class ids for `label_kind` "class", float64 targets for "target".
  """
  label_dtype = tf.float64 if label_kind == "target" else tf.int64
  cardinality = _check_readable(dataset, max_elements)
  conventions = _conventions(dataset.element_spec, feature_fn, label_fn, needs_labels)
  is_tuple = isinstance(dataset.element_spec, tuple)

  # The flattened element component whose values are the feature vectors (one float32 input the
  # conventions select as it is), found while `select` is traced: then the features are a view of
  # that component's array, not a second copy of it.
  features_component: list[int] = []

  def select(*components):
    element = components if is_tuple else components[0]
    features = _call_like_map(conventions.feature_fn, element)
    if conventions.default_features:
      features = tuple(tensor for tensor in tf.nest.flatten(features) if _is_numeric(tensor.dtype))
      if len(features) == 1 and features[0].dtype == tf.float32:
        features_component[:] = [index for index, tensor in enumerate(tf.nest.flatten(element))
                                 if tensor is features[0]]
    if not needs_labels:
      return element, features
    return element, features, _call_like_map(conventions.label_fn, element)

  selected = dataset.map(select)
  shared = bool(features_component)
  _check_selected(selected.element_spec, conventions, needs_labels, label_kind)
  for difference in (_dataset_graph.run_to_run_difference(selected), _dataset_graph.per_element_randomness(selected)):
    if difference is not None:  # also in `feature_fn` and `label_fn`
      fix = (_dataset_graph.PER_STEP_RANDOMNESS_FIX if "dataset function" in difference else
             "repulsive_batch reads it once and draws each batch by index, so the batch of a step "
             "would hold other elements in every run, and after resuming in a new process.")
      raise ValueError(f"the input dataset has {difference}. {fix}")

  def convert(element, features, *label):
    vector = tf.zeros([0]) if shared else tf.concat(
        [tf.reshape(tf.cast(tensor, tf.float32), [-1]) for tensor in tf.nest.flatten(features)], 0)
    if not needs_labels:
      return element, vector
    return element, vector, _one_label(label[0], label_dtype)

  if feature_fn is None and label_fn is None and all(
      spec.shape.is_fully_defined() for spec in tf.nest.flatten(dataset.element_spec)):
    # The conventions only select components, which works on batches alike: batching first
    # runs the per-element work of tf.data once per chunk (about 20x faster to read).
    def convert_chunk(*components):
      element, features, *label = select(*components)
      # (Each element's size is static: a size of 0 cannot be inferred from -1.)
      vector = tf.zeros([tf.shape(features[0])[0], 0]) if shared else tf.concat(
          [tf.reshape(tf.cast(tensor, tf.float32), [tf.shape(tensor)[0], tensor.shape[1:].num_elements()])
           for tensor in tf.nest.flatten(features)], 1)
      if not needs_labels:
        return element, vector
      return element, vector, tf.reshape(tf.cast(label[0], label_dtype), [-1])  # one value per element

    chunks = dataset.batch(_READ_CHUNK).map(convert_chunk)
  else:
    chunks = _of_one_shape(selected.map(convert)).batch(_READ_CHUNK)
  total = cardinality if cardinality >= 0 else None
  description = ("reading the dataset" if total is not None
                 else f"reading the dataset (size unknown; at most max_elements = {max_elements})")
  try:
    with _progress.bar(description, total, verbose) as progress:
      arrays = _stack_chunks(chunks.as_numpy_iterator(), total, max_elements, progress)
  except tf.errors.InvalidArgumentError as error:
    if _SHAPE_MISMATCH not in error.message:
      raise
    raise ValueError(
        "elements (or the feature vectors of `features`) differ in shape across the dataset; "
        "they must have one shape to be batched. Pad or resize them first.") from error
  if not arrays:
    raise ValueError("the input dataset is empty; repulsive_batch needs at least batch_size elements.")
  read = tf.nest.pack_sequence_as(chunks.element_spec, arrays)
  features = read[1]
  if shared:
    component = tf.nest.flatten(read[0])[features_component[0]]
    features = component.reshape(len(component), -1)  # a view: the data is held once
  bad_rows = ~np.all(np.isfinite(features), axis=1)
  if np.any(bad_rows):
    first = int(np.argmax(bad_rows))
    raise ValueError(f"{int(bad_rows.sum())} elements have {_what_is_not_finite(selected, first)} (first "
                     f"at index {first}); distances are measured in float32. Clean or rescale them, or "
                     "pass a `features` function that maps them to finite float32 values.")
  return Materialized(elements=read[0], features=features, labels=read[2] if needs_labels else None)


def _check_readable(dataset: tf.data.Dataset, max_elements: int) -> int:
  """The dataset's cardinality, after refusing what cannot be read into batches of single elements."""
  cardinality = int(dataset.cardinality())
  if cardinality == tf.data.INFINITE_CARDINALITY:
    raise ValueError(
        "the input dataset is infinite; repulsive_batch draws from a finite dataset. Apply it "
        "before .repeat() (its batch stream is unbounded by itself).")
  endless = _dataset_graph.endless_upstream(dataset) if cardinality == tf.data.UNKNOWN_CARDINALITY else None
  if endless is not None:
    raise ValueError(
        f"the input dataset is endless: an infinite {endless} upstream, and no take() after it "
        "(filter, map and the like keep it endless). repulsive_batch draws from a finite "
        "dataset: apply it before .repeat(), or end the input with .take(n).")
  if cardinality > max_elements:
    raise ValueError(
        f"the input dataset has {cardinality} elements, more than `max_elements` = {max_elements}; "
        "pass a larger BatcherOptions(max_elements=...) or a smaller dataset.")
  for spec in tf.nest.flatten(dataset.element_spec):
    if not isinstance(spec, tf.TensorSpec):
      raise TypeError(
          f"elements must be dense tensors; got a {type(spec).__name__} component. Pad ragged or "
          "densify sparse components first (e.g. with Dataset.map).")
  upstream_batch = _dataset_graph.upstream_batch_size(dataset)
  if upstream_batch is not None:
    raise ValueError(
        f"the input dataset is already batched (a Dataset.batch({upstream_batch}) upstream, and "
        "every component has that leading dimension): repulsive_batch draws its batches from "
        "single elements. Apply it before .batch(), or call .unbatch() first.")
  return cardinality


def _conventions(spec: Any, feature_fn, label_fn, needs_labels: bool) -> _Conventions:
  """The feature and label functions for elements of `spec`: the caller's, or the conventions'."""
  if isinstance(spec, dict):
    return _dict_conventions(spec, feature_fn, label_fn, needs_labels)
  if not isinstance(spec, tuple):
    # One component, possibly nested: features only.
    if needs_labels and label_fn is None:
      raise ValueError(
          "this sampler needs class labels, but the elements are single tensors without one: use "
          "(x, y) elements or pass `labels`, e.g. labels=lambda x: ...")
    return _Conventions(feature_fn or (lambda x: x), label_fn, "x", default_features=feature_fn is None)
  parameters = {1: "x", 2: "x, y", 3: "x, y, sample_weight"}.get(len(spec))
  if parameters is None:
    # Keras' fit itself refuses tuples of other lengths.
    parameters = ", ".join(f"c{i}" for i in range(len(spec)))
    missing = [name for name, fn, needed in (("features", feature_fn, True), ("labels", label_fn, needs_labels))
               if needed and fn is None]
    if missing:
      raise ValueError(
          f"the elements are tuples of {len(spec)} components; the defaults follow Keras' (x,), (x, y) "
          f"and (x, y, sample_weight). Pass {' and '.join(f'`{name}`' for name in missing)}, called "
          f"with the components: e.g. features=lambda {parameters}: c0.")
  if needs_labels and label_fn is None:
    if len(spec) < 2:
      raise ValueError(
          "this sampler needs class labels but the elements are (x,) without a label; use (x, y) "
          "elements or pass `labels`.")
    if not isinstance(spec[1], tf.TensorSpec):
      raise TypeError(
          f"the label component y of (x, y, ...) is nested ({spec[1]}): pass `labels` to say "
          f"which class id to use, e.g. labels=lambda {parameters}: ...")
    label_fn = lambda *components: components[1]  # noqa: E731 (y, as Keras unpacks it)
  return _Conventions(feature_fn or (lambda *components: components[0]), label_fn, parameters,
                      default_features=feature_fn is None)


def _dict_conventions(spec: dict, feature_fn, label_fn, needs_labels: bool) -> _Conventions:
  """The default feature and label functions for dict elements: by name, never by sorted key order.

  The label is the "label" key (the TFDS convention); the features are the one other numeric
  component. Anything else is ambiguous and must be said with the argument.
  """
  keys = sorted(spec)
  if needs_labels and label_fn is None:
    if "label" not in spec:
      raise ValueError(
          f"the elements are dicts with keys {keys} and no 'label' key: pass `labels`, e.g. "
          "labels=lambda e: e['class_id'].")
    label_fn = lambda element: element["label"]  # noqa: E731
  default_features = feature_fn is None
  if default_features:
    numeric = [key for key in keys if key != "label" and isinstance(spec[key], tf.TensorSpec)
               and _is_numeric(spec[key].dtype)]
    if len(numeric) != 1:
      found = "none" if not numeric else " and ".join(repr(key) for key in numeric)
      raise ValueError(
          f"the elements are dicts with keys {keys}: the features default to the one numeric "
          f"component besides 'label', and found {found}. Pass `features`, e.g. "
          f"features=lambda e: e[{(numeric or keys)[0]!r}].")
    feature_key = numeric[0]
    feature_fn = lambda element: element[feature_key]  # noqa: E731
  return _Conventions(feature_fn, label_fn, "e", default_features=default_features)


def _check_selected(spec: tuple, conventions: _Conventions, needs_labels: bool, label_kind: str) -> None:
  """Refuses, before reading, features that are not numeric and labels that are not class ids (targets)."""
  features = tf.nest.flatten(spec[1])
  parameters = conventions.parameters
  if conventions.default_features and not features:
    raise TypeError(
        "features must be numeric, and the default features, the numeric tensors of x (of (x, y, "
        "...) elements, or of the element), are none: x holds only non-numeric tensors. Pass a "
        f"`features` function that returns the numeric vector distances are measured in: features=lambda "
        f"{parameters}: ...")
  for feature in features:
    if not isinstance(feature, tf.TensorSpec):
      raise TypeError(f"`features` must return dense tensors; got a {type(feature).__name__}.")
    if not _is_numeric(feature.dtype):
      raise TypeError(
          f"features must be numeric; got dtype {feature.dtype.name}. Pass a `features` function that "
          f"returns the numeric vector distances are measured in: features=lambda {parameters}: ...")
  if not needs_labels:
    return
  label = spec[2]
  default = "the default takes y of (x, y[, sample_weight]), or the 'label' key of a dict"
  if label_kind == "target":
    if not isinstance(label, tf.TensorSpec) or not (label.dtype.is_floating or label.dtype.is_integer):
      raise TypeError(f"labels must be one real-valued regression target per element ({default}); "
                      f"`labels` returned {label}. Pass a `labels` function that returns it.")
    if label.shape.num_elements() not in (None, 1):
      raise ValueError(f"labels must be one regression target per element; got shape {label.shape} ({default}). "
                       f"Pass a `labels` function that returns one value, e.g. labels=lambda {parameters}: ...")
    return
  if not isinstance(label, tf.TensorSpec):
    raise TypeError(f"labels must be one integer class id per element; `labels` returned {label}.")
  argmax = f"labels=lambda {parameters}: tf.argmax({'y' if parameters.startswith('x, y') else '...'})"
  if not label.dtype.is_integer:
    hint = (f"for one-hot labels pass {argmax}" if label.shape.rank and label.shape.num_elements() != 1
            else f"pass a `labels` function that returns them as integers (labels=lambda {parameters}: tf.cast(...))")
    raise TypeError(f"labels must be integer class ids; got dtype {label.dtype.name} ({default}): {hint}. "
                    "For real-valued regression targets, give Easy / Dense / Anneal PDS a `target_gap_quantile`.")
  if label.shape.num_elements() not in (None, 1):
    raise ValueError(
        f"labels must be one integer class id per element; got shape {label.shape} ({default}). "
        f"For one-hot labels pass {argmax}.")


def _one_label(label: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
  """The element's label as a `dtype` scalar; its shape holds one value (checked when not static)."""
  if label.shape.num_elements() is None:
    one = tf.debugging.assert_equal(tf.size(label), 1, message="labels must be one value per element")
    with tf.control_dependencies([one]):
      label = tf.identity(label)
  return tf.reshape(tf.cast(label, dtype), [])


def _what_is_not_finite(selected: tf.data.Dataset, index: int) -> str:
  """"NaN or infinite features", or, when they are finite before the cast, their float32 overflow."""
  element = next(iter(selected.skip(index).take(1)))
  values = [np.asarray(tensor, np.float64) for tensor in tf.nest.flatten(element[1])]
  if all(np.all(np.isfinite(value)) for value in values):
    largest = max(float(np.max(np.abs(value), initial=0.0)) for value in values)
    return f"features beyond float32's range (|value| up to {largest:.3g} > {_FLOAT32_MAX:.3g})"
  return "NaN or infinite features"


def _is_numeric(dtype: tf.DType) -> bool:
  return dtype.is_floating or dtype.is_integer or dtype.is_bool


def _call_like_map(fn: Callable[..., Any], element: Any) -> Any:
  return fn(*element) if isinstance(element, tuple) else fn(element)


def _stack_chunks(chunks, total: int | None, max_elements: int, progress) -> list[np.ndarray]:
  """The chunks' leaves stacked into arrays TensorFlow can share (see `_arrays`).

  With a known `total` each leaf is written into its final array as it is read; otherwise the
  chunks are kept and each is freed as it is copied into place. Either way the peak is the data
  plus about one chunk.
  """
  arrays, pending, rows = None, [], 0
  for chunk in chunks:
    leaves = tf.nest.flatten(chunk)
    count = len(leaves[0])
    if rows + count > max_elements:
      raise ValueError(
          f"the input dataset has more than `max_elements` = {max_elements} elements (or is "
          "endless); pass a larger BatcherOptions(max_elements=...) or a smaller dataset.")
    if total is None:
      pending.append(leaves)
    else:
      if arrays is None:
        arrays = [_arrays.empty((total,) + leaf.shape[1:], leaf.dtype) for leaf in leaves]
      for array, leaf in zip(arrays, leaves):
        array[rows:rows + count] = leaf
    rows += count
    progress.update(count)
  if arrays is not None:
    return arrays
  if not pending:
    return []
  arrays = [_arrays.empty((rows,) + leaf.shape[1:], leaf.dtype) for leaf in pending[0]]
  pending.reverse()
  rows = 0
  while pending:
    leaves = pending.pop()
    count = len(leaves[0])
    for array, leaf in zip(arrays, leaves):
      array[rows:rows + count] = leaf
    rows += count
  return arrays


def _of_one_shape(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`dataset` with every component checked against the first element's shape, where the spec leaves it open.

  The check fails with `_SHAPE_MISMATCH` in its message, so that reading can tell ragged data from
  any other failure without relying on the wording of TensorFlow's own errors.
  """
  specs = tf.nest.flatten(dataset.element_spec)
  if all(spec.shape.is_fully_defined() for spec in specs):
    return dataset
  first = next(iter(dataset.take(1)), None)
  if first is None:
    return dataset  # empty: reported as such after reading
  shapes = [tensor.shape for tensor in tf.nest.flatten(first)]

  def checked(*parts):
    flat = tf.nest.flatten(parts)
    checks = []
    for tensor, shape in zip(flat, shapes):
      if not tensor.shape.is_fully_defined():
        same = tf.logical_and(tf.equal(tf.rank(tensor), shape.rank),
                              tf.reduce_all(tf.equal(tf.shape(tensor)[:shape.rank], shape.as_list())))
        checks.append(tf.debugging.Assert(same, [_SHAPE_MISMATCH, tf.shape(tensor)]))
    with tf.control_dependencies(checks):
      flat = [tf.ensure_shape(tensor, shape) for tensor, shape in zip(flat, shapes)]
    return tf.nest.pack_sequence_as(parts, flat)

  return dataset.map(checked)
