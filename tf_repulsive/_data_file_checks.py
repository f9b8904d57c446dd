"""Checks that a data file holds the bytes the build wrote: at the build, at every draw, on every worker.

A file's name is the hash of the array it holds, so a file found under that name is reused. A
file can still change after it is written: a copy that zeroed it, an interrupted `rsync
--inplace`, bit rot. Three checks find that, at three costs:

* `same_bytes`, at a build that finds the file: every byte against the array in memory (the
  build then writes the file again). About the time of reading the file.
* `sampled_check`, at every draw of a stream: fixed runs of values against what the build saw, a
  few KB per file. It finds a file zeroed or overwritten, and damage spread through it (bit rot
  of one byte in a hundred touches every run). A change confined to bytes between the runs
  passes it.
* `content_status`, in `check_data_files(..., contents=True)` on every tf.data service worker:
  every byte, through the fingerprints of 16 MiB chunks against those of the array in memory.
  About the time of reading the file.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf

from tf_repulsive import _progress

# What a worker reports for each file (`length_status`, `content_status`).
MISSING, OTHER_CONTENTS, SHORTER, SAME_LENGTH = -1, -2, 0, 1
# Bytes per fingerprinted chunk of a worker's full check.
_FINGERPRINT_CHUNK = 2**24
_COMPARE_CHUNK = 2**26
# The sampled check: this many runs of this many values, spread evenly over the file.
_SAMPLED_RUNS = 16
_RUN_VALUES = 64
# Unsigned integers of each width: the sampled values are compared as bits (NaN equals NaN).
_BITS = {1: tf.uint8, 2: tf.uint16, 4: tf.uint32, 8: tf.uint64}


def damaged_message(path: str, how: str) -> str:
  return (f"tf_repulsive: {path} does not hold the array the build wrote ({how}): a damaged or stale copy, "
          "zeroed, overwritten or decayed. Copy the build's data_dir again, or build the batcher again (a build "
          "writes a damaged file anew). batcher.check_data_files(service, contents=True) checks every byte "
          "on every tf.data service worker.")


def same_bytes(path: str, flat: np.ndarray, verbose: bool) -> bool:
  """Whether the file `path` holds exactly the bytes `flat` (uint8), compared chunk by chunk."""
  if os.path.getsize(path) != flat.size:
    return False
  on_disk = np.memmap(path, np.uint8, "r", shape=(flat.size,)) if flat.size else flat
  with _progress.bar("data files (checking)", flat.size, verbose) as progress:
    for start in range(0, flat.size, _COMPARE_CHUNK):
      if not np.array_equal(on_disk[start:start + _COMPARE_CHUNK], flat[start:start + _COMPARE_CHUNK]):
        return False
      progress.update(min(_COMPARE_CHUNK, flat.size - start))
  return True


@dataclasses.dataclass(frozen=True, eq=False)
class Samples:
  """Where the sampled check looks in a file's flattened array, and the bits the build saw there."""

  positions: np.ndarray  # [S] int64
  bits: np.ndarray  # [S] unsigned, of the array's width

  @classmethod
  def of(cls, array: np.ndarray) -> Samples:
    flat = array.reshape(-1)
    run = min(_RUN_VALUES, flat.size)
    starts = np.linspace(0, flat.size - run, _SAMPLED_RUNS).astype(np.int64)
    positions = np.unique((starts[:, None] + np.arange(run)).reshape(-1))
    values = flat[positions]
    bits = values.astype(np.uint8) if values.dtype == np.bool_ else values.view(f"u{values.dtype.itemsize}")
    return cls(positions, bits)


def sampled_check(path: str, array: tf.Tensor, samples: Samples) -> tf.Operation:
  """An op that fails, naming `path`, unless the mapped `array` holds the sampled bits."""
  values = tf.gather(tf.reshape(array, [-1]), samples.positions)
  bits = tf.cast(values, tf.uint8) if values.dtype == tf.bool else tf.bitcast(values, _BITS[values.dtype.size])
  return tf.debugging.Assert(tf.reduce_all(tf.equal(bits, samples.bits)),
                             [damaged_message(path, "values at sampled places differ")])


def seen(path: str | tf.Tensor) -> tf.Tensor:
  """Whether this process sees the file `path` (a path without glob characters)."""
  return tf.size(tf.io.matching_files(path)) > 0


def length_status(path: tf.Tensor, length: tf.Tensor) -> tf.Tensor:
  """MISSING, SHORTER, SAME_LENGTH or more (longer) for the file `path` against `length` bytes.

  Reads the start of the file, not all of it: a fixed-length record reader that skips a footer of
  `length - 1` bytes finds one one-byte record in a file of `length` bytes, none in a shorter one,
  and two or more (it stops at two) in a longer one.
  """
  def records():
    reader = tf.data.FixedLengthRecordDataset(path, record_bytes=1, footer_bytes=length - 1).take(2)
    return reader.reduce(tf.constant(SHORTER, tf.int64), lambda count, _: count + 1)
  return tf.cond(seen(path), records, lambda: tf.constant(MISSING, tf.int64))


@tf.autograph.experimental.do_not_convert
def fingerprints(path: str | tf.Tensor, length: int) -> tf.Tensor:
  """`[chunks, 8]` uint8: the fingerprint of each 16 MiB chunk of the file `path` of `length` bytes."""
  full, tail = divmod(length, _FINGERPRINT_CHUNK)
  chunks = []
  if full:
    chunks.append(tf.data.FixedLengthRecordDataset(path, record_bytes=_FINGERPRINT_CHUNK, footer_bytes=tail,
                                                   buffer_size=_FINGERPRINT_CHUNK))
  if tail:
    chunks.append(tf.data.FixedLengthRecordDataset(path, record_bytes=tail, header_bytes=full * _FINGERPRINT_CHUNK))
  records = chunks[0] if len(chunks) == 1 else chunks[0].concatenate(chunks[1])
  return records.map(lambda record: tf.fingerprint(tf.reshape(record, [1]))[0]).batch(full + 1).get_single_element()


def fingerprints_of(flat: np.ndarray) -> np.ndarray:
  """What `fingerprints` gives for a file that holds the bytes `flat` (uint8), from memory."""
  return np.stack([tf.fingerprint(tf.constant([flat[start:start + _FINGERPRINT_CHUNK].tobytes()]))[0].numpy()
                   for start in range(0, flat.size, _FINGERPRINT_CHUNK)])


def content_status(path: str, length: int, expected: np.ndarray) -> tf.Tensor:
  """`length_status`, or OTHER_CONTENTS for a file of the right length whose chunks' fingerprints differ."""
  status = length_status(tf.constant(path), tf.constant(length, tf.int64))
  return tf.cond(
      tf.equal(status, SAME_LENGTH),
      lambda: tf.where(tf.reduce_all(tf.equal(fingerprints(path, length), expected)), status,
                       tf.constant(OTHER_CONTENTS, tf.int64)),
      lambda: status)
