"""The batch stream's `map`s, `scan` and `unbatch`, with no multi-device function for an iterator.

tf.data instantiates a dataset function as a multi-device function for every new iterator, which
runs Grappler's meta-optimizer over it: most of the time a new iterator of the batch stream took
to its first batch, and a per-call cost at every draw. A function whose definition carries the
`experimental_ints_on_device` attribute is instantiated on the iterator's device alone, the host
CPU, without Grappler (TensorFlow's `FunctionMetadata::Create` in
tensorflow/core/data/captured_function.cc; TensorFlow marks its own `copy_to_device` functions
so). `Dataset.map` and `Dataset.scan` cannot set a function attribute, hence TensorFlow's private
constructor pieces below: `StructuredFunctionWrapper` (its `defun_kwargs` become function
attributes) and the `ParallelMapDatasetV2` and `ScanDataset` ops, as
`Dataset.map(num_parallel_calls=..., deterministic=True)` and `Dataset.scan` build them, and the
`MapDataset` op, as `Dataset.map` builds it but run in the consumer's thread (a function that
only records is cheaper there than handed to the inter-op pool).
`Dataset.unbatch` maps an identity function over its input first (to densify sparse and ragged
components, which the batch stream never has): `unbatch_dense` leaves that map out.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable

import tensorflow as tf

from tf_repulsive import _framework

_SINGLE_DEVICE = {"experimental_ints_on_device": True}


@functools.cache
def _internals() -> types.SimpleNamespace:
  """TensorFlow's private pieces this module builds with, imported at first use behind the version guard."""
  _framework.check_tested()
  try:
    # pylint: disable=g-import-not-at-top
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.data.ops import structured_function
    from tensorflow.python.data.ops import unbatch_op
    from tensorflow.python.data.util import structure
    from tensorflow.python.ops import gen_dataset_ops
    from tensorflow.python.ops import gen_experimental_dataset_ops

    class HostFunctionDataset(dataset_ops.UnaryDataset):
      """A dataset op over one already traced `StructuredFunctionWrapper`, as tf.data's map and scan are.

      `make_variant(common_args)` builds the op (common_args: the element types, shapes, metadata).
      """

      def __init__(self, input_dataset: tf.data.Dataset, wrapper: Any, element_spec: Any,
                   make_variant: Callable[[dict[str, Any]], tf.Tensor]):
        self._input_dataset = input_dataset
        self._function = wrapper
        self._structure = element_spec
        self._name = None
        super().__init__(input_dataset, make_variant(self._common_args))

      def _functions(self):
        return [self._function]

      @property
      def element_spec(self):
        return self._structure

    return types.SimpleNamespace(
        function_wrapper=structured_function.StructuredFunctionWrapper, unbatch=unbatch_op._UnbatchDataset,  # pylint: disable=protected-access
        to_tensor_list=structure.to_tensor_list, parallel_map=gen_dataset_ops.parallel_map_dataset_v2,
        map=gen_dataset_ops.map_dataset, scan=gen_experimental_dataset_ops.scan_dataset,
        host_function_dataset=HostFunctionDataset)
  except (ImportError, AttributeError) as error:
    raise _framework.moved("TensorFlow's private tf.data constructors (tensorflow.python.data)", error) from error


def parallel_map_on_host(dataset: tf.data.Dataset, map_func: Callable[..., Any]) -> tf.data.Dataset:
  """`dataset.map(map_func, num_parallel_calls=AUTOTUNE, deterministic=True)`, single-device.

  A single-device function on the host cannot read a variable placed elsewhere (a GPU): if
  `map_func` captures one, this is that public `map` call instead, with the same elements.
  """
  return _map_on_host(dataset, map_func, parallel=True)


def map_on_host(dataset: tf.data.Dataset, map_func: Callable[..., Any]) -> tf.data.Dataset:
  """`dataset.map(map_func)` (in the consumer's thread, one element at a time), single-device.

  Falls back to that public call as `parallel_map_on_host` does.
  """
  return _map_on_host(dataset, map_func, parallel=False)


def _map_on_host(dataset: tf.data.Dataset, map_func: Callable[..., Any], parallel: bool) -> tf.data.Dataset:
  internals = _internals()
  wrapper = internals.function_wrapper(map_func, "Dataset.map()", dataset=dataset, defun_kwargs=dict(_SINGLE_DEVICE))
  if not _captures_only_host_resources(wrapper):
    if parallel:
      return dataset.map(map_func, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.map(map_func)
  arguments = dict(input_dataset=dataset._variant_tensor,  # pylint: disable=protected-access
                   other_arguments=wrapper.function.captured_inputs, f=wrapper.function, preserve_cardinality=True)
  if parallel:
    return internals.host_function_dataset(dataset, wrapper, wrapper.output_structure, lambda common_args: (
        internals.parallel_map(
            num_parallel_calls=tf.constant(tf.data.AUTOTUNE, tf.int64), deterministic="true",
            **arguments, **common_args)))
  return internals.host_function_dataset(dataset, wrapper, wrapper.output_structure, lambda common_args: (
      internals.map(use_inter_op_parallelism=False, **arguments, **common_args)))


def scan_on_host(dataset: tf.data.Dataset, initial_state: tf.Tensor,
                 scan_func: Callable[..., Any]) -> tf.data.Dataset:
  """`dataset.scan(initial_state, scan_func)` for a state of fixed shape, single-device.

  Falls back to that public call as `parallel_map_on_host` does.
  """
  internals = _internals()
  state_spec = tf.TensorSpec.from_tensor(initial_state)
  wrapper = internals.function_wrapper(
      scan_func, "Dataset.scan()", input_structure=(state_spec, dataset.element_spec),
      defun_kwargs=dict(_SINGLE_DEVICE))
  new_state_spec = wrapper.output_structure[0]
  if new_state_spec != state_spec:
    raise ValueError(f"scan_on_host needs a state of fixed type and shape: {state_spec} became {new_state_spec}.")
  if not _captures_only_host_resources(wrapper):
    return dataset.scan(initial_state, scan_func)
  return internals.host_function_dataset(dataset, wrapper, wrapper.output_structure[1], lambda common_args: (
      internals.scan(
          dataset._variant_tensor,  # pylint: disable=protected-access
          internals.to_tensor_list(state_spec, initial_state), wrapper.function.captured_inputs,
          f=wrapper.function, preserve_cardinality=True, **common_args)))


def unbatch_dense(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`dataset.unbatch()` for a dataset whose components are all dense tensors."""
  if not all(isinstance(spec, tf.TensorSpec) for spec in tf.nest.flatten(dataset.element_spec)):
    raise TypeError(f"unbatch_dense needs dense tensor components; got {dataset.element_spec}.")
  return _internals().unbatch(dataset)


def _captures_only_host_resources(wrapper: Any) -> bool:
  return all(_on_host(tensor) for tensor in wrapper.function.captured_inputs if tensor.dtype == tf.resource)


def _on_host(resource: tf.Tensor) -> bool:
  device = tf.DeviceSpec.from_string(resource.device)
  return device.device_type in (None, "CPU") and device.device_index in (None, 0)


def inlined(function: tf.types.experimental.PolymorphicFunction, *arguments: object,
            read: Callable[[tf.Tensor], tf.Tensor] | None = None) -> tuple[tf.Tensor, ...]:
  """`function(*arguments)` in the graph being built, as the ops of its trace (no call op).

  `function` is a `tf.function` of tensor arguments; its trace for these arguments' shapes is
  reused if it exists. Its graph is imported with its inputs mapped to `arguments` and to what it
  captured, so it runs as if traced here. Each eager value among them (an argument, a capture)
  becomes `read(value)` in this graph (default: the value, captured).
  """
  concrete = function.get_concrete_function(*arguments)
  graph = tf.compat.v1.get_default_graph()

  def in_graph(value):
    if tf.is_symbolic_tensor(value):
      return value
    if read is not None:
      value = read(value)
    return value if tf.is_symbolic_tensor(value) else graph.capture(value)

  # The caller's control dependencies (a pipeline's checks before its draw) reach the imported
  # ops through their inputs: importing under them fails.
  values = [tf.identity(in_graph(value)) for value in tf.nest.flatten(arguments) + list(concrete.captured_inputs)]
  with tf.control_dependencies(None):
    outputs = tf.graph_util.import_graph_def(
        concrete.graph.as_graph_def(), input_map={placeholder.name: value for placeholder, value in
                                                  zip(concrete.inputs, values, strict=True)},
        return_elements=[output.name for output in concrete.outputs], name="draw")
  return tf.nest.pack_sequence_as(concrete.structured_outputs, outputs)
