"""The package's Keras callbacks: each starts a batch stream at the optimizer's step.

`AnnealingCallback` also logs pi and the mingling mix; `ActiveBiasCallback` learns the weights of
`ActiveBias`.
"""

from __future__ import annotations

import os
import re
import warnings

import keras
import numpy as np
import tensorflow as tf

from tf_repulsive import _active_bias
from tf_repulsive import _dataset_graph
from tf_repulsive import _pipeline
from tf_repulsive import _recording

# Steps trained between two reads of the pipeline's record of the last 4096 steps drawn.
_READ_RECORD_EVERY = 1024
# Steps missing from one read of the record that are recomputed for the logs (a draw each); with
# more missing, the stream ran elsewhere and the epoch's record is not logged.
_RECOMPUTED_STEPS = 64


class BatchStreamCallback(keras.callbacks.Callback):
  """Makes the batch of optimizer step n the draw of step n in `fit` (base of the package's callbacks).

  When `fit` starts an epoch (after every callback's `on_train_begin`, so after `BackupAndRestore`
  has restored the optimizer, whatever the order of the callbacks), a stream of the batcher that
  begins then starts at `optimizer.iterations`: `fit`'s one iterator for all epochs given
  `steps_per_epoch`, or the iterator it opens per epoch for a stream that ends (`.take(n)` after
  the batcher). Only a callback running in `fit` starts a stream: constructing one lets a stream
  deliver one batch unstarted, what Keras takes under a distribution strategy to build the model
  before any callback runs (see `RepulsiveBatcher._allow_build_probe`).

  Give it the dataset `fit` trains on as `dataset` when that is not the batcher's stream itself.
  It then refuses, when constructed, a dataset that transforms the stream in a way that changes
  which draw a step trains on (`shuffle`, `filter`, `skip`, `batch`, `unbatch`, `cache` ...
  after the batcher; `map`, `prefetch`, `take`, `repeat` and `zip` are fine), and a stream read
  from tf.data service workers that it could not start or that draws on what this process's
  training computes. Logging callbacks of two batchers with one `name` fail at the first
  epoch's end.

  After each epoch's first batch it checks that the stream began where it must, and raises if
  not: a stream running out of the callback's reach (such as on tf.data service workers), a
  fixed `start_step` that does not match the optimizer, or a fixed-start stream that `fit` began
  again for a later epoch.
  Then and at the epoch's end it also checks that the stream drawn here delivered every step
  trained (a transformation it could not see that replays or splits batches).

  `fit` must be given `steps_per_epoch` (the stream is unbounded; `batcher.steps_per_epoch` for
  one pass's worth of batches per epoch) or a stream that ends.

  For a batcher with a `ModelSpace`, it also refreshes the features: when `fit` starts (the
  refresh in force at the optimizer's step, read back from the ModelSpace's directory when
  training resumes between two refreshes) and after every `refresh_every`-th step, from the model
  `fit` trains, except after its last step (no step of this `fit` would draw on them; a later
  `fit` computes them from the same model when it starts). Each epoch's logs then hold
  ``<name>_refresh_seconds``, the seconds its refreshes took (also in the progress bar, `History`
  and `TensorBoard`).

  Args:
    batcher: what `tf_repulsive.repulsive_batch(...)` returned, applied to the training data.
    name: what this callback's log keys start with. Callbacks of two batchers in one `fit` need
      two names.
    dataset: the dataset given to `fit`, when it transforms the batcher's stream (`map`,
      `prefetch`, tf.data service ...), to be checked now. None: `fit` trains on the stream.

  Example (a second `fit` continues the stream at the optimizer's step):

  >>> import keras, numpy as np, tensorflow as tf, tf_repulsive
  >>> x = np.random.default_rng(0).normal(size=(100, 2)).astype("float32")
  >>> y = (x[:, 0] > 0).astype("int64")
  >>> batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.VanillaPDS(), seed=0)
  >>> batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
  >>> model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  >>> for _ in range(2):
  ...   _ = model.fit(batches, steps_per_epoch=batcher.steps_per_epoch, verbose=0,
  ...                 callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  >>> batcher.stats().last_start, int(model.optimizer.iterations)
  (10, 20)

  Raises:
    TypeError: if `batcher` is not a `RepulsiveBatcher`, or `dataset` not a `tf.data.Dataset`.
    ValueError: for a `name` that is not a log key prefix, or a `dataset` that is not made from
      the batcher's stream or transforms it as above.
  """

  def __init__(self, batcher: _pipeline.RepulsiveBatcher, name: str = "sampler",
               dataset: tf.data.Dataset | None = None):
    super().__init__()
    if not isinstance(batcher, _pipeline.RepulsiveBatcher):
      raise TypeError(
          f"`batcher` must be what tf_repulsive.repulsive_batch(...) returned; got {batcher!r}.")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
      raise ValueError(
          f"`name` must start with a letter and hold letters, digits and underscores only (it prefixes "
          f"the log keys); got {name!r}.")
    self._batcher = batcher
    self._hooks = _pipeline.hooks(batcher)
    self.name = name
    self._epochs_begun = 0  # in this fit
    self._epoch_start = 0
    # The step after the fit's last one, when known (its last epoch has begun, of known length).
    self._fit_end: int | None = None
    self._streams_checked = 0
    self._start_checked = False
    self._drawn_here = False  # whether the stream of this fit began in this process
    self._refresh_seconds = 0.0  # in this epoch
    # The values this callback last put into the logs, by key: a key found in the logs with
    # another value came from another callback.
    self._logged: dict[str, object] = {}
    if dataset is not None:
      self._check_dataset(dataset)
    self._hooks.allow_build_probe()

  def _optimizer_step(self) -> int:
    return int(np.asarray(self.model.optimizer.iterations))

  def on_train_begin(self, logs=None):
    if self.params.get("steps") is None:
      raise ValueError(
          "repulsive_batch gives an unbounded stream of batches: pass "
          "steps_per_epoch=batcher.steps_per_epoch (or any number of steps) to fit.")
    self._batcher.steps_per_epoch  # Raises now if the batcher was never applied to a dataset.
    workers = workers_of(self.model)
    self._check_model_space(workers)
    if _recording.records_training(self._batcher):
      _recording.check_fit(self._batcher, self.model)
    if workers > 1 and not self._batcher.per_replica_slices:
      # TF's multi-worker rebatching expects each worker to read different data; given the same
      # global draws, the workers' slices would overlap.
      raise ValueError(
          f"under a strategy with {workers} workers, give fit the stream of "
          "strategy.distribute_datasets_from_function(lambda context: "
          "dataset.apply(batcher.per_replica(context))): each worker then takes its replicas' "
          "slices of every global draw.")
    self._epochs_begun = 0
    self._streams_checked = self._batcher.stats().streams
    self._start_checked = False
    self._drawn_here = False

  def _check_model_space(self, workers: int) -> None:
    """Refuses a fit whose features this callback could not refresh at the steps they are due."""
    space = self._hooks.space
    if space is None:
      return
    if workers > 1:
      raise ValueError(
          f"under a strategy with {workers} workers the features of a ModelSpace batcher would be "
          "refreshed by every worker on its own: refreshed features need one worker (MirroredStrategy "
          "on one machine works).")
    trained = self.model.trained_model if isinstance(self.model, _recording.RecordingModel) else self.model
    if space.model is not trained:
      raise ValueError(
          "the batcher's ModelSpace computes its features from another model than the one fit trains: "
          "give the ModelSpace the model whose fit this callback runs in.")
    steps_per_execution = int(getattr(self.model, "steps_per_execution", 1) or 1)
    replicas = self.model.distribute_strategy.num_replicas_in_sync
    if space.from_training_step and (steps_per_execution > 1 or replicas > 1):
      raise ValueError(
          "ModelSpace(from_training_step=True) checks and logs each step's record between steps: it needs "
          "steps_per_execution=1 and one replica. Use from_training_step=False here.")
    if space.refresh_every % steps_per_execution or self.params["steps"] % steps_per_execution:
      raise ValueError(
          f"the model runs steps_per_execution={steps_per_execution} steps between callbacks, and "
          f"refresh_every={space.refresh_every} and steps_per_epoch={self.params['steps']} must be "
          "multiples of it: the features are refreshed between executions, before the step they are "
          "due at.")

  def _refresh(self, step: int) -> None:
    if self._hooks.space is not None:
      self._refresh_seconds += self._batcher.refresh_features(step)

  def _log(self, logs: dict | None, values: dict[str, float]) -> None:
    """Puts `values` into `logs`; refuses a key that another callback put there (another batcher's, same name)."""
    if logs is None:
      return
    taken = sorted(key for key in values if key in logs and logs[key] is not self._logged.get(key))
    if taken:
      raise ValueError(
          f"the epoch logs already hold {taken[0]!r}: fit has tf_repulsive callbacks for two batchers named "
          f"{self.name!r}, and their log keys would collide. Give the callbacks distinct names, "
          "AnnealingCallback(batcher, name=\"train\").")
    logs.update(values)
    self._logged.update(values)

  def _check_dataset(self, dataset) -> None:
    """Refuses a `dataset` for fit that is not this batcher's stream, transformed so that step n trains on draw n."""
    if not isinstance(dataset, tf.data.Dataset):
      raise TypeError(f"`dataset` must be the tf.data.Dataset given to fit, or None; got {dataset!r}.")
    # (The walk back to the stream ends at a tf.data service read: the workers hold the rest.)
    if _dataset_graph.read_from_service(dataset):
      if self._batcher.start_step is None:
        raise ValueError(
            "fit reads its batches from tf.data service workers, where this callback cannot start the "
            "stream (the workers run their own copy of the batcher): build the batcher with "
            "start_step=<the optimizer's step> (0 for a new model, int(model.optimizer.iterations) to "
            "continue) before distributing its stream.")
      if self._hooks.space is not None or self._batcher.drawer.learns_from_losses:
        raise ValueError(
            "fit reads its batches from tf.data service workers, and this batcher draws on what the training in "
            "this process computes (a ModelSpace's features, or recorded losses): the workers' copies of the "
            "stream cannot receive them. Train it without tf.data service.")
      return
    kinds = self._hooks.transformations_after(dataset)
    if kinds is None:
      raise ValueError(
          "`dataset` is not made from this batcher's stream: give the callback the dataset fit trains on, "
          "ds.apply(batcher) and what follows it.")
    if not kinds:
      return
    changing, unknown = _dataset_graph.step_changing(kinds)
    if changing is not None:
      raise ValueError(
          f"the dataset given to fit applies {changing} after the batcher: step n would not train "
          "on draw n. Transform the input dataset before the batcher (shuffle, filter, cache it "
          "there), and the batches after it only with map() (augmentation), prefetch(), take() or "
          "repeat().")
    if unknown:
      warnings.warn(
          f"the dataset given to fit applies {', '.join(unknown)} after the batcher, which "
          "tf_repulsive does not know; if it drops, reorders, merges or replays batches, step n "
          "trains on another step's draw.", RuntimeWarning, stacklevel=2)

  def on_train_end(self, logs=None):
    # A later fit under a distribution strategy takes a batch before any callback runs, again.
    self._hooks.allow_build_probe()

  def on_epoch_begin(self, epoch, logs=None):
    step = self._optimizer_step()
    self._refresh_seconds = 0.0
    # Before the stream can begin: its first draw waits for the features in force.
    self._refresh(step)
    fixed = self._batcher.start_step
    if fixed is None:
      # Every epoch, not once per fit: `fit` keeps one iterator for all epochs given
      # steps_per_epoch, and that stream ignores a later start; but for a dataset that ends (a
      # `take()` after the batcher) it opens a new iterator per epoch, which must start here.
      self._batcher.start_at(step)
    elif self._epochs_begun == 0 and fixed != step:
      raise ValueError(
          f"the batcher's stream starts at the fixed start_step={fixed} but the optimizer is at "
          f"step {step}: the batches would not be the draws of their steps. Build the batcher "
          "with start_step=None so that this callback starts it at the optimizer's step.")
    self._epochs_begun += 1
    self._epoch_start = step
    steps = self.params.get("steps")
    self._fit_end = step + steps if steps is not None and epoch + 1 == self.params.get("epochs") else None
    self._start_checked = False

  def on_train_batch_end(self, batch, logs=None):
    space = self._hooks.space
    next_step = self._epoch_start + batch + 1
    if space is not None and space.from_training_step and self._epochs_begun:
      self._batcher.training_features.log(next_step - 1)
    due = space is not None and self._epochs_begun and next_step % space.refresh_every == 0
    if due and next_step != self._fit_end:
      # The stream waits at the next step for the features of the model as it is now.
      self._refresh(next_step)
    # The epoch's first call (with steps_per_execution > 1 its `batch` is not 0).
    if self._epochs_begun == 0 or self._start_checked:
      return
    self._start_checked = True
    # Streams that began drawing here since the last check: none for the iterator of the earlier
    # epochs going on, or for a stream drawn elsewhere.
    streams = self._batcher.stats().streams
    began, self._streams_checked = streams > self._streams_checked, streams
    self._drawn_here = self._drawn_here or began
    self._check_start(began)
    self._check_delivered()

  def _check_start(self, began: bool) -> None:
    """Raises if the epoch's stream did not begin where it must (`began`: a stream began here)."""
    first_epoch = self._epochs_begun == 1
    if self._batcher.start_step is not None:
      if began and not first_epoch:
        raise RuntimeError(
            f"fit opened a new iterator for the epoch at step {self._epoch_start}, and the stream "
            f"began again at its fixed start_step={self._batcher.start_step}: the epoch would repeat "
            "earlier steps' batches. Give fit the unbounded stream and steps_per_epoch (it then keeps "
            "one iterator), or build the batcher with start_step=None.")
      return
    if not began and not first_epoch:
      return
    started = self._batcher.stats().last_start if began else None
    if started != self._epoch_start:
      raise RuntimeError(
          f"the batch stream did not start at the optimizer's step {self._epoch_start} "
          f"({'it started at ' + str(started) if started is not None else 'no start was recorded here'}): "
          "it runs where the callback cannot reach it (for example on tf.data service workers), or "
          "began before the callback could start it (a repeat() after the batcher). Build the batcher "
          "with start_step=<the optimizer's step> before distributing it; repeat() only the batcher's "
          "unbounded stream.")

  def on_epoch_end(self, epoch, logs=None):
    self._check_delivered()
    if self._hooks.space is not None:
      self._log(logs, {f"{self.name}_refresh_seconds": self._refresh_seconds})
    if self._batcher.drawer.learns_from_losses:
      self._batcher.drawer.check_recorded()
      self._log(logs, _recording.epoch_logs(self._batcher, self.name))

  def _check_delivered(self) -> None:
    """Raises if fit trained a step the stream has not delivered: its batch came from elsewhere."""
    if not self._drawn_here:
      return
    trained = self._optimizer_step() - 1
    delivered = self._batcher.stats().last_step_delivered
    if delivered is None or delivered < trained:
      raise RuntimeError(
          f"fit trained step {trained}, but the batch stream has delivered the batches of steps up "
          f"to {delivered} only: the later ones were not its draws. A transformation after the "
          "batcher replays or splits its batches (cache(), snapshot() or a save()d copy replay "
          "earlier steps; unbatch().batch() makes more steps than draws). Transform the input "
          "dataset before the batcher instead (cache() it there), or give fit the batcher's stream.")


class AnnealingCallback(BatchStreamCallback):
  """Starts the batch stream at the optimizer's step and logs pi, the mingling mix and the fallback fill.

  Does what `BatchStreamCallback` does (the batch of optimizer step n is draw n, also when training
  resumes), and logs, for each epoch, with its `name` (default "sampler") as prefix:

  * `<name>_mingling`: the mean mingling index (0: every neighbour shares the label, 1: none
    does) of the points of the epoch's batches, for Easy, Dense and Anneal PDS;
  * `<name>_pi_mingling`: the mean mingling index under pi at the epoch's last step (Dense /
    Anneal PDS): where annealing stands;
  * `<name>_fallback_batches`: the epoch's batches whose darts ran out before they were full;

  and in detail

  * ``<name>_pi_<m>``: pi over mingling value m/K at the epoch's last step;
  * ``<name>_mingling_<m>``: the share of the epoch's batch points with mingling value m/K.

  A sampler of your own that reports other point groups (`BatchDrawer.groups`, `PointGroups`)
  gets the same keys under its groups' name: their mean level instead of the mean mingling index.

  The three summaries go into the epoch logs, so the progress bar, `History`, `TensorBoard` and
  any other callback after this one see them. The detail goes to `History` (`fit`'s return
  value), and with `log_dir` to TensorBoard (as ``epoch_<key>`` in its "train" run): the
  progress bar stays readable. Give `log_dir` the directory of your `keras.callbacks.TensorBoard`
  and list this callback before it. Outside `fit` (a custom loop's own calls, with no `History`
  on the model) the logs get the detail too. With
  `log_batches=True` every batch's logs get the summaries of that batch as well (for TensorBoard
  with `update_freq="batch"`).

  The mingling mix and the fallback count come from what the stream records as it draws, read
  every 1024 steps, so logging costs the same at any epoch length. A stream drawn in another
  process (on tf.data service workers) records nothing here: its epochs log pi only, with a
  warning, rather than recompute a draw per step.

  Args:
    batcher: what `tf_repulsive.repulsive_batch(...)` returned, applied to the training data.
    log_batches: also log every batch's summaries.
    name: what the log keys start with. Callbacks of two batchers in one `fit` need two names.
    dataset: the dataset given to `fit`, when it transforms the batcher's stream (see
      `BatchStreamCallback`).
    log_dir: a TensorBoard log directory for the detail, or None.

  Example:

  >>> import keras, numpy as np, tensorflow as tf, tf_repulsive
  >>> x = np.random.default_rng(0).normal(size=(200, 2)).astype("float32")
  >>> y = (x[:, 0] > 0).astype("int64")
  >>> batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.AnnealPDS(radius=0.3), seed=0)
  >>> batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
  >>> model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  >>> history = model.fit(batches, epochs=2, steps_per_epoch=batcher.steps_per_epoch, verbose=0,
  ...                     callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  >>> int(model.optimizer.iterations), sorted(key for key in history.history if key.startswith("sampler"))[:3]
  (20, ['sampler_fallback_batches', 'sampler_mingling', 'sampler_mingling_0'])

  Raises:
    TypeError: if `batcher` is not a `RepulsiveBatcher`.
    ValueError: for a `name` that is not a log key prefix.
  """

  def __init__(self, batcher: _pipeline.RepulsiveBatcher, log_batches: bool = False, name: str = "sampler",
               dataset: tf.data.Dataset | None = None, log_dir: str | os.PathLike | None = None):
    super().__init__(batcher, name, dataset)
    if not isinstance(log_batches, bool):
      raise TypeError(f"`log_batches` must be True or False; got {log_batches!r}.")
    if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
      raise TypeError(f"`log_dir` must be a TensorBoard log directory (a path) or None; got {log_dir!r}.")
    self._log_dir = log_dir
    self._log_batches = log_batches
    self._epoch_record: np.ndarray | None = None
    self._read_to = 0
    self._unseen_steps = 0
    self._warned_unseen = False  # in this fit
    # The writer into `log_dir`'s "train" run, while a fit runs.
    self._writer: tf.summary.SummaryWriter | None = None

  def on_train_begin(self, logs=None):
    super().on_train_begin(logs)
    self._warned_unseen = False
    self._close_writer()
    if self._log_dir is not None:
      self._writer = tf.summary.create_file_writer(os.path.join(self._log_dir, "train"))

  def on_train_end(self, logs=None):
    super().on_train_end(logs)
    self._close_writer()

  def _close_writer(self) -> None:
    if self._writer is not None:
      self._writer.close()
    self._writer = None

  def on_epoch_begin(self, epoch, logs=None):
    super().on_epoch_begin(epoch, logs)
    # The epoch's record so far: [batches the fill completed, points per group ...], the
    # first step not read yet, and the steps whose batches were drawn out of this process's sight.
    self._epoch_record = None
    self._read_to = self._epoch_start
    self._unseen_steps = 0

  def on_train_batch_end(self, batch, logs=None):
    super().on_train_batch_end(batch, logs)
    # The pipeline records the last 4096 steps drawn: reading it every 1024 steps trained keeps
    # the epoch's logs a sum of what was recorded, whatever the epoch's length. (`batch` is the
    # epoch's last batch trained, so no variable is read per batch.)
    if self._epoch_start + batch + 1 - self._read_to >= _READ_RECORD_EVERY:
      self._read_record(self._optimizer_step())
    if self._log_batches and logs is not None:
      trained_to = self._optimizer_step()
      rows, found = self._hooks.recorded([trained_to - 1], redraw_at_most=0)
      self._log(logs, self._summaries(trained_to - 1, _summed(rows) if found[0] else None)[0])

  def _read_record(self, end: int) -> None:
    """Adds the record of the steps from `_read_to` to `end` to the epoch's."""
    steps = np.arange(self._read_to, end, dtype=np.int64)
    self._read_to = end
    if not steps.size:
      return
    rows, found = self._hooks.recorded(steps, redraw_at_most=_RECOMPUTED_STEPS)
    self._unseen_steps += int(np.count_nonzero(~found))
    epoch_record = _summed(rows[found])
    self._epoch_record = epoch_record if self._epoch_record is None else self._epoch_record + epoch_record

  def on_epoch_end(self, epoch, logs=None):
    super().on_epoch_end(epoch, logs)
    end = self._optimizer_step()
    self._read_record(end)
    if self._unseen_steps and not self._warned_unseen:
      self._warned_unseen = True
      warnings.warn(
          f"{self._unseen_steps} of the {end - self._epoch_start} steps of epoch {epoch} trained on batches "
          "drawn out of this process's sight (on tf.data service workers, say): AnnealingCallback logs "
          f"pi only, not the batches' group shares or {self.name}_fallback_batches. "
          "batcher.group_mixes(steps) and batcher.fallback_counts(steps) recompute them, a draw per step.",
          RuntimeWarning, stacklevel=2)
    summaries, detail = self._summaries(end - 1, None if self._unseen_steps else self._epoch_record)
    # fit puts its History on the model when it starts.
    history = getattr(self.model, "history", None)
    if not isinstance(history, keras.callbacks.History):
      self._log(logs, summaries | detail)
      return
    self._log(logs, summaries)
    for key, value in detail.items():
      history.history.setdefault(key, []).append(value)
    if self._writer is not None:
      with self._writer.as_default():
        for key, value in detail.items():
          tf.summary.scalar(f"epoch_{key}", value, step=epoch)
      self._writer.flush()

  def _summaries(self, last_step: int, record: np.ndarray | None) -> tuple[dict[str, float], dict[str, float]]:
    """The summaries and the detail as log keys: pi at `last_step`, and those of `record` if given.

    `record`: the batches the fill completed, then the batch points per group (none without
    groups).
    """
    batcher, name = self._batcher, self.name
    groups = batcher.drawer.groups
    summaries, detail = {}, {}
    if record is not None:
      summaries[f"{name}_fallback_batches"] = float(record[0])
      points = record[1:]
      if points.sum() > 0 and groups is not None:
        mix = points / points.sum()
        summaries[f"{name}_{groups.name}"] = float(np.dot(mix, groups.levels))
        detail.update({f"{name}_{groups.name}_{g}": float(share) for g, share in enumerate(mix)})
    pi = batcher.pi(last_step) if last_step >= 0 else None
    if pi is not None and groups is not None:  # (`batcher.pi` checked that pi weighs the groups)
      summaries[f"{name}_pi_{groups.name}"] = float(np.dot(pi, groups.levels))
      detail.update({f"{name}_pi_{g}": float(p) for g, p in enumerate(pi)})
    return summaries, detail


def workers_of(model: keras.Model) -> int:
  """The workers of the model's distribution strategy (1 without one)."""
  # Only the TensorFlow backend's models have a strategy (JAX and PyTorch distribute otherwise).
  resolver = getattr(getattr(model, "distribute_strategy", None), "cluster_resolver", None)
  return resolver.cluster_spec().num_tasks("worker") if resolver is not None else 1


def _summed(rows: np.ndarray) -> np.ndarray:
  """Per-step record rows `[fallback points, counts ...]` as one: the batches the fill completed, the counts."""
  return np.concatenate([[np.count_nonzero(rows[:, 0])], rows[:, 1:].sum(axis=0)])


class ActiveBiasCallback(BatchStreamCallback):
  """Records p(true label | x) for every training example after each epoch; updates the weights.

  Also starts the batch stream at the optimizer's step (see `BatchStreamCallback`), so it is the
  only callback an ActiveBias pipeline needs. Logs `<name>_max_probability` per epoch, the largest
  sampling probability, with its `name` as prefix.

  Differs from the paper in when predictions are recorded: once per epoch for all examples, in
  inference mode, rather than for the examples of each mini-batch during its training step. Every
  example then has the same history length and the weights change only between epochs, so all
  batches of an epoch are drawn with one set of weights, except those drawn ahead of the epoch's
  end by prefetching, which use the old weights.

  Args:
    batcher: the `repulsive_batch(..., ActiveBias())` batcher whose stream feeds `fit`.
    from_logits: whether the model outputs logits (else probabilities).
    batch_size: inference batch size for the per-epoch pass.
    inputs: the model inputs of the training examples, in dataset order, for the per-epoch
      pass. By default the first component of the dataset's (x, y[, ...]) elements; pass them
      when the pipeline transforms batches after sampling (feature extraction, augmentation),
      so that the stored elements are not what the model takes.
    name: what the log keys start with.
    dataset: the dataset given to `fit`, when it transforms the batcher's stream (see
      `BatchStreamCallback`).

  Example:

  >>> import keras, numpy as np, tensorflow as tf, tf_repulsive
  >>> x = np.random.default_rng(0).normal(size=(200, 2)).astype("float32")
  >>> y = (x[:, 0] > 0).astype("int64")
  >>> batcher = tf_repulsive.repulsive_batch(20, tf_repulsive.ActiveBias(), seed=0)
  >>> batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
  >>> model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  >>> callback = tf_repulsive.ActiveBiasCallback(batcher)
  >>> history = model.fit(batches, epochs=3, steps_per_epoch=batcher.steps_per_epoch, verbose=0,
  ...                     callbacks=[callback])
  >>> int(callback.state.epochs.numpy()), "sampler_max_probability" in history.history
  (3, True)

  Raises:
    TypeError: if `batcher` is not a batcher of an ActiveBias sampler.
    ValueError: if the batcher has a fixed `start_step`.
  """

  def __init__(self, batcher: _pipeline.RepulsiveBatcher, from_logits: bool = True, batch_size: int = 1024,
               inputs: np.ndarray | tf.Tensor | None = None, name: str = "sampler",
               dataset: tf.data.Dataset | None = None):
    super().__init__(batcher, name, dataset)
    if not isinstance(batcher.sampler, _active_bias.ActiveBias):
      raise TypeError(f"`batcher` must sample with ActiveBias(); it samples with {batcher.sampler!r}.")
    if batcher.start_step is not None:
      # The weights live in this process: the stream must run here, which the callback checks
      # only for a stream it starts itself.
      raise ValueError(
          "ActiveBiasCallback needs a batcher built with start_step=None: the sampling weights it "
          "updates live in this process, and it checks that the stream it starts runs here.")
    self._from_logits = from_logits
    self._batch_size = batch_size
    self._inputs = inputs

  @property
  def state(self) -> _active_bias.ActiveBiasState:
    """The checkpointable history and weights (available once the pipeline is built)."""
    drawer = self._batcher.drawer
    assert isinstance(drawer, _active_bias.WeightedDrawer)  # the constructor checked the sampler
    return drawer.state

  def on_train_begin(self, logs=None):
    super().on_train_begin(logs)
    self._training_inputs()  # Fails before the first epoch rather than after it.

  def _training_inputs(self):
    batcher = self._batcher
    if self._inputs is None:
      if not isinstance(batcher.elements, tuple) or len(batcher.elements) < 2:
        raise ValueError("ActiveBiasCallback needs (x, y) elements with the model input first, or "
                         "the model inputs of the training examples as `inputs`.")
      return batcher.elements[0]
    num_inputs = int(tf.nest.flatten(self._inputs)[0].shape[0])
    if num_inputs != len(batcher.element_labels):
      raise ValueError(f"`inputs` holds {num_inputs} examples but the sampled dataset has "
                       f"{len(batcher.element_labels)}; pass the model inputs of every training example, "
                       "in dataset order.")
    return self._inputs

  def on_epoch_end(self, epoch, logs=None):
    super().on_epoch_end(epoch, logs)
    inputs, labels = self._training_inputs(), self._batcher.element_labels
    outputs = self.model.predict(inputs, batch_size=self._batch_size, verbose=0)
    probabilities = tf.nn.softmax(outputs).numpy() if self._from_logits else np.asarray(outputs)
    true_class = probabilities[np.arange(len(labels)), labels].astype(np.float64)
    state = self.state
    state.count.assign_add(np.ones_like(true_class))
    state.total.assign_add(true_class)
    state.total_sq.assign_add(true_class**2)
    state.epochs.assign_add(1)
    if int(state.epochs.numpy()) >= self._batcher.sampler.warmup_epochs:
      state.weights.assign(_active_bias.prediction_variance_weights(
          state.count.numpy(), state.total.numpy(), state.total_sq.numpy(), self._batcher.sampler.smoothness))
    weights = state.weights.numpy()
    self._log(logs, {f"{self.name}_max_probability": float(weights.max() / weights.sum())})
