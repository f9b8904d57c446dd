"""The batch of step n under tf.data service and tf.distribute.

Servers (tf.data service, multi-worker collectives) run in a private network namespace
(`unshare --net`, loopback only), bounded in time, and stop with their process. The
MirroredStrategy tests run here on the logical CPUs conftest.py configures.
"""

import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import distributed_run as run
from loopback import concurrently, loopback_only
import tf_repulsive
from tf_repulsive import _pipeline
from tf_repulsive import diagnostics

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_distributed")]

_SECONDS = 300


def _draws(sampler, count, batch_size=run.BATCH, dataset=run.dataset):
  """The batches of steps 0 .. count - 1, and how many steps one draw covers."""
  batcher = run.batcher_for(sampler, batch_size=batch_size)
  dataset().apply(batcher)
  return diagnostics.draw_batches(batcher, count), batcher.drawer.steps_per_draw


def _steps_of(received, draws):
  """The step whose draw each received batch is (fails on a batch that is no draw)."""
  lookup = {tuple(draw): step for step, draw in enumerate(draws)}
  steps = [lookup.get(tuple(batch)) for batch in received]
  assert None not in steps, "a received batch is not the draw of any step"
  return np.array(steps)


@pytest.fixture(scope="module")
def service_results(private_network, tmp_path_factory):
  output = tmp_path_factory.mktemp("service") / "service.npz"
  subprocess.run(loopback_only([sys.executable, run.__file__, "service", str(output)]),
                 check=True, timeout=_SECONDS)
  return np.load(output)


@pytest.mark.parametrize("sampler_name,sampler", [
    ("vanilla_pds", tf_repulsive.VanillaPDS()), ("anneal_pds", tf_repulsive.AnnealPDS())])
def test_service_batches_are_the_draws_of_their_steps(service_results, sampler_name, sampler):
  draws, steps_per_draw = _draws(sampler, 200)
  steps_per_epoch = run.NUM_POINTS // run.BATCH
  # distributed_epoch: the workers split the stream of draws: no step twice, none skipped (beyond
  # the few draws still in flight when the consumer stopped).
  split = _steps_of(service_results[f"{sampler_name}-distributed_epoch"], draws)
  assert len(set(split.tolist())) == len(split) == run.SERVICE_READ
  assert len(set(range(split.max())) - set(split.tolist())) <= 8 * steps_per_draw
  # parallel_epochs: every worker produces the whole stream (tf.data's meaning of the mode), so
  # each step arrives once per worker, and every batch is still its step's draw.
  parallel = _steps_of(service_results[f"{sampler_name}-parallel_epochs"], draws)
  assert np.bincount(parallel).max() <= 2
  assert len(set(range(parallel.max())) - set(parallel.tolist())) <= 8 * steps_per_draw
  # Epochs differ: the stream does not restart.
  assert split.max() >= 2 * steps_per_epoch and parallel.max() >= steps_per_epoch


@pytest.fixture(scope="module")
def dense_k128_draws():
  return _draws(tf_repulsive.DensePDS([1] * 6), 120, run.LARGE_BATCH, run.large_dataset)[0]


def test_service_workers_draw_what_batch_indices_recomputes_at_k_128(service_results, dense_k128_draws):
  split = _steps_of(service_results["dense_pds_k128-distributed_epoch"], dense_k128_draws)
  assert len(set(split.tolist())) == len(split) == run.SERVICE_READ


def test_service_workers_draw_by_reference_from_the_files_the_build_wrote(service_results, dense_k128_draws):
  split = _steps_of(service_results["dense_pds_k128_by_reference-distributed_epoch"], dense_k128_draws)
  assert len(set(split.tolist())) == len(split) == run.SERVICE_READ
  # The digits' elements, feature vectors and distance cache (13 MB) stayed out of the graph.
  assert service_results["graph_bytes_by_reference"] < 1e6
  # A worker that cannot read the files fails the stream, naming one and what workers need.
  error = str(service_results["unseen_error"])
  assert any(path in error for path in service_results["unseen_files"]) and "needs data_dir at the same path" in error


def test_the_workers_check_before_shipping_names_a_missing_or_partial_file(service_results):
  assert service_results["workers_checked"] == 2
  victim = str(service_results["checked_file"])
  partial, unseen = str(service_results["partial_check_error"]), str(service_results["unseen_check_error"])
  assert partial.startswith("ValueError: 2 of the 2 workers") and f"sees {victim} at another length" in partial
  assert unseen.startswith("ValueError: 2 of the 2 workers") and f"cannot see {victim}" in unseen
  assert "needs data_dir at the same path" in unseen
  assert str(service_results["idle_check_error"]).startswith("TimeoutError: No answer from the tf.data service")


@pytest.mark.parametrize("how", ["zeros", "flips"])
@pytest.mark.parametrize("kind", ["elements", "features", "table"])
def test_a_damaged_file_is_named_by_the_check_of_contents_and_by_the_workers_draw(service_results, kind, how):
  assert service_results["damaged_check_before"] == ""
  path = str(service_results[f"damaged_{kind}_file"])
  # The length is right: only the contents tell.
  assert service_results[f"damaged_{kind}_{how}_lengths"] == ""
  contents = str(service_results[f"damaged_{kind}_{how}_contents"])
  assert contents.startswith("ValueError: 2 of the 2 workers") and f"sees {path} with other bytes" in contents
  draw = str(service_results[f"damaged_{kind}_{how}_draw"])
  assert f"{path} does not hold the array the build wrote" in draw
  assert "check_data_files(service, contents=True)" in draw


def test_service_refuses_a_stream_whose_start_it_cannot_know(service_results):
  assert "does not know its first step" in str(service_results["unstarted_error"])
  assert str(service_results["keras_error"]).startswith(
      "ValueError: fit reads its batches from tf.data service workers, where this callback cannot start")
  assert "build the batcher with start_step=" in str(service_results["keras_error"])
  # Without the dataset, fit fails at its first batch, naming the fixed start too.
  run_error = str(service_results["keras_run_error"])
  assert "tf.data service workers" in run_error and "start_step=<the optimizer" in run_error, run_error


def test_multi_worker_shards_are_disjoint_and_make_the_global_draw(private_network, tmp_path):
  workers = [[sys.executable, run.__file__, "multi_worker_task", str(index), str(tmp_path)]
             for index in range(len(run.MULTI_WORKER_PORTS))]
  subprocess.run(loopback_only(concurrently(workers, _SECONDS - 60)), check=True, timeout=_SECONDS)
  shards = [np.load(tmp_path / f"worker{index}.npy") for index in range(2)]
  draws, _ = _draws(tf_repulsive.AnnealPDS(), run.MULTI_WORKER_STEPS)
  half = run.BATCH // 2
  for step in range(run.MULTI_WORKER_STEPS):
    np.testing.assert_array_equal(shards[0][step], draws[step][:half])
    np.testing.assert_array_equal(shards[1][step], draws[step][half:])
  # Keras on the whole global batches under two workers fails instead of training.
  for index in range(2):
    assert (tmp_path / f"worker{index}_refusal.txt").read_text()


def _mirrored(replicas):
  return tf.distribute.MirroredStrategy([f"/cpu:{device}" for device in range(replicas)])


def _global_batches(strategy, distributed, steps):
  """Per step, the replicas' index slices in replica order, concatenated."""
  iterator = iter(distributed)
  return np.stack([
      np.concatenate([t.numpy() for t in strategy.experimental_local_results(next(iterator)[2])])
      for _ in range(steps)])


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_every_replica_count_sees_the_same_global_draws(replicas):
  draws, _ = _draws(tf_repulsive.AnnealPDS(), 8)
  strategy = _mirrored(replicas)
  batcher = run.batcher_for(tf_repulsive.AnnealPDS())
  source = run.dataset()
  from_function = strategy.distribute_datasets_from_function(
      lambda context: source.apply(batcher.per_replica(context)))
  np.testing.assert_array_equal(_global_batches(strategy, from_function, 8), draws)
  whole = strategy.experimental_distribute_dataset(run.dataset().apply(run.batcher_for(tf_repulsive.AnnealPDS())))
  np.testing.assert_array_equal(_global_batches(strategy, whole, 8), draws)


def test_per_replica_slices_follow_replica_order():
  strategy = _mirrored(2)
  batcher = run.batcher_for(tf_repulsive.VanillaPDS())
  source = run.dataset()
  distributed = strategy.distribute_datasets_from_function(
      lambda context: source.apply(batcher.per_replica(context)))
  first = strategy.experimental_local_results(next(iter(distributed))[2])
  draw = batcher.batch_indices(0)
  np.testing.assert_array_equal(first[0].numpy(), draw[:10])
  np.testing.assert_array_equal(first[1].numpy(), draw[10:])


def test_keras_fit_under_a_strategy_starts_at_the_optimizer_step():
  # Two fits on 2 replicas, the second on a new model given the trained weights and optimizer step
  # (as after a resume): each stream starts at the optimizer's step. (One process cannot hold
  # collectives of two replica counts; the replica count does not change the draws, see above.)
  starts, weights, iterations = [], None, 0
  for _ in range(2):
    strategy = _mirrored(2)
    with strategy.scope():
      model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
      model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
      model.optimizer.build(model.trainable_variables)
    if weights is not None:
      model.set_weights(weights)
      model.optimizer.iterations.assign(iterations)
    batcher = run.batcher_for(tf_repulsive.VanillaPDS(), start_step=None)
    batches = run.dataset().apply(batcher).map(lambda x, y, index: (x, y))
    model.fit(batches, epochs=2, steps_per_epoch=2, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(batcher)])
    starts.append(batcher.stats().last_start)
    weights, iterations = model.get_weights(), int(model.optimizer.iterations.numpy())
  assert starts == [0, 4]
  assert iterations == 8


def test_one_callback_serves_two_fits_under_a_strategy():
  # Keras takes one batch to build the model before any callback runs, in every fit under a
  # strategy: the callback allows that probe when constructed and again after each fit. (The
  # model's shapes are those of the test above: one process keeps its collectives' shapes.)
  strategy = _mirrored(2)
  with strategy.scope():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  batcher = run.batcher_for(tf_repulsive.AnnealPDS(), start_step=None)
  batches = run.dataset().apply(batcher).map(lambda x, y, index: (x, y))
  callback = tf_repulsive.AnnealingCallback(batcher)
  for _ in range(2):
    model.fit(batches, epochs=1, steps_per_epoch=batcher.steps_per_epoch, verbose=0, callbacks=[callback])
  assert batcher.stats().last_start == batcher.steps_per_epoch
  assert batcher.stats().last_step_delivered >= 2 * batcher.steps_per_epoch - 1


def test_a_stream_resumed_on_another_replica_count_continues_the_global_draws():
  draws, _ = _draws(tf_repulsive.AnnealPDS(), 8)
  source = run.dataset()
  for replicas, first_step in ((2, 0), (4, 4)):
    strategy = _mirrored(replicas)
    batcher = run.batcher_for(tf_repulsive.AnnealPDS(), start_step=None)
    distributed = strategy.distribute_datasets_from_function(
        lambda context, batcher=batcher: source.apply(batcher.per_replica(context)))
    batcher.start_at(first_step)
    np.testing.assert_array_equal(_global_batches(strategy, distributed, 4), draws[first_step:first_step + 4])


def test_per_replica_refuses_a_batch_the_replicas_cannot_share():
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), start_step=0)
  context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=4)
  with pytest.raises(ValueError, match="multiple of the 4 replicas"):
    batcher.per_replica(context)
  with pytest.raises(TypeError, match="InputContext"):
    batcher.per_replica(4)


# (The disks of the untrained model's gradients can overfill the first batch; the law is what is tested.)
@pytest.mark.filterwarnings("ignore:the darts filled only")
def test_keras_fit_under_a_strategy_trains_each_step_on_its_refreshed_features():
  # A model-space stream under 2 replicas: the strategy's device prefetch runs the deliveries
  # ahead, they wait at each refresh, and every step trains the draw on its refresh's features.
  # The same training on one device from the reference draws ends at the same weights. (The
  # model's shapes are those of the tests above.)
  refresh_every, steps = 3, 8
  points = run.dataset().map(lambda x, y, index: (x, y))
  x, y = (np.stack(column) for column in zip(*points.as_numpy_iterator()))
  strategy = _mirrored(2)
  with strategy.scope():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  reference = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
  reference.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  reference.set_weights(model.get_weights())
  source = tf_repulsive.GradientFeatures(projection_dim=32)
  space = tf_repulsive.ModelSpace(model, source, refresh_every=refresh_every, verbose=False)
  batcher = tf_repulsive.repulsive_batch(run.BATCH, tf_repulsive.VanillaPDS(), seed=run.SEED, features=space,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  model.fit(points.apply(batcher), epochs=2, steps_per_epoch=steps // 2, verbose=0,
            callbacks=[tf_repulsive.BatchStreamCallback(batcher)])
  assert batcher.stats().refreshes == steps // refresh_every + 1
  key = tf.constant([run.SEED, _pipeline._KEY_SALT], tf.int64)  # pylint: disable=protected-access
  for step in range(steps):
    if step % refresh_every == 0:
      drawer = tf_repulsive.VanillaPDS().build(tf_repulsive.SamplingContext(
          features=tf_repulsive.compute_features(source, reference, x, y), labels=None, batch_size=run.BATCH,
          distance_cache_bytes=0, max_steps_per_draw=1))
    batch = drawer.draw(key, tf.constant(step, tf.int64))[0].numpy()[0]
    reference.train_on_batch(x[batch], y[batch])
  for trained, expected in zip(model.get_weights(), reference.get_weights()):
    np.testing.assert_allclose(trained, expected, atol=1e-5)
