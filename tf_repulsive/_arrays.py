"""Host arrays that TensorFlow takes over without a copy, so the data is held once.

`tf.constant` copies a numpy array (and TensorFlow's allocator keeps the memory of transient
copies), so a dataset of G bytes would cost 2-3 G. Arrays allocated here are aligned as
TensorFlow's kernels require (64 bytes) and handed over through DLPack, which shares the buffer.
"""

from __future__ import annotations

import weakref

import numpy as np
import tensorflow as tf

# TensorFlow's CPU kernels assume EIGEN_MAX_ALIGN_BYTES (64 with AVX-512) and abort on less.
_ALIGNMENT = 64


def _shareable(dtype: np.dtype) -> bool:
  return dtype.kind in "biufc"


def empty(shape: tuple[int, ...], dtype) -> np.ndarray:
  """An uninitialised array that `to_tensor` can share with TensorFlow (numeric dtypes)."""
  dtype = np.dtype(dtype)
  if not _shareable(dtype):
    return np.empty(shape, dtype)
  size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  buffer = np.empty(size + _ALIGNMENT, np.uint8)
  offset = -buffer.ctypes.data % _ALIGNMENT
  return buffer[offset:offset + size].view(dtype).reshape(shape)


def to_tensor(array: np.ndarray) -> tf.Tensor:
  """A tensor over `array`'s memory when it is shareable, else a copy; `array` becomes read-only.

  Writing to the array afterwards would change the tensor behind TensorFlow's back, so it is
  frozen either way. An array handed over before (the same memory, shape and dtype: the default
  features are the elements' own array) gives the same tensor, which a graph then captures once.
  """
  key = (array.ctypes.data, array.shape, array.dtype.str)
  tensor = _handed_over.get(key)
  if tensor is None:
    shared = (_shareable(array.dtype) and array.flags.c_contiguous and array.flags.writeable
              and array.ctypes.data % _ALIGNMENT == 0)
    tensor = tf.experimental.dlpack.from_dlpack(array.__dlpack__()) if shared else tf.constant(array)
    if shared:
      _handed_over[key] = tensor
  array.flags.writeable = False
  return tensor


# The tensors sharing an array's memory, while they live (and so while the memory does: the tensor
# holds the array), by the array's address, shape and dtype.
_handed_over: weakref.WeakValueDictionary[tuple, tf.Tensor] = weakref.WeakValueDictionary()


def aligned_copy(array: np.ndarray, dtype=None) -> np.ndarray:
  """`array` (cast to `dtype`, default its own) in memory `to_tensor` can share."""
  copy = empty(array.shape, array.dtype if dtype is None else dtype)
  copy[...] = array
  return copy
