"""The sampler contract: what a sampler is built against and what it builds.

`Sampler` (in `_samplers`) builds a `BatchDrawer` from a `SamplingContext`, once per dataset.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _mingling


@dataclasses.dataclass(frozen=True)
class SamplingContext:
  """What a sampler is built against: the dataset, read once.

  Attributes:
    features: `[N, d]` float32 feature vectors (distances are measured here).
    labels: `[N]` int64 class labels for samplers with `needs_labels`, else None.
    batch_size: k.
    distance_cache_bytes: memory the sampler may spend on an N x N distance matrix.
    verbose: whether one-time work longer than about 2 s shows a progress bar.
  """

  features: np.ndarray
  labels: np.ndarray | None
  batch_size: int
  distance_cache_bytes: int
  verbose: bool = False


class BatchDrawer:
  """Base of what a sampler builds: draws the indices of the batches of global steps.

  `draw` is traced into the tf.data pipeline (and into `batcher.batch_indices`), so it must be
  TensorFlow ops only, its randomness stateless and derived from `key` and the steps alone: that
  is what makes batches reproducible, checkpoints exact and pipelines shippable. The pipeline runs
  it as a single-device function on the host CPU; variables it reads belong there too (create
  them under `tf.device("CPU:0")`): one placed elsewhere (a GPU) still works, through tf.data's
  slower multi-device function.

  One call draws the batches of `steps_per_draw` consecutive steps, so that a drawer whose work
  per batch is small can vectorise it over steps instead of paying TensorFlow's per-op cost for
  every batch; the pipeline calls it with `first_step` a multiple of `steps_per_draw`.

  A drawer may report what its sampler prepared, for `batcher.stats()`, `batcher.pi` and the
  callbacks' logs:

  Attributes:
    steps_per_draw: S, the steps one call of `draw` covers (a constant of the drawer).
    radius: the disk radius in use, for drawers with disks; else None.
    mingling: the dataset's mingling values, for drawers that have them (the logs then count
      each batch's mix of them); else None.
  """

  steps_per_draw: int = 1
  radius: float | None = None
  mingling: _mingling.MinglingValues | None = None

  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The batches of steps `first_step` ... `first_step + steps_per_draw - 1`.

    Args:
      key: `[2]` int64 stateless seed of the pipeline.
      first_step: int64 scalar, a global step n that is a multiple of `steps_per_draw`.

    Returns:
      `[steps_per_draw, k]` int32 indices into the dataset, each row k distinct ones (the batch
      of one step), and `[steps_per_draw]` int32 counts of them that a fallback fill supplied
      (zeros for samplers without one).
    """
    raise NotImplementedError

  def traced_draw(self) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None:
    """A traced function that computes `draw`, for the draws the batcher makes outside the pipeline.

    Those are `batcher.batch_indices`, `batcher.fallback_points` and the build's check of the
    first batch. The default, None, lets the batcher trace `draw` itself. A drawer that has
    traced a function of its draw already (the disk samplers calibrate `radius="auto"` with
    one) returns it, and the build is spared a second trace. It must return what `draw` does.
    """
    return None

  def pi(self, step: tf.Tensor) -> tf.Tensor | None:
    """The distribution over mingling values that darts follow at `step`, or None (the default)."""
    del step
    return None
