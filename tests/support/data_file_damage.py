"""Damage that keeps a data file's length, and which file holds what: for test_data_files and distributed_run.

Zeros are what a preallocated copy, an interrupted `rsync --inplace` or a sparse file leave;
every 97th byte flipped is bit rot or a bad disk.
"""

import hashlib
import os

import numpy as np


def damage(path, how):
  """Damages the file `path` in place (its length kept); returns its bytes before."""
  with open(path, "rb") as file:
    original = file.read()
  damaged = bytearray(len(original)) if how == "zeros" else bytearray(original)
  if how == "flips":
    damaged[::97] = bytes(byte ^ 0xFF for byte in damaged[::97])
  with open(path, "r+b") as file:
    file.write(damaged)
  return original


def file_of(batcher, array):
  """The data file of the batcher that holds `array`."""
  digest = hashlib.sha256(f"{array.dtype.str}\n".encode() + np.ascontiguousarray(array).tobytes()).hexdigest()[:32]
  (path,) = [path for path in batcher.data_files if os.path.basename(path).startswith(digest)]
  return path


def files_by_kind(batcher):
  """The files of the elements, of the feature vectors (2 x, `features=`), and the sampler's largest table."""
  x = batcher.elements[0]
  files = {"elements": file_of(batcher, x), "features": file_of(batcher, 2.0 * x)}
  tables = [path for path in batcher.data_files if path not in files.values()]
  return {**files, "table": max(tables, key=os.path.getsize)}


