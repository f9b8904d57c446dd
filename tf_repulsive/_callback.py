"""`AnnealingCallback`: ties the sampler's step to the optimizer's and logs what it samples."""

from __future__ import annotations

import keras
import numpy as np

from tf_repulsive import _pipeline
from tf_repulsive import _samplers


class AnnealingCallback(keras.callbacks.Callback):
  """Makes the batch of optimizer step n the sampler's draw for step n, and logs pi and mingling.

  At the start of `fit` the pipeline's step clock is set to `optimizer.iterations`, so the first
  batch of the run is drawn for that step (also after resuming from a checkpoint) and, since every
  batch is drawn for the step that consumes it, Anneal PDS uses pi_n exactly at step n whatever
  is prefetched. Put it before `keras.callbacks.TensorBoard` in `callbacks` so TensorBoard sees
  the logged values:

  * `sampler_pi_<m>`: pi over mingling value m/K at the step (Dense / Anneal PDS);
  * `sampler_mingling_<m>`: fraction of the batch with mingling value m/K (mingling samplers);
    in epoch logs, the mean over the epoch's batches;
  * `sampler_fallback_batches`: batches so far whose darts ran out before the batch was full.

  Requires the training dataset to be the `repulsive_batch` pipeline of `sampler`, iterated from
  the start of an epoch at the start of `fit` (as `fit` does with a dataset it is given).
  """

  def __init__(self, sampler: _samplers.Sampler):
    """Args:
      sampler: the sampler whose pipeline feeds `fit`.

    Raises:
      TypeError: if `sampler` is not a tf_repulsive sampler.
    """
    super().__init__()
    if not isinstance(sampler, _samplers.Sampler):
      raise TypeError(f"`sampler` must be a tf_repulsive sampler; got {sampler!r}.")
    self._sampler = sampler
    self._epoch_compositions = []

  def _step_just_taken(self) -> int:
    return int(np.asarray(self.model.optimizer.iterations)) - 1

  def on_train_begin(self, logs=None):
    runtime = _pipeline.runtime_for(self._sampler)
    runtime.clock.assign(self._step_just_taken() + 1)

  def on_epoch_begin(self, epoch, logs=None):
    self._epoch_compositions = []

  def on_train_batch_end(self, batch, logs=None):
    if logs is None:
      return
    runtime = _pipeline.runtime_for(self._sampler)
    step = self._step_just_taken()
    composition = runtime.composition(step)
    if composition is not None:
      self._epoch_compositions.append(composition)
    self._log(logs, runtime, step, composition)

  def on_epoch_end(self, epoch, logs=None):
    if logs is None:
      return
    runtime = _pipeline.runtime_for(self._sampler)
    mean = np.mean(self._epoch_compositions, axis=0) if self._epoch_compositions else None
    self._log(logs, runtime, self._step_just_taken(), mean)

  @staticmethod
  def _log(logs, runtime, step, composition):
    pi = runtime.pi(step)
    if pi is not None:
      logs.update({f"sampler_pi_{m}": float(p) for m, p in enumerate(pi)})
    if composition is not None:
      logs.update({f"sampler_mingling_{m}": float(c) for m, c in enumerate(composition)})
    logs["sampler_fallback_batches"] = float(runtime.stats().fallback_batches)
