"""Epoch pruning and its random control: the law of a pass, its weights, the passes of a stream, resumes, refusals.

The law of a pass is tested on the pass set-up itself, over hundreds of passes on fixed losses,
against the exact law (chi-square), with the other sampler's passes as the control that the test
must reject. The stream is tested in a custom loop that records known losses, and in `fit`
through `RecordingModel`.
"""

import json
import pathlib
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
from scipy import stats
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _dataset_graph

NUM_POINTS, BATCH, SEED = 60, 4, 3
_SECONDS = 300


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=[NUM_POINTS, 2]).astype(np.float32)
  return x, (x[:, 0] > 0).astype(np.int64)


def _batcher(sampler, start_step=0):
  batcher = tf_repulsive.repulsive_batch(BATCH, sampler, seed=SEED, start_step=start_step,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  return batcher, tf.data.Dataset.from_tensor_slices(_data()).apply(batcher)


def _losses_of(indices, step):
  """The losses a custom loop records: a fixed value per element, drifting with the step."""
  return (np.asarray(indices) % 7).astype(np.float32) + 0.01 * step


def _run(batcher, iterator, first, last):
  """Steps first ... last - 1 of a custom loop that records `_losses_of`: per step (indices, weights, pass)."""
  steps = []
  for step in range(first, last):
    x, _, weights = next(iterator)
    indices = batcher.batch_indices(step)
    np.testing.assert_array_equal(x.numpy(), _data()[0][indices])
    steps.append((indices, weights.numpy(), int(batcher.sampler_state.pass_index.numpy())))
    batcher.record_losses(step, _losses_of(indices, step))
  return steps


# The law of a pass.

def _passes(sampler, losses, count):
  """Which elements `count` passes set up on fixed `losses` hold, and their weights: `[count, N]` each."""
  batcher, _ = _batcher(sampler)
  drawer = batcher.drawer
  key = batcher._config.key  # pylint: disable=protected-access
  start, losses = tf.constant(0, tf.int64), tf.constant(losses)

  @tf.function
  def passes():
    return tf.map_fn(lambda index: drawer.pass_of(key, index, start, losses), tf.range(1, count + 1, dtype=tf.int64),
                     fn_output_signature=(tf.int32, tf.float32, tf.int64))

  orders, weights, sizes = (value.numpy() for value in passes())
  present = np.zeros([count, NUM_POINTS])
  for row, (order, size) in enumerate(zip(orders, sizes)):
    assert len(set(order[:size])) == size
    present[row, order[:size]] = 1
  return present, weights


def _chi2(absent, probabilities, count):
  """Chi-square statistic of absence counts against per-element absence probabilities (0 or 1: excluded)."""
  free = (probabilities > 0) & (probabilities < 1)
  expected = count * probabilities[free]
  statistic = np.sum((absent[free] - expected) ** 2 / (expected * (1 - probabilities[free])))
  return statistic, stats.chi2.ppf(0.999, np.count_nonzero(free))


@pytest.mark.slow
def test_a_pass_prunes_each_below_mean_element_at_the_ratio_and_the_control_prunes_regardless_of_loss():
  count, ratio = 600, 0.5
  losses = np.random.default_rng(1).exponential(size=NUM_POINTS).astype(np.float32)
  below = losses < losses.mean()
  pruned_share = round(ratio * NUM_POINTS) / NUM_POINTS
  exact = np.where(below, pruned_share, 0.0)
  exact_random = np.full(NUM_POINTS, below.mean() * pruned_share)
  infobatch, infobatch_weights = _passes(tf_repulsive.EpochPruning(total_steps=10**6, prune_ratio=ratio), losses,
                                         count)
  control, control_weights = _passes(tf_repulsive.RandomPruning(total_steps=10**6, prune_ratio=ratio), losses,
                                     count)
  for present, law, other in ((infobatch, exact, control), (control, exact_random, infobatch)):
    statistic, critical = _chi2(count - present.sum(axis=0), law, count)
    assert statistic < critical
    # The control: the other sampler's passes are rejected by the same test.
    other_statistic, _ = _chi2(count - other.sum(axis=0), law, count)
    assert other_statistic > 5 * critical or np.any((other.sum(axis=0) < count) & (law == 0))
  assert np.all(infobatch[:, ~below] == 1)
  # Every element's expected weight in a pass is 1: a pass's weighted mean loss is unbiased.
  for present, weights in ((infobatch, infobatch_weights), (control, control_weights)):
    weighted = present * weights
    error = weighted.std(axis=0, ddof=1) / np.sqrt(count)
    assert np.all(np.abs(weighted.mean(axis=0) - 1) < 4.5 * np.maximum(error, 1e-9))
    np.testing.assert_allclose(np.unique(weights[present == 1]), [1.0, 1 / (1 - pruned_share)], rtol=1e-6)


@pytest.mark.slow
def test_the_irreducible_loss_is_subtracted_before_the_mean():
  losses = np.linspace(0.0, 1.0, NUM_POINTS, dtype=np.float32)
  # Subtracting the loss itself on the first half leaves 0 there: below the mean, the rest above.
  irreducible = np.where(np.arange(NUM_POINTS) < NUM_POINTS // 2, losses, 0.0)
  present, _ = _passes(tf_repulsive.EpochPruning(total_steps=10**6, irreducible_loss=irreducible), losses, 40)
  assert np.all(present[:, NUM_POINTS // 2:] == 1) and not np.all(present[:, :NUM_POINTS // 2] == 1)


# The passes of a stream.

@pytest.mark.slow
def test_pass_zero_holds_every_element_and_later_passes_each_kept_element_once_until_the_budget_ends():
  total_steps = 60
  batcher, stream = _batcher(tf_repulsive.EpochPruning(total_steps=total_steps, prune_until=0.5))
  steps = _run(batcher, iter(stream), 0, 90)
  passes = {}
  for step, (indices, weights, index) in enumerate(steps):
    assert len(set(indices)) == BATCH
    passes.setdefault(index, []).append((step, indices, weights))
  assert sorted(passes)[:2] == [0, 1]
  np.testing.assert_array_equal(np.sort(np.concatenate([i for _, i, _ in passes[0]])), np.arange(NUM_POINTS))
  pruned_any = False
  for index, members in passes.items():
    if index == max(passes):
      continue  # cut short by the end of the loop
    start = members[0][0]
    elements = np.concatenate([indices for _, indices, _ in members])
    weights = np.concatenate([weights for _, _, weights in members])
    size = len(set(elements))
    assert len(members) == -(-size // BATCH)
    # The last batch wraps to the pass's first elements: every element once, some twice.
    np.testing.assert_array_equal(elements[size:], elements[:len(elements) - size])
    if start >= 0.5 * total_steps or index == 0:
      assert size == NUM_POINTS and np.all(weights == 1)
    else:
      pruned_any = pruned_any or size < NUM_POINTS
      assert set(np.round(weights, 5)) <= {1.0, 2.0}
  assert pruned_any


@pytest.mark.slow
def test_a_map_and_a_prefetch_after_the_batcher_deliver_the_same_passes():
  # The prefetch draws ahead: a pass's first draw waits there until the step before it recorded.
  sampler = tf_repulsive.EpochPruning(total_steps=1000)
  plain, stream = _batcher(sampler)
  expected = _run(plain, iter(stream), 0, 40)
  batcher, stream = _batcher(sampler)
  iterator = iter(stream.map(lambda x, y, w: (x, y, w)).prefetch(3))
  for (indices, weights, index), want in zip(_run(batcher, iterator, 0, 40), expected):
    np.testing.assert_array_equal(indices, want[0])
    np.testing.assert_array_equal(weights, want[1])
    assert index == want[2]
  assert expected[-1][2] >= 2


@pytest.mark.slow
def test_the_stream_weighs_each_element_by_the_pass_state():
  batcher, stream = _batcher(tf_repulsive.EpochPruning(total_steps=1000))
  steps = _run(batcher, iter(stream), 0, 40)
  state = batcher.sampler_state
  indices, weights, _ = steps[-1]
  np.testing.assert_allclose(weights, state.weights.numpy()[indices])
  assert np.any(np.concatenate([w for _, w, _ in steps]) != 1)


@pytest.mark.slow
def test_an_iterator_checkpoint_with_the_sampler_state_resumes_the_uninterrupted_batches(tmp_path):
  sampler = tf_repulsive.EpochPruning(total_steps=40, prune_until=0.9)
  batcher, stream = _batcher(sampler)
  iterator = iter(stream)
  checkpoint = tf.train.Checkpoint(iterator=iterator, state=batcher.sampler_state)
  breaks = (15, 26)  # 15: the first step of pass 1, so the restored stream sets it up; 26: within pass 1
  uninterrupted = []
  for first, last in zip((0, *breaks), (*breaks, 45)):
    uninterrupted += _run(batcher, iterator, first, last)
    checkpoint.write(str(tmp_path / f"at_{last}"))
  assert uninterrupted[26][2] == 1 and uninterrupted[44][2] >= 2
  assert uninterrupted[15][2] == 1
  for resume_at in breaks:
    restored, restored_stream = _batcher(sampler)
    restored_iterator = iter(restored_stream)
    tf.train.Checkpoint(iterator=restored_iterator, state=restored.sampler_state).read(
        str(tmp_path / f"at_{resume_at}")).assert_consumed()
    for (indices, weights, index), expected in zip(_run(restored, restored_iterator, resume_at, 45),
                                                    uninterrupted[resume_at:]):
      np.testing.assert_array_equal(indices, expected[0])
      np.testing.assert_array_equal(weights, expected[1])
      assert index == expected[2]


@pytest.mark.slow
def test_a_stream_without_the_recorded_losses_fails_after_its_timeout_naming_the_fix():
  batcher, stream = _batcher(tf_repulsive.EpochPruning(total_steps=100, timeout_seconds=0.2))
  iterator = iter(stream)
  for _ in range(NUM_POINTS // BATCH):
    next(iterator)
  with pytest.raises(tf.errors.InvalidArgumentError, match="RecordingModel"):
    next(iterator)
  # A fresh stream started past the pass in force cannot skip to it, and says so at once.
  batcher, stream = _batcher(tf_repulsive.RandomPruning(total_steps=100), start_step=30)
  began = time.perf_counter()
  with pytest.raises(tf.errors.InvalidArgumentError, match="RandomPruning: .*cannot skip a pass"):
    next(iter(stream))
  assert time.perf_counter() - began < 60  # not its timeout_seconds, 600
  with pytest.raises(ValueError, match="not in the pass in force"):
    batcher.batch_indices(40)


# Fit through RecordingModel.

def _model():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
  return model


def test_fit_records_each_elements_loss_before_its_update_and_leaves_the_model_unpatched():
  batcher, stream = _batcher(tf_repulsive.EpochPruning(total_steps=30), start_step=None)
  model = _model()
  calls = [layer.call for layer in model.layers]
  trainer = tf_repulsive.RecordingModel(model, batcher)
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  trainer.compile(keras.optimizers.SGD(0.1), loss)
  seen = {}

  class Watch(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
      seen["weights"] = model.get_weights()

    def on_train_batch_end(self, batch, logs=None):
      step = int(trainer.optimizer.iterations.numpy()) - 1
      seen[step] = (batcher.batch_indices(step), seen["weights"])

  history = trainer.fit(stream, epochs=2, steps_per_epoch=15, verbose=0,
                        callbacks=[tf_repulsive.BatchStreamCallback(batcher), Watch()])
  assert [layer.call for layer in model.layers] == calls
  assert trainer.trainable_weights == model.trainable_weights
  assert history.history["sampler_pass"][-1] >= 1 and history.history["sampler_pass_share"][0] == 1.0
  x, y = _data()
  probe = _model()
  recorded = batcher.sampler_state.losses.numpy()
  last_step = {}
  for step in range(30):
    last_step.update({int(i): step for i in seen[step][0]})
  for step in (20, 29):
    indices = [i for i, last in last_step.items() if last == step]
    probe.set_weights(seen[step][1])
    expected = keras.ops.convert_to_numpy(loss.call(y[indices], probe(x[indices])))
    np.testing.assert_allclose(recorded[indices], expected, rtol=1e-4, atol=1e-5)
  through = int(batcher.sampler_state.recorded_through.numpy())
  trainer.evaluate(tf.data.Dataset.from_tensor_slices(_data()).batch(BATCH), verbose=0)
  assert int(batcher.sampler_state.recorded_through.numpy()) == through == 29


@pytest.mark.slow
def test_a_checkpoint_of_the_recording_model_carries_the_sampler_state(tmp_path):
  batcher, stream = _batcher(tf_repulsive.EpochPruning(total_steps=30), start_step=None)
  trainer = tf_repulsive.RecordingModel(_model(), batcher)
  trainer.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  trainer.fit(stream, epochs=1, steps_per_epoch=20, verbose=0, callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  state = [variable.numpy() for variable in batcher.sampler_state.variables]
  trainer.save_weights(str(tmp_path / "trainer.weights.h5"))
  tf.train.Checkpoint(model=trainer).write(str(tmp_path / "checkpoint"))
  for restore in ("weights", "checkpoint"):
    other, _ = _batcher(tf_repulsive.EpochPruning(total_steps=30), start_step=None)
    restored = tf_repulsive.RecordingModel(_model(), other)
    restored.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if restore == "weights":
      restored.load_weights(str(tmp_path / "trainer.weights.h5"))
    else:
      tf.train.Checkpoint(model=restored).read(str(tmp_path / "checkpoint")).expect_partial()
    for got, expected in zip(other.sampler_state.variables, state):
      np.testing.assert_array_equal(got.numpy(), expected)
  assert int(batcher.sampler_state.pass_index.numpy()) == 1


@pytest.mark.slow
def test_backup_and_restore_resumes_pruning_and_online_importance_in_a_new_process(tmp_path):
  script = pathlib.Path(__file__).parents[1] / "support" / "pruning_resume_run.py"
  for phase in ("crash", "resume"):
    subprocess.run([sys.executable, str(script), phase, str(tmp_path)], check=True, timeout=_SECONDS)
  crashed = json.loads((tmp_path / "crash.json").read_text())
  resumed = json.loads((tmp_path / "resume.json").read_text())
  for kind in ("pruning", "online"):
    uninterrupted = {step: record for step, record in crashed[kind]}
    # The last backup was after step 14; Keras reruns the epoch from there.
    assert [step for step, _ in resumed[kind]] == list(range(15, 55)), kind
    for step, record in resumed[kind]:
      expected = uninterrupted[step]
      if kind == "pruning":  # the batch, its weights, the pass
        assert record[:3] == expected[:3], step
      else:  # tau, the steps by importance
        assert record[0] == pytest.approx(expected[0], rel=1e-6) and record[1] == expected[1], step
      assert record[-1] == pytest.approx(expected[-1], rel=1e-6), (kind, step)
  pruning = resumed["pruning"]
  assert len({record[2] for _, record in pruning}) >= 3
  assert any(weight != 1 for _, record in pruning for weight in record[1])
  assert resumed["online"][-1][1][1] > crashed["online"][14][1][1]  # steps by importance after the resume


# Refusals.

def test_bad_arguments_and_pipelines_are_refused_with_the_argument_named(tmp_path):
  for arguments, error, match in [
      (dict(total_steps=0), ValueError, "total_steps"),
      (dict(total_steps=10, prune_ratio=1.0), ValueError, r"prune_ratio.*\[0, 1\)"),
      (dict(total_steps=10, prune_ratio=-0.1), ValueError, "prune_ratio"),
      (dict(total_steps=10, prune_until=0.0), ValueError, "prune_until"),
      (dict(total_steps=10, prune_until=1.5), ValueError, r"prune_until.*\(0, 1\]"),
      (dict(total_steps=10, irreducible_loss=np.ones([3, 2])), ValueError, "irreducible_loss"),
      (dict(total_steps=10, timeout_seconds=0), ValueError, "timeout_seconds"),
      (dict(total_steps=1.5), TypeError, "total_steps"),
  ]:
    with pytest.raises(error, match=match):
      tf_repulsive.EpochPruning(**arguments)
  x, y = _data()
  with pytest.raises(ValueError, match="irreducible_loss.*one per element"):
    _batcher(tf_repulsive.EpochPruning(total_steps=10, irreducible_loss=np.ones(7)))
  sampler = tf_repulsive.EpochPruning(total_steps=10)
  with pytest.raises(TypeError, match=r"EpochPruning hands each batch to Keras as \(x, y, sample_weight\)"):
    tf.data.Dataset.from_tensor_slices(x).apply(tf_repulsive.repulsive_batch(BATCH, sampler, seed=0))
  with pytest.raises(ValueError, match="data_dir"):
    tf.data.Dataset.from_tensor_slices((x, y)).apply(tf_repulsive.repulsive_batch(
        BATCH, sampler, seed=0, options=tf_repulsive.BatcherOptions(data_dir=tmp_path, verbose=False)))
  with pytest.raises(ValueError, match="does not provide"):
    tf.data.Dataset.from_tensor_slices((x, y)).apply(
        tf_repulsive.repulsive_batch(BATCH, sampler, seed=0, inclusion_weights="unbiased"))
  batcher = tf_repulsive.repulsive_batch(BATCH, sampler, seed=0)
  context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)
  with pytest.raises(ValueError, match="per_replica"):
    tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher.per_replica(context))
  batcher, _ = _batcher(sampler)
  with pytest.raises(ValueError, match="one loss per element"):
    batcher.record_losses(0, np.ones(BATCH + 1))
  uniform, _ = _batcher(tf_repulsive.Uniform())
  with pytest.raises(ValueError, match="record_losses is for"):
    uniform.record_losses(0, np.ones(BATCH))
  with pytest.raises(ValueError, match="RecordingModel is for"):
    tf_repulsive.RecordingModel(_model(), uniform)
  with pytest.raises(TypeError, match="`model`"):
    tf_repulsive.RecordingModel("model", batcher)
  with pytest.raises(TypeError, match="`batcher`"):
    tf_repulsive.RecordingModel(_model(), sampler)
  with pytest.raises(TypeError, match="per_element_loss"):
    tf_repulsive.RecordingModel(_model(), batcher, per_element_loss=3)


@pytest.mark.slow
def test_fit_of_the_model_itself_a_list_of_losses_or_a_service_stream_is_refused(monkeypatch):
  batcher, stream = _batcher(tf_repulsive.EpochPruning(total_steps=30), start_step=None)
  model = _model()
  model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  with pytest.raises(ValueError, match="RecordingModel"):
    model.fit(stream, epochs=1, steps_per_epoch=3, verbose=0, callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  trainer = tf_repulsive.RecordingModel(_model(), batcher)
  trainer.compile("sgd", [keras.losses.SparseCategoricalCrossentropy(from_logits=True)])
  with pytest.raises(TypeError, match="per_element_loss"):
    trainer.fit(stream, epochs=1, steps_per_epoch=3, verbose=0,
                callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  # A loss that gives one number for the batch gives no loss per element.
  reduced = tf_repulsive.RecordingModel(_model(), batcher,
                                        per_element_loss=lambda y_true, y_pred: tf.reduce_mean(y_pred))
  reduced.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  with pytest.raises(ValueError, match="one loss per element"):
    reduced.fit(stream, epochs=1, steps_per_epoch=3, verbose=0,
                callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  # A stream read from tf.data service workers (as `_dataset_graph` finds one), with a fixed start.
  fixed, stream = _batcher(tf_repulsive.EpochPruning(total_steps=30), start_step=0)
  trainer = tf_repulsive.RecordingModel(_model(), fixed)
  trainer.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  monkeypatch.setattr(_dataset_graph, "read_from_service", lambda dataset: True)
  with pytest.raises(ValueError, match="service workers.*recorded losses"):
    tf_repulsive.BatchStreamCallback(fixed, dataset=stream)
