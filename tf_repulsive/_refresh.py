"""The refreshes of a `ModelSpace` batcher: which features the drawer holds, and installing the next ones.

With `from_training_step`, a refresh takes the table the training steps updated
(`_training_features`) instead of a pass over the data, except for full refreshes.

Refresh r holds the features of the model after r * refresh_every optimizer steps. The stream
draws step n on refresh n // refresh_every and waits for it (`wait`); `refresh` installs it. The
version variable is written last, so a draw that waits reads the drawer's new state once it sees
the version.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tf_repulsive import _contract
from tf_repulsive import _model_space
from tf_repulsive import _training_features


class FeatureRefresher:
  """Installs the features of each refresh into a batcher's drawer, and tells the stream which it holds.

  Args:
    space: the batcher's `ModelSpace`.
    elements: the materialised elements the features are computed from.
    build_features: the features the build computed, from the model as it was then.
    training: the table of features from the training step (`ModelSpace.from_training_step`),
      or None.
  """

  def __init__(self, space: _model_space.ModelSpace, elements: Any, build_features: np.ndarray,
               training: _training_features.TrainingFeatures | None = None):
    self.space = space
    self._elements = elements
    self.training = training
    with tf.device("CPU:0"):
      self._version = tf.Variable(_model_space.NO_REFRESH, dtype=tf.int64, trainable=False)
    # The refresh installed, as `_version` holds it for the stream's draws.
    self._installed_refresh = _model_space.NO_REFRESH
    # The write of a table's features to the directory, in the background, and what it raised.
    self._saving: threading.Thread | None = None
    self._saving_error: BaseException | None = None
    # Refreshes installed in this process, and the seconds they took.
    self.refreshes = 0
    self.seconds = 0.0
    # Kept for the first refresh: when the model has not changed since the build (a new training's
    # step 0), it installs these instead of a second inference pass.
    self._build_features: tuple[str, np.ndarray] | None = (
        _model_space.weights_fingerprint(space.model), build_features)

  def refresh(self, step: int, install: Callable[[np.ndarray, bool], None]) -> float:
    """Installs the features in force at `step`; returns the seconds it took (0.0: already in).

    `install(features, from_build)` builds the sampler on the features and hands its state to
    the stream's drawer; `from_build` says they are the build's own, from these very weights.
    """
    space = self.space
    refresh = step // space.refresh_every
    at_refresh_step = step % space.refresh_every == 0
    full = space.is_full_refresh(refresh)
    due = self._installed_refresh != refresh
    if due:
      self._finish_saving()
    # Between refreshes the table needs nothing, except each step's record in the log.
    if self.training is not None and (due or at_refresh_step or space.directory is not None):
      self.training.catch_up(step, full and at_refresh_step)
    if not due:
      return 0.0
    began = time.perf_counter()
    if self.training is not None and at_refresh_step and not full:
      # The table holds every step before this one (`catch_up`): it is these features, in a
      # resumed run too, and the model's weights do not enter. They are written while training
      # goes on: the view stays as it is, since the next step's update copies the table first.
      features = self.training.snapshot()
      self._save_in_background(refresh, features)
      return self._installed(refresh, features, False, install, began)
    saved = _model_space.load(space, refresh)
    fingerprint = _model_space.weights_fingerprint(space.model) if at_refresh_step else ""
    kept = self._build_features
    from_build = at_refresh_step and kept is not None and kept[0] == fingerprint
    if saved is not None and (not at_refresh_step or saved[1] == fingerprint):
      features = saved[0]
    elif at_refresh_step:
      features = kept[1] if from_build and kept is not None else _model_space.compute(space, self._elements)
      _model_space.save(space, refresh, features, fingerprint)
    else:
      where = ("no directory is set (ModelSpace.directory)" if space.directory is None
               else f"{space.directory} does not hold them (deleted by keep_last={space.keep_last}, or never saved)")
      raise ValueError(
          f"step {step} is drawn on the features of refresh {refresh}, those of the model at step "
          f"{refresh * space.refresh_every}, and {where}: they cannot be recomputed from the model at a "
          f"later step. Resume from a checkpoint at a multiple of refresh_every={space.refresh_every}, or "
          "give the ModelSpace a directory (and keep enough refreshes) before training.")
    if self.training is not None and at_refresh_step:
      self.training.reset(features, step)
    return self._installed(refresh, features, from_build, install, began)

  def _installed(self, refresh: int, features: np.ndarray, from_build: bool,
                 install: Callable[[np.ndarray, bool], None], began: float) -> float:
    """Installs the features of `refresh`, tells the stream, and returns the seconds since `began`."""
    self._build_features = None
    install(features, from_build)
    # Last: a draw waiting for this refresh reads the drawer's state once it sees the version.
    self._version.assign(refresh)
    self._installed_refresh = refresh
    seconds = time.perf_counter() - began
    self.seconds += seconds
    self.refreshes += 1
    return seconds

  def installed(self) -> int:
    """The refresh whose features the drawer holds (`_model_space.NO_REFRESH`: none yet)."""
    return self._installed_refresh

  def _save_in_background(self, refresh: int, features: np.ndarray) -> None:
    """Writes the features of `refresh` to the directory in a thread (`_finish_saving` waits for it)."""
    if self.space.directory is None:
      return

    def save():
      try:
        _model_space.save(self.space, refresh, features, "")
      except BaseException as error:  # pylint: disable=broad-except
        self._saving_error = error

    # Not a daemon: the process finishes the write before it exits.
    self._saving = threading.Thread(target=save, name="tf_repulsive_refresh_save")
    self._saving.start()

  def _finish_saving(self) -> None:
    """Waits for the write of the last table's features, and raises what it raised."""
    if self._saving is not None:
      self._saving.join()
      self._saving = None
    error, self._saving_error = self._saving_error, None
    if error is not None:
      raise error

  def of_step(self, step: int) -> int:
    """The refresh whose features the batch of `step` is drawn on."""
    return step // self.space.refresh_every

  def check_installed(self, step: int) -> None:
    """Raises if the features in force at `step` are not the ones installed."""
    refresh, installed = self.of_step(step), self.installed()
    if installed != refresh:
      raise ValueError(
          f"step {step} is drawn on the features of refresh {refresh}, and the batcher holds those of "
          f"{'no refresh' if installed == _model_space.NO_REFRESH else f'refresh {installed}'}: call "
          "batcher.refresh_features(step) first.")

  def wait(self, first_step: tf.Tensor, skip: tf.Tensor, probe: tf.Tensor) -> tf.Operation:
    """The op a draw of `first_step` on waits on until its refresh is installed (a probe: none).

    The draw, and the point groups recorded with it, read the refreshed state only once its
    refresh is in: prefetching waits here. A probe (Keras' model build) draws on any.
    """
    refresh = first_step // self.space.refresh_every
    return tf.cond(probe, tf.no_op, lambda: _model_space.wait_for_refresh(
        self._version, refresh, first_step + skip, self.space.timeout_seconds))


def refuse_unrefreshable(sampler: _contract.Sampler, drawer: _contract.BatchDrawer) -> _contract.BatchDrawer:
  """`drawer.refreshable()`, or a TypeError naming the samplers that can take refreshed features."""
  refreshable = drawer.refreshable()
  if refreshable is None:
    raise TypeError(
        f"{type(sampler).__name__} cannot take refreshed features (its drawer's refreshable() is None): "
        "with a ModelSpace use Uniform, VanillaPDS, EasyPDS, DensePDS, AnnealPDS, Importance, ImportancePDS or "
        "Marginals.")
  return refreshable
