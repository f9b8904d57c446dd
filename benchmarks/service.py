"""tf.data service with the arrays in the graph and by reference (`data_dir`): graph, memory, first batch.

  .venv/bin/python -m benchmarks.service [--num_points=1000000] [--dim=128]
      [--batch_size=512] [--sampler=vanilla_pds] [--modes=reference,value] [--batches=200] [--rebuild]

A dispatcher, two workers and a client, each its own process, in a private network namespace
(the script enters one with `unshare --net`, loopback only, as root; the servers stop with it).
The client builds the batcher on Gaussian data (`benchmarks/data.py`, 10 labels),
ships the stream with `distribute("distributed_epoch")` and reads `--batches` batches. Per mode:
the build's seconds, the serialised graph's bytes, the workers' check of the data files (lengths,
then every byte: `check_data_files(..., contents=True)`), the seconds from `distribute()` to the
first batch, batches/s after it, with `--rebuild` a second build's seconds and its comparison of
the files with the arrays, and each process's peak memory (sampled every 0.1 s from
/proc/PID/status) above what it held before the stream (TensorFlow imported, server started;
the client's input arrays made), over the data's bytes (the elements: features and labels): its
own memory (`RssAnon`) at the peak and after the last batch, and the file pages it maps
(`RssFile`: the data files, page cache that the processes of a machine share; a page mapped by
several draws in flight counts once per mapping). Every process inherits this one's environment
(e.g. `TF_ENABLE_ONEDNN_OPTS=0`).
"""

import json
import os
import select
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

_NUM_POINTS = flags.DEFINE_integer("num_points", 1_000_000, "N.")
_DIM = flags.DEFINE_integer("dim", 128, "d.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 512, "k.")
_SAMPLER = flags.DEFINE_enum("sampler", "vanilla_pds", ["uniform", "vanilla_pds", "anneal_pds"], "Sampler.")
_MODES = flags.DEFINE_list("modes", ["reference", "value"], "reference: data_dir; value: the graph holds the arrays.")
_BATCHES = flags.DEFINE_integer("batches", 200, "Batches the client reads after the first.")
_REBUILD = flags.DEFINE_boolean(
    "rebuild", False, "After the last batch, build again on the files written (each compared with the array "
    "in memory before it is reused), and time that comparison alone. Adds a batcher to the client's memory.")
_SECONDS = flags.DEFINE_integer("seconds", 1800, "Bound on each mode's run.")
_NAMESPACE = "TF_REPULSIVE_BENCHMARK_NAMESPACE"

# The servers: start, say where they listen, run until stdin closes.
_DISPATCHER = """
import sys, tensorflow as tf
server = tf.data.experimental.service.DispatchServer(tf.data.experimental.service.DispatcherConfig(port=0))
print(server.target.split("://")[1], flush=True)
sys.stdin.read()
"""
_WORKER = """
import sys, tensorflow as tf
svc = tf.data.experimental.service
server = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=sys.argv[1], worker_address="127.0.0.1:%port%", port=0))
print("ready", flush=True)
sys.stdin.read()
"""
# The client: build, ship, read; the results as JSON on its last line.
_CLIENT = """
import json, sys, time
import numpy as np, tensorflow as tf
sys.path.insert(0, ".")
from benchmarks.data import dataset
import tf_repulsive
address, data_dir, num_points, dim, batch_size, sampler_name, batches, rebuild_too = sys.argv[1:]
features, labels = dataset("gaussian", int(num_points), int(dim))
print("ready", flush=True)
sys.stdin.readline()  # the orchestrator has read the resident memory before the stream
sampler = {"uniform": tf_repulsive.Uniform, "vanilla_pds": tf_repulsive.VanillaPDS,
           "anneal_pds": tf_repulsive.AnnealPDS}[sampler_name]()
options = tf_repulsive.BatcherOptions(data_dir=None if data_dir == "-" else data_dir)
batcher = tf_repulsive.repulsive_batch(int(batch_size), sampler, seed=0, start_step=0, options=options)
start = time.perf_counter()
stream = tf.data.Dataset.from_tensor_slices((features, labels)).apply(batcher)
build = time.perf_counter() - start
graph_bytes = len(stream._as_serialized_graph().numpy())
check = check_contents = rebuild = compare = None
if batcher.data_files:
  start = time.perf_counter()
  batcher.check_data_files("grpc://" + address)
  check = time.perf_counter() - start
  start = time.perf_counter()
  batcher.check_data_files("grpc://" + address, contents=True)
  check_contents = time.perf_counter() - start
start = time.perf_counter()
iterator = iter(stream.apply(tf.data.experimental.service.distribute(
    "distributed_epoch", "grpc://" + address)))
next(iterator)
first = time.perf_counter() - start
start = time.perf_counter()
for _ in range(int(batches)):
  next(iterator)
rate = int(batches) / (time.perf_counter() - start)
if rebuild_too == "1" and batcher.data_files:
  # A second build finds the files and compares each with the array in memory before it reuses it.
  start = time.perf_counter()
  tf.data.Dataset.from_tensor_slices((features, labels)).apply(
      tf_repulsive.repulsive_batch(int(batch_size), sampler, seed=0, start_step=0, options=options))
  rebuild = time.perf_counter() - start
  from tf_repulsive import _data_file_checks, _data_files
  files = batcher._built.files
  start = time.perf_counter()
  for path in batcher.data_files:
    _data_file_checks.same_bytes(path, _data_files._flat_bytes(_data_files._host_view(files._arrays[path])), False)
  compare = time.perf_counter() - start
files = sum(__import__("os").path.getsize(path) for path in batcher.data_files)
print(json.dumps(dict(build=build, graph_bytes=graph_bytes, check=check, check_contents=check_contents, rebuild=rebuild,
                      compare=compare, first_batch=first, batches_per_second=rate,
                      file_bytes=files, data_bytes=features.nbytes + labels.nbytes)), flush=True)
sys.stdin.read()
"""


def _resident_kib(pid):
  """(RssAnon, RssFile) of the process, in KiB."""
  fields = {}
  with open(f"/proc/{pid}/status") as status:
    for line in status:
      name, _, value = line.partition(":")
      if name in ("RssAnon", "RssFile"):
        fields[name] = int(value.split()[0])
  return fields.get("RssAnon", 0), fields.get("RssFile", 0)


class _Process:
  """A Python program in its own process; its resident memory sampled by `sample`."""

  def __init__(self, name, program, *arguments):
    self.name = name
    self.process = subprocess.Popen([sys.executable, "-c", program, *map(str, arguments)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
    self.baseline = (0, 0)
    self.peak = [0, 0]
    self.last = (0, 0)

  def read_line(self):
    line = self.process.stdout.readline()
    if not line:
      raise RuntimeError(f"the {self.name} process ended (exit status {self.process.wait()}).")
    return line.strip()

  def sample(self):
    if self.process.poll() is None:
      self.last = _resident_kib(self.process.pid)
      self.peak = [max(peak, now) for peak, now in zip(self.peak, self.last)]

  def stop(self):
    if self.process.poll() is None:
      self.process.stdin.close()
      self.process.kill()
    self.process.wait()


def _run(mode, directory):
  dispatcher = _Process("dispatcher", _DISPATCHER)
  address = dispatcher.read_line()
  workers = [_Process(f"worker {index}", _WORKER, address) for index in range(2)]
  data_dir = os.path.join(directory, "data") if mode == "reference" else "-"
  client = _Process("client", _CLIENT, address, data_dir, _NUM_POINTS.value, _DIM.value, _BATCH_SIZE.value,
                    _SAMPLER.value, _BATCHES.value, int(_REBUILD.value))
  processes = [dispatcher, *workers, client]
  try:
    for process in (*workers, client):
      process.read_line()
    for process in processes:
      process.baseline = _resident_kib(process.process.pid)
    client.process.stdin.write("go\n")
    client.process.stdin.flush()
    # The client's last line, read as it comes while the memory is sampled (the client has written
    # nothing since "ready": its pipe's buffer is empty).
    output, deadline = "", time.monotonic() + _SECONDS.value
    while not output.endswith("\n"):
      if time.monotonic() > deadline:
        raise RuntimeError(f"mode {mode}: no result within {_SECONDS.value} s.")
      if client.process.poll() is not None:
        raise RuntimeError(f"mode {mode}: the client ended with status {client.process.returncode} "
                           "(a negative status is a signal: -6 is TensorFlow's abort).")
      for process in processes:
        process.sample()
      if select.select([client.process.stdout], [], [], 0.1)[0]:
        output += os.read(client.process.stdout.fileno(), 1 << 16).decode()
    result = json.loads(output.strip().splitlines()[-1])
  finally:
    for process in processes:
      process.stop()
  data_kib = result["data_bytes"] / 1024
  result["memory"] = {
      process.name: ((process.peak[0] - process.baseline[0]) / data_kib,
                     (process.last[0] - process.baseline[0]) / data_kib,
                     (process.peak[1] - process.baseline[1]) / data_kib)
      for process in processes}
  return result


def main(argv):
  del argv
  if os.environ.get(_NAMESPACE) != "1":
    os.environ[_NAMESPACE] = "1"
    command = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", sys.executable, *sys.argv]
    sys.exit(subprocess.run(command, check=False).returncode)
  print(f"gaussian {_NUM_POINTS.value} x {_DIM.value}, k = {_BATCH_SIZE.value}, {_SAMPLER.value}, "
        f"2 workers, distributed_epoch, {_BATCHES.value} batches read", flush=True)
  rows = []
  for mode in _MODES.value:
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as directory:
      try:
        result = _run(mode, directory)
      except RuntimeError as error:
        rows.append(f"| {mode} | {error} |")
        print(rows[-1], flush=True)
        continue
    memory = ", ".join(f"{name} {own:.2f} / {last:.2f} + {mapped:.2f}"
                       for name, (own, last, mapped) in result["memory"].items())
    rows.append(f"| {mode} | {result['build']:.1f} | {result['graph_bytes'] / 2**20:.2f} | "
                f"{result['file_bytes'] / 2**20:.0f} | "
                + " | ".join("–" if result[key] is None else format(result[key], ".1f")
                             for key in ("check", "check_contents", "rebuild", "compare"))
                + f" | {result['first_batch']:.1f} | "
                f"{result['batches_per_second']:.0f} | {memory} |")
    print(rows[-1], flush=True)
  print("\n| arrays | build (s) | graph (MiB) | files (MiB) | check_data_files (s) | with contents=True (s) "
        "| build again (s) | of which the byte comparison (s) | distribute() to first batch (s) "
        "| batches/s | "
        "memory above the process's start, over the data bytes: own at the peak / at the end + mapped "
        "files at the peak |")
  print("|---|---|---|---|---|---|---|---|---|---|---|")
  print("\n".join(rows))


if __name__ == "__main__":
  app.run(main)
