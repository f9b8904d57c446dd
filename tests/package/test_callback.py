"""model.fit with AnnealingCallback: batch of optimizer step n is the draw for n, with pi_n."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive

BATCH = 50


class _Recorder(keras.callbacks.Callback):
  """Keeps every batch's logs and the fingerprint of the batch the train step consumed."""

  def __init__(self, fingerprint):
    super().__init__()
    self.fingerprint = fingerprint
    self.batch_logs = []
    self.epoch_logs = []
    self.consumed = []

  def on_train_batch_end(self, batch, logs=None):
    step = int(self.model.optimizer.iterations.numpy()) - 1
    self.batch_logs.append((step, dict(logs)))
    self.consumed.append((step, float(self.fingerprint.numpy())))

  def on_epoch_end(self, epoch, logs=None):
    self.epoch_logs.append(dict(logs))


class FingerprintModel(keras.Model):
  """A small classifier whose train step stores the sum of the inputs it was given."""

  def __init__(self, fingerprint):
    super().__init__(name="fingerprint_model")
    self._fingerprint = fingerprint
    self.hidden = keras.layers.Dense(32, activation="relu")
    self.out = keras.layers.Dense(10)

  def call(self, x):
    return self.out(self.hidden(x))

  def train_step(self, data):
    self._fingerprint.assign(tf.reduce_sum(tf.cast(data[0], tf.float64)))
    return super().train_step(data)


def _model(steps_per_execution=1):
  fingerprint = tf.Variable(0.0, dtype=tf.float64, trainable=False)
  model = FingerprintModel(fingerprint)
  model.compile(optimizer=keras.optimizers.Adam(1e-3), steps_per_execution=steps_per_execution,
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model, fingerprint


def _digits_batcher(digits, sampler, seed=3, start_step=None):
  features, labels = digits
  batcher = tf_repulsive.repulsive_batch(BATCH, sampler, seed=seed, start_step=start_step)
  return batcher, tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)


def _fit(digits, sampler, epochs, steps_per_epoch=None, seed=3, repeat=False, model=None,
         log_batches=False, pipeline=None):
  model, fingerprint = model or _model()
  batcher, batches = pipeline or _digits_batcher(digits, sampler, seed=seed)
  if repeat:
    batches = batches.repeat()
  recorder = _Recorder(fingerprint)
  model.fit(batches, epochs=epochs, steps_per_epoch=steps_per_epoch or batcher.steps_per_epoch, verbose=0,
            callbacks=[tf_repulsive.AnnealingCallback(batcher, log_batches=log_batches), recorder])
  return batcher, recorder


def _expected_fingerprint(digits, batcher, step):
  indices = batcher.batch_indices(step)
  return float(digits[0][indices].astype(np.float64).sum())


def _assert_consumed_draws(digits, batcher, recorder, first_step, num_steps):
  steps = [step for step, _ in recorder.consumed]
  assert steps == list(range(first_step, first_step + num_steps))
  for step, fingerprint in recorder.consumed:
    assert fingerprint == pytest.approx(_expected_fingerprint(digits, batcher, step), rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("steps_per_epoch,repeat", [(None, False), (25, True)])
def test_batch_of_step_n_is_the_draw_for_n(digits, steps_per_epoch, repeat):
  batcher, recorder = _fit(digits, tf_repulsive.AnnealPDS(), epochs=3, steps_per_epoch=steps_per_epoch,
                           repeat=repeat)
  per_epoch = steps_per_epoch or int(np.ceil(len(digits[1]) / BATCH))
  _assert_consumed_draws(digits, batcher, recorder, 0, 3 * per_epoch)


@pytest.mark.parametrize("steps_per_epoch", [None, 7])
def test_a_stream_that_ends_starts_every_epoch_at_the_optimizer_step(digits, steps_per_epoch):
  # fit opens a new iterator for every epoch of a dataset that ends; each must go on from the
  # optimizer's step, not begin again at the fit's first step.
  model, fingerprint = _model()
  batcher, batches = _digits_batcher(digits, tf_repulsive.AnnealPDS())
  recorder = _Recorder(fingerprint)
  model.fit(batches.take(7), epochs=3, steps_per_epoch=steps_per_epoch, verbose=0,
            callbacks=[tf_repulsive.AnnealingCallback(batcher), recorder])
  assert batcher.stats().streams >= 3
  _assert_consumed_draws(digits, batcher, recorder, 0, 21)


@pytest.mark.slow
def test_a_stream_that_fit_begins_again_within_an_epoch_is_refused(digits):
  # take(3).repeat() with 5 steps per epoch: the stream would begin again at step 3 with the
  # epoch's start, repeating steps 0-1.
  model, _ = _model()
  batcher, batches = _digits_batcher(digits, tf_repulsive.VanillaPDS())
  with pytest.raises(tf.errors.InvalidArgumentError, match="does not know its first step"):
    model.fit(batches.take(3).repeat(), epochs=1, steps_per_epoch=5, verbose=0,
              callbacks=[tf_repulsive.AnnealingCallback(batcher)])


@pytest.mark.slow
def test_a_fixed_start_stream_that_fit_begins_again_is_refused(digits):
  model, _ = _model()
  batcher, batches = _digits_batcher(digits, tf_repulsive.VanillaPDS(), start_step=0)
  # The stream itself refuses to begin again after an earlier one delivered later steps (the
  # callback would refuse after the epoch's first batch otherwise).
  with pytest.raises(tf.errors.InvalidArgumentError, match="began at its fixed start_step"):
    model.fit(batches.take(7), epochs=2, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  # The same fixed start with one iterator for all epochs is what it should be.
  model, _ = _model()
  batcher, batches = _digits_batcher(digits, tf_repulsive.VanillaPDS(), start_step=0)
  model.fit(batches, epochs=2, steps_per_epoch=7, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  assert batcher.stats().streams == 1


def test_a_split_the_callback_cannot_see_is_refused_at_run_time(digits):
  # Behind a generator the callback cannot see the transformations after the batcher (see
  # test_compositions.py for those it refuses when fit begins): two steps per draw are found when
  # fit trains a step the stream has not delivered.
  model, _ = _model()
  batcher, batches = _digits_batcher(digits, tf_repulsive.VanillaPDS())
  split = batches.unbatch().batch(BATCH // 2)
  hidden = tf.data.Dataset.from_generator(lambda: split, output_signature=split.element_spec)
  with pytest.raises(RuntimeError, match="the later ones were not its draws"):
    model.fit(hidden, epochs=1, steps_per_epoch=6, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(batcher)])


def test_several_steps_per_execution_still_start_at_the_optimizer_step(digits):
  model, _ = _model(steps_per_execution=4)
  batcher, batches = _digits_batcher(digits, tf_repulsive.VanillaPDS())
  model.fit(batches, epochs=2, steps_per_epoch=8, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  batcher, batches = _digits_batcher(digits, tf_repulsive.VanillaPDS())
  model.fit(batches, epochs=1, steps_per_epoch=8, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  assert batcher.stats().last_start == 16


def test_whole_global_batches_under_several_workers_are_refused(digits):
  # What the callback sees in fit under a two-worker MultiWorkerMirroredStrategy.
  cluster = tf.train.ClusterSpec({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
  strategy = types.SimpleNamespace(
      cluster_resolver=tf.distribute.cluster_resolver.SimpleClusterResolver(cluster))
  batcher, _ = _digits_batcher(digits, tf_repulsive.VanillaPDS())
  callback = tf_repulsive.AnnealingCallback(batcher)
  callback.set_model(types.SimpleNamespace(distribute_strategy=strategy))
  callback.set_params({"steps": 5})
  with pytest.raises(ValueError, match="2 workers.*per_replica"):
    callback.on_train_begin()


@pytest.mark.parametrize("same_pipeline", [False, True])
def test_a_second_fit_continues_at_the_optimizer_step(digits, same_pipeline):
  model = _model()
  first = _digits_batcher(digits, tf_repulsive.AnnealPDS())
  _fit(digits, None, epochs=1, model=model, pipeline=first)
  # The same pipeline, or a new one (as after a restart), on the trained model: draw 36, not 0.
  second = first if same_pipeline else _digits_batcher(digits, tf_repulsive.AnnealPDS())
  batcher, recorder = _fit(digits, None, epochs=1, model=model, pipeline=second)
  _assert_consumed_draws(digits, batcher, recorder, 36, 36)


@pytest.mark.slow
def test_anneal_starts_easy_then_follows_h(digits):
  features, labels = digits
  values = np.round(tf_repulsive.mingling_index(features, labels, 5) * 5).astype(int)
  h = np.bincount(values, minlength=6) / len(values)
  batcher, recorder = _fit(digits, tf_repulsive.AnnealPDS(), epochs=6, log_batches=True)  # steps 0..215
  mixes = dict(enumerate(batcher.group_mixes(range(216))))
  mean_index = np.arange(6) / 5
  for step, logs in recorder.batch_logs:
    assert logs["sampler_mingling"] == pytest.approx(mixes[step] @ mean_index)
    assert logs["sampler_pi_mingling"] == pytest.approx(tf_repulsive.paper_schedule(h, step).numpy() @ mean_index)
  for step in (0, 1, 50, 172, 215):
    np.testing.assert_allclose(batcher.pi(step), tf_repulsive.paper_schedule(h, step).numpy(), atol=1e-12)
  early = np.mean([mixes[step] for step in range(10)], axis=0)
  late = np.mean([mixes[step] for step in range(150, 216)], axis=0)
  assert early[0] == 1.0  # only easy points in the first batches
  assert h[0] < 0.95
  def total_variation(p):
    return 0.5 * np.abs(p - h).sum()
  assert total_variation(late) < 0.05 < total_variation(early)
  last_epoch = recorder.epoch_logs[-1]
  last_mix = np.mean([mixes[step] for step in range(180, 216)], axis=0)
  assert last_epoch["sampler_mingling"] == pytest.approx(last_mix @ mean_index)
  assert last_epoch["sampler_fallback_batches"] == 0


def test_batch_logs_are_opt_in(digits):
  _, recorder = _fit(digits, tf_repulsive.AnnealPDS(), epochs=1)
  assert not any("sampler_pi_mingling" in logs for _, logs in recorder.batch_logs)
  assert "sampler_pi_mingling" in recorder.epoch_logs[0]


def test_callback_needs_an_applied_batcher(digits):
  model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
  model.compile(optimizer="sgd", loss="mse")
  data = tf.data.Dataset.from_tensor_slices((digits[0][:100], np.zeros((100, 10), np.float32))).batch(10)
  batcher = tf_repulsive.repulsive_batch(BATCH, tf_repulsive.AnnealPDS())
  with pytest.raises(ValueError, match="apply"):
    model.fit(data, epochs=1, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  with pytest.raises(TypeError, match="repulsive_batch"):
    tf_repulsive.AnnealingCallback(tf_repulsive.AnnealPDS())


def test_fit_without_the_callback_fails_at_once_saying_what_to_add(digits):
  model, fingerprint = _model()
  batcher, batches = _digits_batcher(digits, tf_repulsive.VanillaPDS())
  with pytest.raises(tf.errors.InvalidArgumentError, match="AnnealingCallback"):
    model.fit(batches, epochs=1, steps_per_epoch=batcher.steps_per_epoch, verbose=0)
  assert float(fingerprint.numpy()) == 0.0  # no train step received a batch


def test_fit_without_steps_per_epoch_is_refused(digits):
  model, _ = _model()
  batcher, batches = _digits_batcher(digits, tf_repulsive.VanillaPDS())
  with pytest.raises(ValueError, match="steps_per_epoch"):
    model.fit(batches, epochs=1, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(batcher)])


@pytest.mark.slow
def test_a_fixed_start_that_does_not_match_the_optimizer_is_refused(digits):
  model, _ = _model()
  model.optimizer.build(model.trainable_variables)
  model.optimizer.iterations.assign(25)
  batcher, batches = _digits_batcher(digits, tf_repulsive.VanillaPDS(), start_step=0)
  with pytest.raises(ValueError, match="start_step=0 but the optimizer is at step 25"):
    model.fit(batches, epochs=1, steps_per_epoch=batcher.steps_per_epoch, verbose=0,
              callbacks=[tf_repulsive.AnnealingCallback(batcher)])


@pytest.mark.slow
def test_epoch_logs_sum_the_record_without_recomputing_draws(digits, monkeypatch):
  # An epoch longer than the 4096 steps the pipeline records: the callback reads the record as
  # training goes, so the epoch's end recomputes nothing, and the logs are the epoch's batches'.
  features, labels = digits
  # A radius at which the darts run out for about a third of the batches.
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.EasyPDS(radius=2.8, max_darts=40), seed=3)
  batches = tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
  model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
  model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=50)
  recomputed = []
  draw_of = batcher._draw_of
  monkeypatch.setattr(batcher, "_draw_of", lambda step: recomputed.append(step) or draw_of(step))
  history = model.fit(batches, epochs=1, steps_per_epoch=4400, verbose=0,
                      callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  assert recomputed == []
  steps = range(4400)
  mix = batcher.group_mixes(steps).mean(axis=0)  # the oldest steps are recomputed here
  assert recomputed  # (the record did lose the first steps)
  np.testing.assert_allclose([history.history[f"sampler_mingling_{m}"][0] for m in range(6)], mix, atol=1e-12)
  filled = np.count_nonzero(batcher.fallback_counts(steps))
  assert 0 < filled < 4400 and history.history["sampler_fallback_batches"] == [filled]


@pytest.mark.slow
def test_batches_drawn_out_of_sight_log_pi_only_and_say_so(digits):
  # The stream fit trains on is another batcher's, drawn out of this batcher's sight (as on
  # tf.data service workers): its logs cannot be read from a record, and are not recomputed.
  features, labels = digits
  pipelines = [_digits_batcher(digits, tf_repulsive.AnnealPDS(), start_step=0) for _ in range(2)]
  (drawing, batches), (watched, _) = pipelines
  model, _ = _model()
  with pytest.warns(RuntimeWarning, match="100 of the 100 steps of epoch 0.*drawn out of this process's sight"):
    history = model.fit(batches, epochs=1, steps_per_epoch=100, verbose=0,
                        callbacks=[tf_repulsive.AnnealingCallback(watched)])
  assert watched.stats().batches == 0 and drawing.stats().batches >= 100
  assert "sampler_pi_mingling" in history.history and "sampler_pi_5" in history.history
  assert not any(key.startswith("sampler_mingling") or key == "sampler_fallback_batches" for key in history.history)
