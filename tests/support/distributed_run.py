"""Programs the distributed tests run in a private network namespace (only loopback exists there).

TF's tf.data service and collective servers listen on every interface; inside the namespace that is
127.0.0.1 alone. Each program writes what it received to a .npz for the test to check.

* `python distributed_run.py service OUT.npz`: a dispatcher and two workers in this process;
  streams distributed in both processing modes, plus the two refusals; the servers end with it.
* `python distributed_run.py multi_worker_task INDEX OUT_DIR`: one of the two worker processes
  of a MultiWorkerMirroredStrategy (TF_CONFIG on 127.0.0.1); the test starts both.
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf
from sklearn import datasets as sk_datasets

import tf_repulsive
from cached_samplers import VanillaPDSWithCache
from data_file_damage import damage
from data_file_damage import files_by_kind

NUM_POINTS = 300
BATCH = 20  # 15 steps per epoch
SEED = 5
SERVICE_READ = 45  # three epochs
# Dense PDS at k = 128 on all the digits: where its categorical draw once depended on the thread
# pool that ran it (a worker's, the client's batch_indices).
LARGE_BATCH = 128
MULTI_WORKER_STEPS = 6
MULTI_WORKER_PORTS = (23456, 23457)  # free: the namespace is private


def dataset():
  data = sk_datasets.load_digits()
  features = (data.data[:NUM_POINTS] / 16.0).astype(np.float32)
  labels = data.target[:NUM_POINTS].astype(np.int64)
  return tf.data.Dataset.from_tensor_slices((features, labels, np.arange(NUM_POINTS)))


def large_dataset():
  data = sk_datasets.load_digits()
  return tf.data.Dataset.from_tensor_slices(((data.data / 16.0).astype(np.float32), data.target.astype(np.int64),
                                             np.arange(len(data.target))))


def batcher_for(sampler, start_step=0, batch_size=BATCH, data_dir=None, features=None):
  return tf_repulsive.repulsive_batch(batch_size, sampler, features=features, labels=lambda x, y, index: y,
                                      seed=SEED, start_step=start_step,
                                      options=tf_repulsive.BatcherOptions(data_dir=data_dir))


def _check_error(batcher, target, timeout=60.0, contents=False):
  """What `check_data_files` raises, as "TypeName: message" ("" if it passes)."""
  try:
    batcher.check_data_files(target, timeout=timeout, contents=contents)
    return ""
  except (ValueError, TimeoutError) as error:
    return f"{type(error).__name__}: {error}"


def service(output):
  svc = tf.data.experimental.service
  dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=0))
  address = dispatcher.target.split("://")[1]
  # (Referenced until the process ends, which stops them.)
  _workers = [svc.WorkerServer(svc.WorkerConfig(dispatcher_address=address, worker_address="127.0.0.1:%port%",
                                                port=0)) for _ in range(2)]
  results = {}
  for sampler_name, sampler in (("vanilla_pds", tf_repulsive.VanillaPDS()), ("anneal_pds", tf_repulsive.AnnealPDS())):
    for mode in ("parallel_epochs", "distributed_epoch"):
      batches = dataset().apply(batcher_for(sampler)).apply(svc.distribute(mode, dispatcher.target))
      results[f"{sampler_name}-{mode}"] = np.stack(
          [index for _, _, index in batches.take(SERVICE_READ).as_numpy_iterator()])
  dense = large_dataset().apply(batcher_for(tf_repulsive.DensePDS([1] * 6), batch_size=LARGE_BATCH))
  results["dense_pds_k128-distributed_epoch"] = np.stack(
      [index for _, _, index in dense.apply(svc.distribute("distributed_epoch", dispatcher.target))
       .take(SERVICE_READ).as_numpy_iterator()])
  # Arrays by reference: the workers map the files the build wrote (this process's directory).
  data_dir = os.path.join(os.path.dirname(output), "data")
  by_reference_batcher = batcher_for(tf_repulsive.DensePDS([1] * 6), batch_size=LARGE_BATCH, data_dir=data_dir)
  by_reference = large_dataset().apply(by_reference_batcher)
  results["graph_bytes_by_reference"] = np.array(len(by_reference._as_serialized_graph().numpy()))
  results["dense_pds_k128_by_reference-distributed_epoch"] = np.stack(
      [index for _, _, index in by_reference.apply(svc.distribute("distributed_epoch", dispatcher.target))
       .take(SERVICE_READ).as_numpy_iterator()])
  # Before shipping: both workers see the files; then one file is cut short, then gone.
  results["workers_checked"] = np.array(by_reference_batcher.check_data_files(dispatcher.target))
  victim = by_reference_batcher.data_files[0]
  os.rename(victim, victim + ".moved")
  with open(victim + ".moved", "rb") as source, open(victim, "wb") as partial:
    partial.write(source.read(1000))
  results["partial_check_error"] = np.array(_check_error(by_reference_batcher, dispatcher.target))
  os.remove(victim)
  results["unseen_check_error"] = np.array(_check_error(by_reference_batcher, dispatcher.target))
  results["checked_file"] = np.array(victim)
  os.rename(victim + ".moved", victim)
  # Files of the right length with other bytes: the check of the contents names them, and so does
  # the workers' first draw.
  damaged = batcher_for(VanillaPDSWithCache(), data_dir=os.path.join(os.path.dirname(output), "damaged"),
                        features=lambda x, y, index: 2.0 * x)
  damaged_stream = large_dataset().apply(damaged)
  results["damaged_check_before"] = np.array(_check_error(damaged, dispatcher.target, contents=True))
  for kind, path in files_by_kind(damaged).items():
    for how in ("zeros", "flips"):
      original = damage(path, how)
      results[f"damaged_{kind}_{how}_lengths"] = np.array(_check_error(damaged, dispatcher.target))
      results[f"damaged_{kind}_{how}_contents"] = np.array(_check_error(damaged, dispatcher.target, contents=True))
      try:
        next(iter(damaged_stream.apply(svc.distribute("distributed_epoch", dispatcher.target))))
        results[f"damaged_{kind}_{how}_draw"] = np.array("")
      except tf.errors.InvalidArgumentError as error:
        results[f"damaged_{kind}_{how}_draw"] = np.array(error.message)
      with open(path, "r+b") as file:
        file.write(original)
      results[f"damaged_{kind}_file"] = np.array(path)
  # A dispatcher without workers: the check gives up.
  idle = svc.DispatchServer(svc.DispatcherConfig(port=0))
  results["idle_check_error"] = np.array(_check_error(by_reference_batcher, idle.target, timeout=3))
  # A worker that cannot read a file: the error names it.
  unseen = batcher_for(tf_repulsive.VanillaPDS(), data_dir=os.path.join(os.path.dirname(output), "unseen"))
  stream = dataset().apply(unseen)
  for path in unseen.data_files:
    os.remove(path)
  try:
    next(iter(stream.apply(svc.distribute("distributed_epoch", dispatcher.target))))
    results["unseen_error"] = np.array("")
  except tf.errors.InvalidArgumentError as error:
    results["unseen_error"] = np.array(error.message)
  results["unseen_files"] = np.array(unseen.data_files)
  # A callback-started stream shipped before its start was set: the workers refuse it.
  unstarted = dataset().apply(batcher_for(tf_repulsive.VanillaPDS(), start_step=None))
  try:
    next(iter(unstarted.apply(svc.distribute("distributed_epoch", dispatcher.target))))
    results["unstarted_error"] = np.array("")
  except tf.errors.InvalidArgumentError as error:
    results["unstarted_error"] = np.array(error.message)
  # Keras with the callback on a shipped callback-started stream: the callback cannot move the
  # start on the workers. Given the dataset, it refuses it at once, naming the fixed start;
  # without it, fit fails at the first batch.
  batcher = batcher_for(tf_repulsive.VanillaPDS(), start_step=None)
  callback = tf_repulsive.AnnealingCallback(batcher)
  shipped = dataset().apply(batcher).map(lambda x, y, index: (x, y)).apply(
      svc.distribute("distributed_epoch", dispatcher.target))
  try:
    tf_repulsive.AnnealingCallback(batcher, dataset=shipped)
    results["keras_error"] = np.array("")
  except ValueError as error:
    results["keras_error"] = np.array(f"{type(error).__name__}: {error}")
  model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
  model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  try:
    model.fit(shipped, epochs=1, steps_per_epoch=3, verbose=0, callbacks=[callback])
    results["keras_run_error"] = np.array("")
  except (ValueError, RuntimeError, tf.errors.InvalidArgumentError) as error:
    results["keras_run_error"] = np.array(f"{type(error).__name__}: {error}")
  np.savez(output, **results)
  # The servers stop with the process, at once: an orderly stop of each (or their destructors, on
  # return) waits 15-20 s for the workers' tasks on a machine whose cores are busy.
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(0)


def multi_worker_task(index, output_dir):
  os.environ["TF_CONFIG"] = json.dumps({
      "cluster": {"worker": [f"127.0.0.1:{port}" for port in MULTI_WORKER_PORTS]},
      "task": {"type": "worker", "index": index}})
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  batcher = batcher_for(tf_repulsive.AnnealPDS())
  source = dataset()
  distributed = strategy.distribute_datasets_from_function(
      lambda context: source.apply(batcher.per_replica(context)))
  iterator = iter(distributed)
  shards = []
  for _ in range(MULTI_WORKER_STEPS):
    local = strategy.experimental_local_results(next(iterator)[2])
    shards.append(np.concatenate([tensor.numpy() for tensor in local]))
  np.save(os.path.join(output_dir, f"worker{index}.npy"), np.stack(shards))
  # Keras given the whole global batches (TF would rebatch them as if each worker read other data):
  # fit must fail. (Keras 3.15 fails by itself here, in its symbolic build; the callback refuses it
  # too, see test_callback.py.)
  with strategy.scope():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  whole = batcher_for(tf_repulsive.AnnealPDS(), start_step=None)
  batches = source.apply(whole).map(lambda x, y, position: (x, y))
  try:
    model.fit(batches, epochs=1, steps_per_epoch=2, verbose=0, callbacks=[tf_repulsive.AnnealingCallback(whole)])
    refusal = ""
  except Exception as error:  # noqa: BLE001 - whichever layer refuses, it must not train.
    refusal = f"{type(error).__name__}: {error}"
  with open(os.path.join(output_dir, f"worker{index}_refusal.txt"), "w") as f:
    f.write(refusal)


if __name__ == "__main__":
  command, *arguments = sys.argv[1:]
  if command == "service":
    service(*arguments)
  elif command == "multi_worker_task":
    multi_worker_task(int(arguments[0]), arguments[1])
  else:
    raise SystemExit(f"unknown command {command!r}")
