"""The draw's map runs as a single-device function on the host, and falls back where it cannot."""

import numpy as np
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _host_map


def _single_device_functions(dataset):
  """Names of the dataset graph's functions marked for single-device instantiation."""
  graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
  return [function.signature.name for function in graph.library.function
          if function.attr["experimental_ints_on_device"].b]


def test_the_batch_stream_draws_in_a_single_device_function(digits):
  features, labels = digits
  batcher = tf_repulsive.repulsive_batch(50, tf_repulsive.AnnealPDS(), seed=0, start_step=0, verbose=False)
  batches = tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
  assert len(_single_device_functions(batches)) == 1
  iterator = iter(batches)
  for step in range(20):  # across draws of 16 steps: the batches are the drawer's
    _, batch_labels = next(iterator)
    np.testing.assert_array_equal(batch_labels.numpy(), labels[batcher.batch_indices(step)])


def test_a_variable_off_the_host_falls_back_to_the_multi_device_map():
  # conftest.py configures logical CPUs: CPU:1 stands for a GPU the host function cannot reach.
  for device, single_device in (("CPU:0", True), ("CPU:1", False)):
    with tf.device(device):
      offset = tf.Variable(10, dtype=tf.int64)
    mapped = _host_map.parallel_map_on_host(tf.data.Dataset.range(40), lambda n: n + offset.read_value())
    # (Read off the map's own function: a pipeline with a variable elsewhere does not serialise.)
    function, = mapped._functions()
    assert function.function.function_def.attr["experimental_ints_on_device"].b == single_device
    assert list(mapped.as_numpy_iterator()) == list(range(10, 50))
