"""The batch stream's functions run single-device on the host, and fall back where they cannot."""

import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _stream_ops


def _dataset_functions(dataset):
  """{op of a dataset node that runs a function: whether that function is single-device}."""
  graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
  single_device = {function.signature.name: function.attr["experimental_ints_on_device"].b
                   for function in graph.library.function}
  return {node.op: single_device[node.attr["f"].func.name] for node in graph.node if "f" in node.attr}


@pytest.mark.parametrize("start_step, functions", [
    # The start is zipped in: no function of its own. The MapDataset records the step delivered.
    (0, {"ParallelMapDatasetV2": True, "MapDataset": True}),
    (None, {"ScanDataset": True, "ParallelMapDatasetV2": True, "MapDataset": True}),  # the callback's start
])
def test_every_function_of_the_batch_stream_is_single_device(digits, start_step, functions):
  features, labels = digits
  batcher = tf_repulsive.repulsive_batch(50, tf_repulsive.AnnealPDS(), seed=0, start_step=start_step,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  batches = tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
  assert _dataset_functions(batches) == functions
  if start_step is None:
    batcher.start_at(0)
  iterator = iter(batches)
  for step in range(20):  # across draws of 16 steps: the batches are the drawer's
    _, batch_labels = next(iterator)
    np.testing.assert_array_equal(batch_labels.numpy(), labels[batcher.batch_indices(step)])


@pytest.mark.parametrize("transform", [
    lambda dataset, offset: _stream_ops.parallel_map_on_host(dataset, lambda n: n + offset.read_value()),
    lambda dataset, offset: _stream_ops.map_on_host(dataset, lambda n: n + offset.read_value()),
    lambda dataset, offset: _stream_ops.scan_on_host(
        dataset, tf.constant(0, tf.int64), lambda state, n: (state, n + offset.read_value())),
], ids=["parallel_map", "map", "scan"])
def test_a_variable_off_the_host_falls_back_to_the_multi_device_transform(transform):
  # conftest.py configures logical CPUs: CPU:1 stands for a GPU the host function cannot reach.
  for device, single_device in (("CPU:0", True), ("CPU:1", False)):
    with tf.device(device):
      offset = tf.Variable(10, dtype=tf.int64)
    transformed = transform(tf.data.Dataset.range(40), offset)
    # (Read off the transform's own function: a pipeline with a variable elsewhere does not serialise.)
    function, = transformed._functions()
    assert function.function.function_def.attr["experimental_ints_on_device"].b == single_device
    assert list(transformed.as_numpy_iterator()) == list(range(10, 50))


def test_scan_on_host_refuses_a_state_that_changes_shape():
  with pytest.raises(ValueError, match="state of fixed type and shape"):
    _stream_ops.scan_on_host(tf.data.Dataset.range(4), tf.constant(0, tf.int64),
                             lambda state, n: (tf.stack([state, n]), n))
