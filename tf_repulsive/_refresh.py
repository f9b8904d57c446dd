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

# `install(features, from_build, radius_search_start) -> radius_search_point` (`FeatureRefresher.refresh`).
Install = Callable[[np.ndarray, bool, "int | None"], "int | None"]


class FeatureRefresher:
  """Installs the features of each refresh into a batcher's drawer, and tells the stream which it holds.

  Args:
    space: the batcher's `ModelSpace`.
    elements: the materialised elements the features are computed from.
    build_features: the features the build computed, from the model as it was then.
    searches_radius: whether the sampler searches an `"auto"` radius
      (`BatchDrawer.radius_search_point`), which a refresh from the table starts where the last
      search ended.
  """

  def __init__(self, space: _model_space.ModelSpace, elements: Any, build_features: np.ndarray,
               searches_radius: bool):
    self.space = space
    self._searches_radius = searches_radius
    self._elements = elements
    # The table of features from the training step (`ModelSpace.from_training_step`), set by the build.
    self.training: _training_features.TrainingFeatures | None = None
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

  def refresh(self, step: int, install: Install) -> float:
    """Installs the features in force at `step`; returns the seconds it took (0.0: already in).

    `install(features, from_build, radius_search_start)` builds the sampler on the features,
    hands its state to the stream's drawer and returns where its radius search ended;
    `from_build` says the features are the build's own, from these very weights.
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
      point = self._install(refresh, features, False, install)
      self._save_in_background(refresh, _model_space.SavedRefresh(features, "", point))
      return self._took(began)
    saved = _model_space.load(space, refresh)
    fingerprint = _model_space.weights_fingerprint(space.model) if at_refresh_step else ""
    kept = self._build_features
    from_build = at_refresh_step and kept is not None and kept[0] == fingerprint
    if saved is not None and (not at_refresh_step or saved.fingerprint == fingerprint):
      features, computed = saved.features, False
    elif at_refresh_step:
      features = kept[1] if from_build and kept is not None else _model_space.compute(space, self._elements)
      computed = True
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
    point = self._install(refresh, features, from_build, install)
    if computed:
      _model_space.save(space, refresh, _model_space.SavedRefresh(features, fingerprint, point))
    return self._took(began)

  def _radius_search_start(self, refresh: int) -> int | None:
    """Where the radius search of `refresh` starts: where the last one ended, for a refresh from the table.

    A full refresh searches from scratch, so that its batches are a function of its features
    alone. A refresh from the table starts where the search of the refresh before it ended
    (or its own, in a resumed run: a search that starts on its result ends there), which the
    table's checkpoint and each refresh's file hold.
    """
    if not self._searches_radius or self.training is None or self.space.is_full_refresh(refresh):
      return None
    searched, point = (int(value) for value in self.training.radius_search.numpy())
    if searched in (refresh - 1, refresh):
      return point
    for earlier in (refresh, refresh - 1):
      saved = _model_space.load(self.space, earlier)
      if saved is not None and saved.radius_search_point is not None:
        return saved.radius_search_point
    raise ValueError(
        f"refresh {refresh} builds the sampler on the table of features from the training step, and its "
        f"\"auto\" radius search starts where that of refresh {refresh - 1} ended, which is not at hand: keep "
        "batcher.training_features in your checkpoint (it holds it with the table), or give the ModelSpace a "
        "directory (each refresh's file holds it).")

  def _install(self, refresh: int, features: np.ndarray, from_build: bool, install: Install) -> int | None:
    """Installs the features of `refresh`, tells the stream, and returns where the radius search ended."""
    self._build_features = None
    point = install(features, from_build, self._radius_search_start(refresh))
    if self.training is not None and point is not None:
      self.training.radius_search.assign([refresh, point])
    # Last: a draw waiting for this refresh reads the drawer's state once it sees the version.
    self._version.assign(refresh)
    self._installed_refresh = refresh
    return point

  def _took(self, began: float) -> float:
    """Counts a refresh installed and returns the seconds since `began`."""
    seconds = time.perf_counter() - began
    self.seconds += seconds
    self.refreshes += 1
    return seconds

  def installed(self) -> int:
    """The refresh whose features the drawer holds (`_model_space.NO_REFRESH`: none yet)."""
    return self._installed_refresh

  def _save_in_background(self, refresh: int, saved: _model_space.SavedRefresh) -> None:
    """Writes the file of `refresh` to the directory in a thread (`_finish_saving` waits for it)."""
    if self.space.directory is None:
      return

    def save():
      try:
        _model_space.save(self.space, refresh, saved)
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
