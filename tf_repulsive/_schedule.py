"""The annealing schedule of Anneal PDS (the paper's appendix): pi_n ∝ h^(1 / log(0.01 n + 1))."""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _checks

# A schedule maps (h, n) to the categorical distribution over mingling values used at step n.
# h: float64 [K + 1] histogram of mingling values (sums to 1); n: int64 scalar global step.
Schedule = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def paper_schedule(h, n) -> tf.Tensor:
  """The paper's annealed mingling distribution: pi_n = normalise(h ** (1 / log(0.01 n + 1))).

  TensorFlow ops, so it runs inside the stream's graph as `AnnealPDS`'s default `schedule`, and
  eagerly on arrays (`.numpy()` for the array). The exponent grows without bound as n -> 0, so
  the n = 0 limit is the uniform distribution over the most frequent mingling value(s). At
  n = 100 (e - 1) ≈ 172 the exponent is 1 and pi = h; later the exponent falls towards 0 and pi
  flattens towards uniform over the values that occur.

  Args:
    h: `[K + 1]` histogram (counts or frequencies) of mingling values: non-negative, with a
      positive sum.
    n: the global step, an int >= 0 (an int64 scalar tensor in a graph).

  Returns:
    `[K + 1]` float64 tensor summing to 1, zero wherever h is zero.

  Raises:
    ValueError: for an `h` given as an array that is not 1-D, has negative or non-finite
      entries or sums to zero, or an `n` < 0.
    TypeError: for an `n` that is neither an int nor a tensor.

  Example:

  >>> import tf_repulsive
  >>> tf_repulsive.paper_schedule([0.6, 0.3, 0.1], 0).numpy().tolist()
  [1.0, 0.0, 0.0]
  """
  if not isinstance(h, tf.Tensor):
    h = validate_histogram(h, "h")
  if not isinstance(n, tf.Tensor):
    n = _checks.integer(n, "n", 0)
  h = tf.convert_to_tensor(h, tf.float64)
  n = tf.cast(n, tf.float64)
  log_h = tf.math.log(h)  # -inf where h == 0: those values keep probability 0.
  exponent = 1.0 / tf.math.log1p(0.01 * tf.maximum(n, 1.0))
  annealed = tf.nn.softmax(exponent * log_h)
  is_mode = tf.cast(tf.equal(h, tf.reduce_max(h)), tf.float64)
  limit = is_mode / tf.reduce_sum(is_mode)
  return tf.where(n > 0.0, annealed, limit)


def validate_histogram(values, name: str) -> np.ndarray:
  """Returns `values` as a normalised float64 distribution, or raises naming `name`."""
  array = np.asarray(values, dtype=np.float64)
  if array.ndim != 1 or array.size == 0:
    raise ValueError(f"`{name}` must be a non-empty 1-D sequence; got shape {array.shape}.")
  if not np.all(np.isfinite(array)) or np.any(array < 0):
    raise ValueError(f"`{name}` must be finite and non-negative; got {array.tolist()}.")
  total = array.sum()
  if total <= 0:
    raise ValueError(f"`{name}` must have a positive sum; got {array.tolist()}.")
  return array / total
