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
  is prefetched. It adds to the epoch logs (and with `log_batches=True` to every batch's logs)

  * `sampler_pi_<m>`: pi over mingling value m/K at the last step (Dense / Anneal PDS);
  * `sampler_mingling_<m>`: fraction of the batches with mingling value m/K (samplers with
    labels): the epoch's mean in epoch logs, the batch's own in batch logs;
  * `sampler_fallback_batches`: batches drawn so far whose darts ran out before they were full.

  Put it before `keras.callbacks.TensorBoard` in `callbacks` so TensorBoard plots these. It needs
  the training data to be the `repulsive_batch` pipeline of `sampler`, iterated from the start of
  an epoch when `fit` starts (as `fit` does with a dataset it is given).
  """

  def __init__(self, sampler: _samplers.Sampler, log_batches: bool = False):
    """Args:
      sampler: the sampler whose pipeline feeds `fit`.
      log_batches: also log every batch (recomputes each batch's draw: about one extra draw per
        step); for TensorBoard with `update_freq="batch"`.

    Raises:
      TypeError: if `sampler` is not a tf_repulsive sampler.
    """
    super().__init__()
    if not isinstance(sampler, _samplers.Sampler):
      raise TypeError(f"`sampler` must be a tf_repulsive sampler; got {sampler!r}.")
    self._sampler = sampler
    self._log_batches = log_batches
    self._epoch_first_step = 0

  def _next_step(self) -> int:
    return int(np.asarray(self.model.optimizer.iterations))

  def on_train_begin(self, logs=None):
    _pipeline.runtime_for(self._sampler).clock.assign(self._next_step())

  def on_epoch_begin(self, epoch, logs=None):
    self._epoch_first_step = self._next_step()

  def on_train_batch_end(self, batch, logs=None):
    if self._log_batches and logs is not None:
      step = self._next_step() - 1
      self._log(logs, step, [step])

  def on_epoch_end(self, epoch, logs=None):
    if logs is not None:
      self._log(logs, self._next_step() - 1, range(self._epoch_first_step, self._next_step()))

  def _log(self, logs, last_step, steps):
    runtime = _pipeline.runtime_for(self._sampler)
    pi = runtime.pi(last_step)
    if pi is not None:
      logs.update({f"sampler_pi_{m}": float(p) for m, p in enumerate(pi)})
    if runtime.categories is not None and len(steps):
      composition = np.mean([runtime.composition(step) for step in steps], axis=0)
      logs.update({f"sampler_mingling_{m}": float(c) for m, c in enumerate(composition)})
    logs["sampler_fallback_batches"] = float(runtime.stats().fallback_batches)
