"""What `_dataset_graph` reads of tf.data's internals is still there: a TensorFlow release that
renames or drops it fails here, instead of the checks that rely on it finding nothing."""

import numpy as np
import pytest
import tensorflow as tf

from tf_repulsive import _dataset_graph
from tf_repulsive import _stream_ops


def _base():
  return tf.data.Dataset.from_tensor_slices((np.zeros((8, 2), np.float32), np.arange(8)))


def test_every_transformation_it_names_is_a_class_tensorflow_still_has():
  base = _base()
  built = {
      "Map": base.map(lambda x, y: (x, y)),
      "ParallelMap": base.map(lambda x, y: (x, y), num_parallel_calls=2),
      "HostFunction": _stream_ops.map_on_host(base, lambda x, y: (x, y)),
      "Prefetch": base.prefetch(1), "Options": base.with_options(tf.data.Options()), "Take": base.take(2),
      "Repeat": base.repeat(), "Zip": tf.data.Dataset.zip(base, base), "Scan": base.scan(0, lambda s, e: (s, e)),
      "Shuffle": base.shuffle(2), "Filter": base.filter(lambda x, y: y > 0), "IgnoreErrors": base.ignore_errors(),
      "Skip": base.skip(1), "Shard": base.shard(2, 0), "Cache": base.cache(), "Batch": base.batch(2),
      "ParallelBatch": base.batch(2, num_parallel_calls=2), "PaddedBatch": base.padded_batch(2),
      "Unbatch": base.batch(2).unbatch(), "Window": base.window(2),
      "FlatMap": base.flat_map(lambda x, y: tf.data.Dataset.from_tensors((x, y))),
      "Interleave": base.interleave(lambda x, y: tf.data.Dataset.from_tensors((x, y))),
      "ParallelInterleave": base.interleave(lambda x, y: tf.data.Dataset.from_tensors((x, y)), num_parallel_calls=2),
      "Concatenate": base.concatenate(base),
      "DirectedInterleave": tf.data.Dataset.sample_from_datasets([base, base], seed=1),
  }
  for name, dataset in built.items():
    assert _dataset_graph.kind(dataset) == name
  known = set(_dataset_graph._CHANGES_THE_STEP) | _dataset_graph._KEEPS_THE_STEP
  assert set(built) <= known


def test_the_attributes_it_reads_are_there():
  batched = _base().batch(4)
  assert int(batched._batch_size) == 4
  assert _dataset_graph.upstream_batch_size(batched) == 4
  shuffled = _base().shuffle(4, seed=3)
  assert int(shuffled._seed) != 0 or int(shuffled._seed2) != 0
  mapped = _base().map(lambda x, y: (x + tf.random.uniform([2]), y))
  assert [node for node in _dataset_graph.nodes(mapped)][-1]._inputs() == []
  assert "RandomUniform" in _dataset_graph.per_element_randomness(mapped)
  assert _dataset_graph.endless_upstream(_base().repeat().filter(lambda x, y: y > 0)) == "repeat"
  parallel = _base().map(lambda x, y: (x, y), num_parallel_calls=2, deterministic=False)
  assert "reorder" in _dataset_graph.run_to_run_difference(parallel)


def test_random_ops_are_found_in_nested_functions_and_datasets():
  @tf.function
  def noisy(x):
    return x + tf.random.normal([2], seed=4)

  nested = tf.data.Dataset.range(2).interleave(lambda i: _base().map(lambda x, y: (noisy(x), y)))
  assert "RandomStandardNormal" in _dataset_graph.per_element_randomness(nested)
  looped = _base().map(lambda x, y: (tf.while_loop(lambda i, v: i < 2,
                                                   lambda i, v: (i + 1, v + tf.random.uniform([2])), (0, x))[1], y))
  assert "RandomUniform" in _dataset_graph.per_element_randomness(looped)
  constant_seed = _base().map(lambda x, y: (x + tf.random.stateless_uniform([2], seed=[1, 2]), y))
  assert _dataset_graph.per_element_randomness(constant_seed) is None


@pytest.mark.parametrize("after, kinds", [
    (lambda s: s, []),
    (lambda s: s.map(lambda x, y: (x, y)).prefetch(1), ["Map", "Prefetch"]),
    (lambda s: tf.data.Dataset.zip(s, _base()).take(3), ["Zip", "Take"]),
    (lambda s: s.map(lambda x, y: (x, y), num_parallel_calls=2, deterministic=False), ["Unordered"]),
])
def test_the_path_from_a_stream_is_found(after, kinds):
  stream = _base().repeat()
  assert _dataset_graph.transformations_between(after(stream), stream) == kinds
  assert _dataset_graph.transformations_between(_base(), stream) is None
