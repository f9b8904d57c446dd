"""Generated inputs and compositions: every build is a clear error naming the fix, or exact.

Hypothesis generates element structures (tuples of 1-4, nested tuples and dicts, dtypes from bool to
string, per-element shapes 0-D to 3-D, ragged and sparse components, NaN, inf and values beyond
float32), transformations before and after the batcher, samplers, batch and dataset sizes, and
checkpoint break points. The properties:

* the build raises a `ValueError` / `TypeError` whose message names what to pass or change, exactly
  when the documented conventions say the input cannot be read; otherwise
* the distances are measured on what the docs say (the radius estimate equals the one on the
  oracle's features), the labels are y (never the sample weight), and the delivered batches are
  the elements at `batch_indices(step)` for consecutive steps;
* in `fit`, a transformation after the batcher is refused before training, or every step trains on
  its draw;
* a restored iterator continues with exactly the batches the uninterrupted one delivered.

Runs derandomised (the same cases in every run) and bounded; the number of cases is printed at the end
of the test session.
"""

from __future__ import annotations

import warnings

import hypothesis
from hypothesis import strategies as st
import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _radius
from tf_repulsive import diagnostics

_SETTINGS = dict(deadline=None, derandomize=True, database=None,
                 suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large])
GENERATED: dict[str, int] = {}  # property -> cases run (printed by conftest.py)
# Words an error names when it says what to pass or change.
_FIXES = ("`features`", "`labels`", "features=", "labels=", "pass ", "Pass ", "apply it", "Apply it",
          "before the batcher", "after the batcher", "unbatch", "seed", "Clean", "rescale", "Pad", "densify", "classes",
          "deterministic")


def _count(name):
  GENERATED[name] = GENERATED.get(name, 0) + 1


def _assert_names_a_fix(error):
  message = str(error)
  assert any(fix in message for fix in _FIXES), message
  assert len(message) < 1200, message


# Element structures, with the oracle of the documented conventions.

_DTYPES = ("float32", "float64", "int32", "int64", "uint8", "bool", "string")


@st.composite
def _leaf(draw, size, allow_bad=True):
  """A component `[size, *shape]` of one dtype, and how it was made ("ragged"/"sparse"/"dense")."""
  dtype = draw(st.sampled_from(_DTYPES))
  shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
  rng = np.random.default_rng(draw(st.integers(0, 2**16)))
  values = rng.normal(size=(size,) + shape)
  if dtype == "string":
    array = np.vectorize(lambda v: f"s{v:.3f}")(values)
  elif dtype == "bool":
    array = values > 0
  elif dtype.startswith(("int", "uint")):
    array = np.abs(values * 10).astype(dtype)
  else:
    array = values.astype(dtype)
    flaw = draw(st.sampled_from(["none"] * 6 + (["nan", "inf", "huge"] if allow_bad else [])))
    if flaw != "none" and array.size:
      index = np.unravel_index(draw(st.integers(0, array.size - 1)), array.shape)
      array[index] = {"nan": np.nan, "inf": np.inf, "huge": 1e300 if dtype == "float64" else np.inf}[flaw]
  return array


@st.composite
def _x(draw, size):
  form = draw(st.sampled_from(["leaf", "leaf", "tuple", "dict"]))
  if form == "leaf":
    return draw(_leaf(size))
  if form == "tuple":
    return tuple(draw(_leaf(size)) for _ in range(draw(st.integers(1, 3))))
  names = draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=3, unique=True))
  return {name: draw(_leaf(size)) for name in names}


@st.composite
def _y(draw, size, classes):
  labels = np.arange(size) % classes
  form = draw(st.sampled_from(["int64", "int64", "int32", "column", "one_hot", "float", "nested"]))
  if form == "int64":
    return labels.astype(np.int64), form
  if form == "int32":
    return labels.astype(np.int32), form
  if form == "column":
    return labels[:, None].astype(np.int64), form
  if form == "one_hot":
    return np.eye(classes, dtype=np.float32)[labels], form
  if form == "float":
    return labels.astype(np.float32), form
  return (labels.astype(np.int64), labels.astype(np.int64)), form


@st.composite
def _elements(draw):
  """(elements as numpy structures, description) with the oracle's expected outcome."""
  size = draw(st.integers(24, 60))
  classes = draw(st.integers(1, 3))
  x = draw(_x(size))
  y, y_form = draw(_y(size, classes))
  form = draw(st.sampled_from(["(x,)", "(x, y)", "(x, y)", "(x, y, w)", "x", "dict", "4-tuple", "ragged", "sparse"]))
  weights = np.ones(size, np.float32) * 3
  if form == "(x,)":
    element = (x,)
  elif form == "(x, y)":
    element = (x, y)
  elif form == "(x, y, w)":
    element = (x, y, weights)
  elif form == "x":
    element = x
  elif form == "dict":
    element = {"image": x if not isinstance(x, (tuple, dict)) else tf.nest.flatten(x)[0], "label": y}
  elif form == "4-tuple":
    element = (x, y, weights, weights)
  else:
    element = (form, y)
  return element, dict(size=size, classes=classes, y_form=y_form, form=form, x=x, y=y)


def _numeric(array):
  return array.dtype.kind in "biuf"


def _oracle(element, facts, needs_labels):
  """(features [N, d] float64, labels, None) per the docs, or (None, None, the error type).

  The checks come in the documented order: structure, then dtypes, then values.
  """
  form, size = facts["form"], facts["size"]
  if form in ("ragged", "sparse"):
    return None, None, TypeError
  if isinstance(element, dict):
    # TFDS style: the label under "label", the features the one other numeric component.
    if needs_labels and "label" not in element:
      return None, None, ValueError
    numeric = [key for key, value in element.items() if key != "label" and not isinstance(value, (tuple, dict))
               and _numeric(value)]
    if len(numeric) != 1:
      return None, None, ValueError
    features, label = [element[numeric[0]]], element.get("label")
  else:
    components = element if isinstance(element, tuple) else (element,)
    if len(components) > 3 or (needs_labels and len(components) < 2):
      return None, None, ValueError
    if needs_labels and isinstance(components[1], (tuple, dict)):
      return None, None, TypeError
    features = [leaf for leaf in tf.nest.flatten(components[0]) if _numeric(leaf)]
    label = components[1] if len(components) >= 2 else None
    if not features:
      return None, None, TypeError
  labels = None
  if needs_labels:
    if isinstance(label, (tuple, dict)) or label.dtype.kind not in "iu":
      return None, None, TypeError
    if label.reshape(size, -1).shape[1] != 1:
      return None, None, ValueError
    labels = label.reshape(size).astype(np.int64)
  matrix = np.concatenate([leaf.reshape(size, -1).astype(np.float64) for leaf in features], axis=1)
  if not np.all(np.isfinite(matrix)) or np.any(np.abs(matrix) > np.finfo(np.float32).max):
    return None, None, ValueError
  if needs_labels and len(np.unique(labels)) < 2:
    return None, None, ValueError
  return matrix, labels, None


def _dataset(element):
  # (y may be nested: its first leaf has one row per element.)
  size = len(tf.nest.flatten(element[1])[0]) if isinstance(element, tuple) and len(element) > 1 else None
  if isinstance(element, tuple) and isinstance(element[0], str) and element[0] == "ragged":
    ragged = tf.ragged.constant([[1.0] * (i % 3 + 1) for i in range(size)])
    return tf.data.Dataset.from_tensor_slices((ragged, element[1]))
  if isinstance(element, tuple) and isinstance(element[0], str) and element[0] == "sparse":
    dense = np.eye(size, 4, dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((tf.sparse.from_dense(dense), element[1]))
  return tf.data.Dataset.from_tensor_slices(element)


@pytest.mark.slow
@hypothesis.settings(max_examples=24, **_SETTINGS)
@hypothesis.given(generated=_elements(), sampler_name=st.sampled_from(["vanilla_pds", "easy_pds"]),
                  batch_size=st.integers(1, 12))
def test_element_structures_build_exactly_or_name_the_fix(generated, sampler_name, batch_size):
  element, facts = generated
  _count("element structures")
  needs_labels = sampler_name == "easy_pds"
  features, labels, error = _oracle(element, facts, needs_labels)
  sampler = tf_repulsive.EasyPDS(neighbors=2) if needs_labels else tf_repulsive.VanillaPDS()
  batcher = tf_repulsive.repulsive_batch(batch_size, sampler, seed=1, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # batches near the packing limit
    if error is not None:
      with pytest.raises(error) as raised:
        _dataset(element).apply(batcher)
      _assert_names_a_fix(raised.value)
      return
    stream = _dataset(element).apply(batcher)
  assert batcher.stats().report["radius"] == pytest.approx(_radius.half_median_distance(features), rel=1e-5, abs=1e-30)
  if needs_labels:
    np.testing.assert_array_equal(batcher.element_labels, labels)
  for step, batch in enumerate(stream.take(3).as_numpy_iterator()):
    indices = batcher.batch_indices(step)
    assert len(set(indices.tolist())) == batch_size
    expected = tf.nest.map_structure(lambda leaf: leaf[indices], batcher.elements)
    for got, want in zip(tf.nest.flatten(batch), tf.nest.flatten(expected)):
      np.testing.assert_array_equal(got, want)


# Compositions before the batcher: read once in order, or refused.

_BEFORE = {
    "map": (lambda ds: ds.map(lambda x, i: (2.0 * x, i)), None),
    "filter": (lambda ds: ds.filter(lambda x, i: i % 3 != 0), None),
    "take": (lambda ds: ds.take(40), None),
    "cache": (lambda ds: ds.cache(), None),
    "prefetch": (lambda ds: ds.prefetch(2), None),
    "repeat_take": (lambda ds: ds.repeat(2).take(70), None),
    "shuffle_seeded": (lambda ds: ds.shuffle(16, seed=3), None),
    "shuffle": (lambda ds: ds.shuffle(16), ValueError),
    "batch_unbatch": (lambda ds: ds.batch(5).unbatch(), None),
    "batch": (lambda ds: ds.batch(5), ValueError),
    "repeat": (lambda ds: ds.repeat(), ValueError),
    "zip": (lambda ds: tf.data.Dataset.zip(ds, tf.data.Dataset.range(1000)).map(
        lambda e, j: (e[0] + 0.0 * tf.cast(j, tf.float32), e[1])), None),
    "random_map": (lambda ds: ds.map(lambda x, i: (x + tf.random.uniform([3], seed=1), i)), ValueError),
    "parallel_unordered": (
        lambda ds: ds.map(lambda x, i: (x, i), num_parallel_calls=2, deterministic=False), ValueError),
}


@pytest.mark.slow
@hypothesis.settings(max_examples=16, **_SETTINGS)
@hypothesis.given(names=st.lists(st.sampled_from(sorted(_BEFORE)), min_size=1, max_size=3),
                  sampler_name=st.sampled_from(["uniform", "vanilla_pds", "epoch_shuffle"]),
                  batch_size=st.integers(1, 8))
def test_compositions_before_the_batcher_are_read_once_in_order_or_refused(names, sampler_name, batch_size):
  _count("compositions before the batcher")
  tf.random.set_seed(None)
  points = np.random.default_rng(len(names)).normal(size=(60, 3)).astype(np.float32)

  def composed():
    # Built anew for the oracle too: a seeded shuffle reshuffles in each iteration of one dataset.
    dataset = tf.data.Dataset.from_tensor_slices((points, np.arange(60)))
    for name in names:
      dataset = _BEFORE[name][0](dataset)
    return dataset

  dataset = composed()
  refused = any(_BEFORE[name][1] is not None for name in names)
  sampler = {"uniform": tf_repulsive.Uniform, "vanilla_pds": tf_repulsive.VanillaPDS,
             "epoch_shuffle": tf_repulsive.EpochShuffle}[sampler_name]()
  batcher = tf_repulsive.repulsive_batch(batch_size, sampler, seed=2, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    if refused:
      with pytest.raises(ValueError) as raised:
        dataset.apply(batcher)
      _assert_names_a_fix(raised.value)
      return
    stream = dataset.apply(batcher)
  oracle = list(composed().as_numpy_iterator())
  np.testing.assert_array_equal(batcher.elements[1], [index for _, index in oracle])
  for step, (_, index) in enumerate(stream.take(3).as_numpy_iterator()):
    np.testing.assert_array_equal(index, batcher.elements[1][batcher.batch_indices(step)])


# Compositions after the batcher, given to the callback: refused before training, or every step
# trains its draw.

_AFTER = {
    "map": (lambda s: s.map(lambda x, y, i: (x * 2.0, y, i)), True),
    "prefetch": (lambda s: s.prefetch(2), True),
    "take_repeat": (lambda s: s.take(50).repeat(), True),
    "shuffle": (lambda s: s.shuffle(4, seed=1), False),
    "unbatch_batch": (lambda s: s.unbatch().batch(8), False),
    "filter": (lambda s: s.filter(lambda x, y, i: tf.reduce_min(i) >= 0), False),
    "skip": (lambda s: s.skip(1), False),
    "cache": (lambda s: s.take(4).cache().repeat(), False),
}


class _Fingerprint(keras.Model):
  """Records the sum of the index component of every batch it trains on."""

  def __init__(self):
    # (The default name, from the class name, starts with an underscore: not a valid name scope.)
    super().__init__(name="fingerprint")
    self.dense = keras.layers.Dense(3)
    self.seen = tf.Variable(tf.zeros([64], tf.int64), trainable=False)

  def call(self, x):
    return self.dense(x)

  def train_step(self, data):
    x, y, index = data
    step = self.optimizer.iterations
    self.seen.scatter_nd_update([[step % 64]], [tf.reduce_sum(index)])
    return super().train_step((x, y))


@pytest.mark.slow
@hypothesis.settings(max_examples=6, **_SETTINGS)
@hypothesis.given(names=st.lists(st.sampled_from(sorted(_AFTER)), min_size=1, max_size=2), steps=st.integers(2, 6))
def test_compositions_after_the_batcher_in_fit_are_refused_or_exact(names, steps):
  _count("compositions after the batcher")
  rng = np.random.default_rng(0)
  x = rng.normal(size=(80, 3)).astype(np.float32)
  batcher = tf_repulsive.repulsive_batch(8, tf_repulsive.VanillaPDS(radius="auto"), seed=4,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = tf.data.Dataset.from_tensor_slices((x, np.arange(80) % 3, np.arange(80))).apply(batcher)
  for name in names:
    stream = _AFTER[name][0](stream)
  keeps = all(_AFTER[name][1] for name in names)
  model = _Fingerprint()
  model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  if not keeps:
    with pytest.raises(ValueError) as raised:
      tf_repulsive.BatchStreamCallback(batcher, dataset=stream)
    _assert_names_a_fix(raised.value)
    return
  callback = tf_repulsive.BatchStreamCallback(batcher, dataset=stream)
  model.fit(stream, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[callback])
  seen = model.seen.numpy()[:2 * steps]
  np.testing.assert_array_equal(seen, diagnostics.draw_batches(batcher, 2 * steps).sum(axis=1))


# Checkpoints: a restored iterator continues exactly, at any break point.

_SAMPLERS = {"uniform": tf_repulsive.Uniform, "epoch_shuffle": tf_repulsive.EpochShuffle,
             "vanilla_pds": tf_repulsive.VanillaPDS, "easy_pds": lambda: tf_repulsive.EasyPDS(neighbors=3),
             "anneal_pds": lambda: tf_repulsive.AnnealPDS(neighbors=3)}


@pytest.mark.slow
@hypothesis.settings(max_examples=8, **_SETTINGS)
@hypothesis.given(sampler_name=st.sampled_from(sorted(_SAMPLERS)), size=st.integers(30, 90),
                  batch_size=st.integers(1, 20), break_point=st.integers(1, 40), callback_start=st.booleans())
def test_a_restored_iterator_continues_exactly(tmp_path_factory, sampler_name, size, batch_size, break_point,
                                               callback_start):
  _count("checkpoint break points")
  rng = np.random.default_rng(size)
  dataset = tf.data.Dataset.from_tensor_slices((rng.normal(size=(size, 2)).astype(np.float32),
                                                np.arange(size) % 3, np.arange(size)))

  def pipeline():
    batcher = tf_repulsive.repulsive_batch(batch_size, _SAMPLERS[sampler_name](), seed=9, labels=lambda x, y, i: y,
                                           start_step=None if callback_start else 5,
                                           options=tf_repulsive.BatcherOptions(verbose=False))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      stream = dataset.apply(batcher).prefetch(2)
    if callback_start:
      batcher.start_at(5)
    return stream

  iterator = iter(pipeline())
  for _ in range(break_point):
    next(iterator)
  path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path_factory.mktemp("ckpt") / "it"))
  following = [next(iterator)[2].numpy() for _ in range(4)]
  restored = iter(pipeline())
  tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
  np.testing.assert_array_equal([next(restored)[2].numpy() for _ in range(4)], following)
