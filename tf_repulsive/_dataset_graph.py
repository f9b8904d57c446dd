"""What the batcher can see of an input pipeline, through tf.data's internal structure.

A `tf.data.Dataset` keeps its inputs (`_inputs()`, `_input_dataset`), its traced functions
(`_functions()`), and per transformation its settings (`_batch_size`, `_seed`, `_seed2`,
`_deterministic`), and its Python class names the transformation. None of that is public API;
everything here that reads it is in this module, and `tests/package/test_dataset_graph.py` fails when a
TensorFlow release stops providing what it reads (the checks would otherwise find nothing).
"""

from __future__ import annotations

from typing import Iterator

import tensorflow as tf

from tf_repulsive import _framework

# Transformations that cannot end an endless input (they pass, drop or expand its elements).
_KEEPS_ENDLESS = frozenset((
    "_MapDataset", "_ParallelMapDataset", "_FilterDataset", "_FlatMapDataset", "_InterleaveDataset",
    "_ParallelInterleaveDataset", "_IgnoreErrorsDataset", "_PrefetchDataset", "_OptionsDataset",
    "_ShuffleDataset", "_UnbatchDataset", "CacheDataset", "_BatchDataset", "_ParallelBatchDataset"))

# Random ops that keep a state: each call gives new values, seeded or not.
_STATEFUL_RANDOM_OPS = frozenset((
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "RandomShuffle",
    "Multinomial", "RandomGamma", "RandomPoisson", "RandomPoissonV2", "ParameterizedTruncatedNormal",
    "RandomCrop", "SampleDistortedBoundingBox", "SampleDistortedBoundingBoxV2", "NonDeterministicInts",
    # tf.random.Generator
    "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt", "StatefulStandardNormal",
    "StatefulStandardNormalV2", "StatefulTruncatedNormal", "StatefulRandomBinomial", "RngSkip",
    "RngReadAndSkip"))
# Ops that change a variable: what a Keras random layer's seed generator does per call (its
# random numbers are stateless ops seeded from the variable), and what any counter does.
_VARIABLE_WRITES = frozenset((
    "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceScatterAdd",
    "ResourceScatterSub", "ResourceScatterUpdate", "ResourceScatterNdUpdate", "ResourceScatterNdAdd",
    "ResourceScatterMul", "ResourceScatterDiv", "ResourceScatterMin", "ResourceScatterMax",
    "ResourceStridedSliceAssign"))

PER_STEP_RANDOMNESS_FIX = (
    "repulsive_batch reads its input once, so randomness before it gives each element one value for "
    "the whole run (an augmentation frozen for every epoch), and a different one in every run and "
    "after a resume. Apply per-step randomness after the batcher, to the batches: "
    "ds.apply(batcher).map(augment). A fixed value per element (a random projection, say) takes a "
    "stateless op with a constant seed (tf.random.stateless_normal(shape, seed=[1, 2]), ...).")


@_framework.guarded
def nodes(dataset: tf.data.Dataset) -> Iterator[tf.data.Dataset]:
  """`dataset` and every dataset upstream of it (through all inputs), each once."""
  pending, seen = [dataset], set()
  while pending:
    node = pending.pop()
    if id(node) in seen:
      continue
    seen.add(id(node))
    yield node
    pending.extend(node._inputs())  # pylint: disable=protected-access


def kind(dataset: tf.data.Dataset) -> str:
  """The transformation a dataset node is, e.g. "Shuffle" for `_ShuffleDataset`."""
  return type(dataset).__name__.lstrip("_").replace("DatasetV2", "").replace("Dataset", "") or "Dataset"


@_framework.guarded
def read_from_service(dataset: tf.data.Dataset) -> bool:
  """Whether `dataset` reads its elements from tf.data service (`distribute`) workers."""
  return any(kind(node) == "DataService" for node in nodes(dataset))


@_framework.guarded
def upstream_batch_size(dataset: tf.data.Dataset) -> int | None:
  """The batch size when `dataset`'s elements are batches made upstream, else None.

  Walks the chain of unary transformations back to the nearest batching (`batch`,
  `padded_batch`) that no `unbatch` after it undid, and calls the elements batches when every
  component's leading dimension is that batch size or unknown. Elements that are arrays of their
  own pass: no batching upstream, or other leading dimensions.
  """
  node, undone = dataset, 0
  while node is not None:
    if "Unbatch" in type(node).__name__:
      undone += 1
    batch_size = getattr(node, "_batch_size", None)
    if batch_size is not None:
      if undone:
        undone -= 1
      else:
        try:
          size = int(batch_size)
        except (TypeError, ValueError):
          return None
        shapes = [spec.shape for spec in tf.nest.flatten(dataset.element_spec)]
        batched = all(shape.rank is not None and shape.rank >= 1 and shape[0] in (None, size)
                      for shape in shapes)
        return size if batched else None
    node = getattr(node, "_input_dataset", None)
  return None


@_framework.guarded
def endless_upstream(dataset: tf.data.Dataset) -> str | None:
  """The name of an infinite dataset upstream that only endless-preserving steps follow, else None.

  tf.data reports `repeat().filter(...)` as of unknown size; reading it would run to
  `max_elements` (or forever, if the filter keeps nothing).
  """
  def endless(node):
    return node is not None and int(node.cardinality()) == tf.data.INFINITE_CARDINALITY

  node = dataset
  while node is not None and not endless(node):
    if type(node).__name__ not in _KEEPS_ENDLESS:
      return None
    node = getattr(node, "_input_dataset", None)
  if node is None:
    return None
  # Name the source of the endlessness (the repeat, say), not the map after it.
  while endless(getattr(node, "_input_dataset", None)):
    node = node._input_dataset  # pylint: disable=protected-access
  return kind(node).lower()


@_framework.guarded
def run_to_run_difference(dataset: tf.data.Dataset) -> str | None:
  """What makes the elements, or their order, differ from run to run upstream; None if nothing does.

  Finds a shuffle or random source without a seed (neither its own nor `tf.random.set_seed`'s)
  and a parallel transformation allowed to reorder its elements. Not found: a parallel
  interleave's own `deterministic=False` (kept in the op only), randomness inside a generator.
  """
  reorders_by_default = dataset.options().deterministic is False
  for node in nodes(dataset):
    name = type(node).__name__
    if name in ("_ShuffleDataset", "_RandomDataset") and int(node._seed) == 0 and int(node._seed2) == 0:  # pylint: disable=protected-access
      if name == "_ShuffleDataset":
        return ("a shuffle without a seed (Dataset.shuffle, or Dataset.list_files, which shuffles by "
                "default): drop it (the sampler randomises the batches), or seed it, e.g. "
                "shuffle(buffer_size, seed=0) or list_files(pattern, shuffle=False)")
      return "random numbers without a seed (Dataset.random, sample_from_datasets): pass seed="
    deterministic = getattr(node, "_deterministic", None)
    if deterministic == "false" or (deterministic == "default" and reorders_by_default):
      return ("a parallel transformation allowed to reorder its elements (deterministic=False, or "
              "options.deterministic = False): make it deterministic for this input")
  return None


@_framework.guarded
def per_element_randomness(dataset: tf.data.Dataset) -> str | None:
  """The first random or state-changing op in a dataset function upstream, described; else None.

  Looks into every function the pipeline traced (`map`, `filter`, `interleave` ..., and the
  functions, loops and datasets nested in them): stateful random ops, seeded or not, and ops that
  write a variable (a Keras random layer's seed generator). Stateless random ops seeded by
  constants give the same values in every run and pass.
  """
  for node in nodes(dataset):
    for function in node._functions():  # pylint: disable=protected-access
      graph_def = function.function.graph.as_graph_def()
      for op in _all_ops(graph_def):
        if op in _STATEFUL_RANDOM_OPS:
          return f"a random op ({op}) in a dataset function"
        if op in _VARIABLE_WRITES:
          return (f"an op that updates a variable ({op}) in a dataset function: a Keras random layer "
                  "(RandomFlip, GaussianNoise, Dropout ...) draws its seeds so, or a counter")
  return None


def _all_ops(graph_def) -> Iterator[str]:
  """The op types of a graph and of every function in its library (nested functions, loop bodies)."""
  for node in graph_def.node:
    yield node.op
  for function in graph_def.library.function:
    for node in function.node_def:
      yield node.op


# Transformations after the batcher that change which draw `fit` trains at a step, and how.
_CHANGES_THE_STEP = {
    "Shuffle": "hands each step the batch of another step",
    "Filter": "drops batches, so that later steps train on other steps' draws",
    "IgnoreErrors": "drops batches, so that later steps train on other steps' draws",
    "Skip": "shifts every step to a later step's draw",
    "Shard": "gives each shard every n-th step's draw",
    "Cache": "replays earlier steps' batches",
    "Snapshot": "replays earlier steps' batches",
    "Batch": "makes one batch of several draws",
    "ParallelBatch": "makes one batch of several draws",
    "PaddedBatch": "makes one batch of several draws",
    "Unbatch": "splits the draws into other batches",
    "Rebatch": "splits the draws into other batches",
    "Window": "makes one element of several draws",
    "GroupByWindow": "regroups the batches",
    "FlatMap": "changes how many batches there are",
    "Interleave": "changes how many batches there are, and their order",
    "ParallelInterleave": "changes how many batches there are, and their order",
    "Concatenate": "puts other elements between the steps",
    "DirectedInterleave": "mixes the stream with other elements",
    "Unordered": "may hand a step the batch of another step (deterministic=False)",
}
# Transformations after the batcher that keep the batch of every step (they transform, hold,
# end or pair batches).
_KEEPS_THE_STEP = frozenset((
    "Map", "ParallelMap", "HostFunction", "Prefetch", "Options", "Take", "Repeat", "Zip", "Scan",
    "AssertCardinality", "MaxIntraOpParallelism", "PrivateThreadPool", "Model", "CopyToDevice",
    "PrefetchToDevice"))


@_framework.guarded
def transformations_between(final: tf.data.Dataset, stream: tf.data.Dataset) -> list[str] | None:
  """The kinds of the transformations from `stream` down to `final`, or None if `final` is not made from it.

  Follows every input; the first path found is reported, nearest `stream` first. A parallel
  transformation allowed to reorder its elements is reported as "Unordered".
  """
  reorders_by_default = final.options().deterministic is False
  parents: dict[int, tf.data.Dataset | None] = {id(final): None}
  pending = [final]
  while pending:
    node = pending.pop()
    if node is stream:
      kinds = []
      child = parents[id(node)]
      while child is not None:
        deterministic = getattr(child, "_deterministic", None)
        unordered = deterministic == "false" or (deterministic == "default" and reorders_by_default)
        kinds.append("Unordered" if unordered else kind(child))
        child = parents[id(child)]
      return kinds
    for parent in node._inputs():  # pylint: disable=protected-access
      if id(parent) not in parents:
        parents[id(parent)] = node
        pending.append(parent)
  return None


def step_changing(kinds: list[str]) -> tuple[str | None, list[str]]:
  """The first transformation in `kinds` that changes the step's batch, described, and the unknown kinds."""
  for name in kinds:
    if name == "Unordered":
      return f"a parallel transformation that {_CHANGES_THE_STEP[name]}", []
    if name in _CHANGES_THE_STEP:
      return f"{name.lower()}() ({_CHANGES_THE_STEP[name]})", []
  return None, [name for name in kinds if name not in _KEEPS_THE_STEP]
