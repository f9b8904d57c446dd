"""`data_dir`: a stream whose graph names files instead of holding the arrays it draws from.

Under tf.data service (tests/integration/test_distributed.py) the workers run such a stream; here: it draws
the batches the graph-held stream draws, its graph does not grow with N, its iterator checkpoints
restore, its files are named by their content, and a process that cannot read one fails naming it.
"""

import hashlib
import os

import numpy as np
import pytest
import tensorflow as tf
from sklearn import datasets as sk_datasets

import tf_repulsive
from cached_samplers import VanillaPDSWithCache
from data_file_damage import damage
from data_file_damage import files_by_kind
from tf_repulsive import _data_file_checks
from tf_repulsive import _data_files

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow

BATCH = 50
STEPS = 24


def _digits():
  data = sk_datasets.load_digits()
  features = (data.data / 16.0).astype(np.float32)
  return tf.data.Dataset.from_tensor_slices((features, data.target.astype(np.int64), np.arange(len(features))))


def _build(sampler, data_dir, dataset=_digits):
  batcher = tf_repulsive.repulsive_batch(BATCH, sampler, labels=lambda x, y, index: y, seed=11, start_step=0,
                                         options=tf_repulsive.BatcherOptions(data_dir=data_dir, verbose=False))
  return batcher, dataset().apply(batcher)


def _graph_bytes(stream):
  return len(stream._as_serialized_graph().numpy())  # what tf.data service ships


def _indices(stream, count=STEPS):
  iterator = iter(stream)
  return np.stack([next(iterator)[2].numpy() for _ in range(count)])


# A dart thrower of each kind (one radius, darts by mingling value) and a drawer the pipeline
# traces itself.
@pytest.mark.parametrize("sampler", [
    tf_repulsive.VanillaPDS(radius="auto"), tf_repulsive.AnnealPDS(), tf_repulsive.EpochShuffle()],
    ids=lambda sampler: type(sampler).__name__)
def test_a_stream_by_reference_draws_the_batches_of_the_stream_that_holds_the_arrays(tmp_path, sampler):
  held_batcher, held = _build(sampler, None)
  batcher, by_reference = _build(sampler, tmp_path)
  received = _indices(by_reference)
  np.testing.assert_array_equal(received, _indices(held))
  np.testing.assert_array_equal(received, np.stack([batcher.batch_indices(step) for step in range(STEPS)]))
  # The elements' features (and the drawer's arrays: feature vectors, the distance cache) are files now.
  features_bytes = batcher.elements[0].nbytes
  assert _graph_bytes(by_reference) < 1e6 and _graph_bytes(held) - _graph_bytes(by_reference) > 0.9 * features_bytes
  assert batcher.data_files and held_batcher.data_files == []
  assert all(os.path.dirname(path) == str(tmp_path) and os.path.getsize(path) >= _data_files.IN_GRAPH_BYTES
             for path in batcher.data_files)


def _gaussian(num_points):
  rng = np.random.default_rng(num_points)
  features = rng.standard_normal((num_points, 32)).astype(np.float32)
  labels = rng.integers(0, 10, num_points)
  return lambda: tf.data.Dataset.from_tensor_slices((features, labels, np.arange(num_points)))


def test_the_graph_by_reference_does_not_grow_with_n(tmp_path):
  sizes = {}
  for num_points in (20_000, 40_000):
    _, stream = _build(tf_repulsive.VanillaPDS(radius=1.0), tmp_path, _gaussian(num_points))
    sizes[num_points] = _graph_bytes(stream)
  # The sizes differ only in how many digits the shapes take.
  assert sizes[40_000] < 1e6 and abs(sizes[40_000] - sizes[20_000]) < 256, sizes
  _, held = _build(tf_repulsive.VanillaPDS(radius=1.0), None, _gaussian(40_000))
  assert _graph_bytes(held) > 40_000 * 32 * 4  # the elements


def test_an_iterator_checkpoint_by_reference_holds_no_array_and_restores(tmp_path):
  # 20,000 points: the files (2.6 MB of features) outweigh the batches a checkpoint holds.
  batcher, stream = _build(tf_repulsive.AnnealPDS(), tmp_path / "data", dataset=_gaussian(20000))
  iterator = iter(stream)
  for _ in range(5):
    next(iterator)
  checkpoint = tf.train.Checkpoint(iterator=iterator)
  path = checkpoint.write(str(tmp_path / "checkpoint" / "ckpt"))
  saved = sum(os.path.getsize(tmp_path / "checkpoint" / name) for name in os.listdir(tmp_path / "checkpoint"))
  # (What it holds is the stream's position and the prefetched batches.)
  assert saved < sum(os.path.getsize(path) for path in batcher.data_files) / 4
  # A new pipeline of the same batcher settings (the files are found, not written again).
  _, rebuilt = _build(tf_repulsive.AnnealPDS(), tmp_path / "data", dataset=_gaussian(20000))
  restored = iter(rebuilt)
  tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
  np.testing.assert_array_equal(np.stack([next(restored)[2].numpy() for _ in range(7)]),
                                np.stack([batcher.batch_indices(step) for step in range(5, 12)]))


def _ops_of(graph_def, function_name):
  """The op types of a function in `graph_def`'s library, with those of the functions it calls."""
  functions = {function.signature.name: function for function in graph_def.library.function}
  ops, pending, seen = set(), [function_name], set()
  while pending:
    name = pending.pop()
    if name in seen:
      continue
    seen.add(name)
    for node in functions[name].node_def:
      ops.add(node.op)
      pending += [value.func.name for value in node.attr.values() if value.func.name]
      pending += [node.op] if node.op in functions else []
  return ops


@pytest.mark.parametrize("form", ["apply", "per_replica"])
def test_the_files_are_mapped_one_draw_at_a_time_not_in_the_parallel_draw(tmp_path, form):
  """TensorFlow copies the arrays of the files a function maps whenever it instantiates the function.

  The parallel map instantiates its function in each thread that starts a first call: the files
  are mapped upstream, in a map that runs one element at a time, and reach the draw as arguments.
  """
  batcher = tf_repulsive.repulsive_batch(BATCH * 2, tf_repulsive.AnnealPDS(), labels=lambda x, y, index: y, seed=11,
                                         start_step=0,
                                         options=tf_repulsive.BatcherOptions(data_dir=tmp_path, verbose=False))
  if form == "apply":
    stream = _digits().apply(batcher)
  else:
    stream = _digits().apply(batcher.per_replica(tf.distribute.InputContext(1, 0, 2)))
  graph_def = tf.compat.v1.GraphDef.FromString(stream._as_serialized_graph().numpy())
  mapping = {node.op: _ops_of(graph_def, node.attr["f"].func.name) for node in graph_def.node
             if node.op in ("MapDataset", "ParallelMapDatasetV2") and "ImmutableConst" in _ops_of(
                 graph_def, node.attr["f"].func.name)}
  assert list(mapping) == ["MapDataset"]
  parallel = [node for node in graph_def.node if node.op == "ParallelMapDatasetV2"]
  assert len(parallel) == 1 and "ImmutableConst" not in _ops_of(graph_def, parallel[0].attr["f"].func.name)
  # Every file the stream reads is mapped there, and the batches are the draws.
  mapped = {node.attr["memory_region_name"].s.decode() for function in graph_def.library.function
            for node in function.node_def if node.op == "ImmutableConst"}
  assert mapped == set(batcher.data_files)
  iterator = iter(stream)
  for step in range(3):
    rows = batcher.batch_indices(step)
    local = np.concatenate([next(iterator)[2].numpy() for _ in range(2 if form == "per_replica" else 1)])
    np.testing.assert_array_equal(local, rows)


def test_files_are_named_by_their_content_and_found_again(tmp_path):
  batcher, _ = _build(tf_repulsive.VanillaPDS(), tmp_path)
  written = {path: os.stat(path).st_mtime_ns for path in batcher.data_files}
  again, _ = _build(tf_repulsive.VanillaPDS(), tmp_path)
  assert {path: os.stat(path).st_mtime_ns for path in again.data_files} == written
  doubled = lambda: _digits().map(lambda x, y, index: (2.0 * x, y, index))  # noqa: E731
  other, _ = _build(tf_repulsive.VanillaPDS(), tmp_path, doubled)
  # Other arrays, other files; the first build's stay as they were.
  assert not set(other.data_files) & set(written)
  assert {path: os.stat(path).st_mtime_ns for path in written} == written
  assert not [name for name in os.listdir(tmp_path) if name.endswith(".partial")]


def test_a_file_names_the_hash_of_its_dtype_and_bytes(tmp_path):
  files = _data_files.DataFiles(str(tmp_path), verbose=False)
  array = np.arange(2**15, dtype=np.int32).reshape(2**10, 32)
  tensor = tf.constant(array)

  # The same bytes in another shape share the file; small arrays stay in the graph.
  paths = files.paths_of([tensor, tf.reshape(tensor, [-1]), tf.constant(array[:4])])

  @tf.function
  def read():
    files.receive(paths, files.mapped(paths))
    return files.read(tensor)

  np.testing.assert_array_equal(read().numpy(), array)
  expected = hashlib.sha256(f"{array.dtype.str}\n".encode() + array.tobytes()).hexdigest()[:32]
  assert files.paths == paths == [str(tmp_path / expected) + ".tf_repulsive"]


def test_a_process_that_cannot_read_a_file_fails_naming_it(tmp_path):
  batcher, stream = _build(tf_repulsive.VanillaPDS(), tmp_path)
  elements = max(batcher.data_files, key=os.path.getsize)
  os.rename(elements, elements + ".moved")
  with pytest.raises(tf.errors.InvalidArgumentError, match=f"cannot see {elements}.*same path"):
    next(iter(stream))
  # A partial copy: the op checks the length.
  with open(elements + ".moved", "rb") as source, open(elements, "wb") as partial:
    partial.write(source.read(1000))
  with pytest.raises(tf.errors.InternalError, match="wrong length"):
    next(iter(stream))


def test_the_workers_check_tells_a_file_of_the_right_length_from_a_missing_shorter_or_longer_one(tmp_path):
  length = 3000
  path = str(tmp_path / "file")
  statuses = {}
  for case, size in (("same", length), ("shorter", length - 1), ("longer", length + 1), ("empty", 0)):
    with open(path, "wb") as file:
      file.write(b"x" * size)
    statuses[case] = int(_data_file_checks.length_status(tf.constant(path), tf.constant(length, tf.int64)))
  os.remove(path)
  statuses["missing"] = int(_data_file_checks.length_status(tf.constant(path), tf.constant(length, tf.int64)))
  assert statuses["same"] == _data_file_checks.SAME_LENGTH
  assert statuses["shorter"] == statuses["empty"] == _data_file_checks.SHORTER
  assert statuses["longer"] > _data_file_checks.SAME_LENGTH and statuses["missing"] == _data_file_checks.MISSING


def test_the_workers_check_refuses_what_it_cannot_check(tmp_path):
  batcher, _ = _build(tf_repulsive.VanillaPDS(), tmp_path)
  with pytest.raises(TypeError, match="`service` must be the dispatcher's address"):
    batcher.check_data_files(5000)
  with pytest.raises(ValueError, match="`timeout` must be a positive number"):
    batcher.check_data_files("grpc://localhost:5000", timeout=0)
  in_graph, _ = _build(tf_repulsive.VanillaPDS(), None)
  with pytest.raises(ValueError, match="built with a data_dir"):
    in_graph.check_data_files("grpc://localhost:5000")


def test_data_dir_refuses_what_it_cannot_map(tmp_path):
  with pytest.raises(ValueError, match="is a URL"):
    tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(),
                                 options=tf_repulsive.BatcherOptions(data_dir="gs://bucket/data"))
  with pytest.raises(TypeError, match="data_dir"):
    tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), options=tf_repulsive.BatcherOptions(data_dir=3))
  model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
  with pytest.raises(ValueError, match="a ModelSpace or a data_dir, not both"):
    tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(),
                                 features=tf_repulsive.ModelSpace(model, tf_repulsive.EmbeddingFeatures(), 10),
                                 options=tf_repulsive.BatcherOptions(data_dir=tmp_path))
  words = tf.data.Dataset.from_tensor_slices((np.zeros((20, 2), np.float32), np.array(["a"] * 20)))
  with pytest.raises(ValueError, match="tf.string component"):
    words.apply(tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), start_step=0,
                                             options=tf_repulsive.BatcherOptions(data_dir=tmp_path)))
  relative = tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(),
                                          options=tf_repulsive.BatcherOptions(data_dir=os.path.relpath(tmp_path)))
  assert relative.options.data_dir == str(tmp_path)


def test_feature_vectors_that_are_the_elements_are_held_once(tmp_path):
  """The default features of float32 `x` are x's own array: in memory, in the drawer and in the files."""
  features = np.random.default_rng(0).standard_normal((20_000, 64)).astype(np.float32)
  dataset = lambda: tf.data.Dataset.from_tensor_slices((features, np.arange(20_000) % 10, np.arange(20_000)))  # noqa: E731
  batcher, stream = _build(tf_repulsive.VanillaPDS(), tmp_path, dataset)
  elements = batcher.elements[0]
  assert np.from_dlpack(batcher.drawer._state.features).ctypes.data == elements.ctypes.data
  assert [os.path.getsize(path) >= features.nbytes for path in batcher.data_files].count(True) == 1
  x, _, index = next(iter(stream))
  np.testing.assert_array_equal(x.numpy(), features[index.numpy()])
  # Without data_dir the graph holds that array once.
  _, held = _build(tf_repulsive.VanillaPDS(), None, dataset)
  assert features.nbytes < _graph_bytes(held) < 1.5 * features.nbytes
  # Far from the origin (a mean 100 times the spread), the distances need the features centred:
  # a centred copy, drawn from a file of its own.
  shifted, _ = _build(tf_repulsive.VanillaPDS(), tmp_path / "shifted",
                      lambda: dataset().map(lambda x, y, index: (x + 100.0, y, index)))
  assert [os.path.getsize(path) >= features.nbytes for path in shifted.data_files].count(True) == 2


def test_dict_and_multi_input_elements_by_reference_are_the_drawn_elements(tmp_path):
  """Every component of nested elements comes from its file, row for row, also behind map and prefetch."""
  rng = np.random.default_rng(1)
  image = rng.standard_normal((3000, 8, 8)).astype(np.float32)
  extra = rng.integers(0, 1000, (3000, 16)).astype(np.int64)
  label = np.arange(3000) % 10
  dataset = lambda: tf.data.Dataset.from_tensor_slices(  # noqa: E731
      ({"image": image, "extra": extra}, label))
  batcher = tf_repulsive.repulsive_batch(50, tf_repulsive.VanillaPDS(), seed=4, start_step=0,
                                         features=lambda x, y: x["image"],
                                         options=tf_repulsive.BatcherOptions(data_dir=tmp_path, verbose=False))
  stream = dataset().apply(batcher).map(lambda x, y: (x, y)).prefetch(2)
  iterator = iter(stream)
  for step in range(3):
    x, y = next(iterator)
    rows = batcher.batch_indices(step)
    np.testing.assert_array_equal(x["image"].numpy(), image[rows])
    np.testing.assert_array_equal(x["extra"].numpy(), extra[rows])
    np.testing.assert_array_equal(y.numpy(), label[rows])
  assert len(batcher.data_files) >= 2 and _graph_bytes(dataset().apply(
      tf_repulsive.repulsive_batch(50, tf_repulsive.Uniform(), seed=4, start_step=0,
                                   options=tf_repulsive.BatcherOptions(data_dir=tmp_path, verbose=False)))) < 1e6


def _build_with_features(data_dir):
  """A batcher whose feature vectors have a file of their own; each new iterator starts at step 0."""
  batcher = tf_repulsive.repulsive_batch(
      BATCH, VanillaPDSWithCache(), features=lambda x, y, index: 2.0 * x, labels=lambda x, y, index: y, seed=11,
      options=tf_repulsive.BatcherOptions(data_dir=data_dir, verbose=False))
  stream = _digits().apply(batcher)

  def first_batches(count):
    batcher.start_at(0)
    return _indices(stream, count)

  return batcher, first_batches


@pytest.mark.parametrize("how", ["zeros", "flips"])
@pytest.mark.parametrize("kind", ["elements", "features", "table"])
def test_a_damaged_file_fails_the_draw_naming_it_and_a_new_build_writes_it_anew(tmp_path, kind, how):
  batcher, first_batches = _build_with_features(tmp_path)
  expected = first_batches(4)
  path = files_by_kind(batcher)[kind]
  damage(path, how)
  with pytest.raises(tf.errors.InvalidArgumentError, match=f"{path} does not hold the array the build wrote"):
    first_batches(1)
  with pytest.warns(RuntimeWarning, match=f"{path} does not hold the array the build wrote.*writes it anew"):
    again, again_first_batches = _build_with_features(tmp_path)
  assert again.data_files == batcher.data_files
  np.testing.assert_array_equal(again_first_batches(4), expected)
  # The files are mapped at every draw: the first build's stream reads the file written anew.
  np.testing.assert_array_equal(first_batches(4), expected)


def test_a_change_between_the_sampled_places_passes_the_draw_and_fails_the_full_checks(tmp_path):
  batcher, first_batches = _build_with_features(tmp_path)
  path = files_by_kind(batcher)["table"]
  length = os.path.getsize(path)
  samples = _data_file_checks.Samples.of(np.memmap(path, np.float32, "r"))
  # A byte the sampled runs do not cover (the cache's values are float32: 4 bytes each).
  byte = int(np.setdiff1d(np.arange(length // 4), samples.positions)[length // 8]) * 4
  expected = _data_file_checks.fingerprints(path, length).numpy()
  with open(path, "r+b") as file:
    file.seek(byte)
    original = file.read(1)
    file.seek(byte)
    file.write(bytes([original[0] ^ 0x01]))
  first_batches(1)  # the sampled check does not see it
  assert int(_data_file_checks.content_status(path, length, expected)) == _data_file_checks.OTHER_CONTENTS
  with pytest.warns(RuntimeWarning, match="writes it anew"):
    _build_with_features(tmp_path)
  assert int(_data_file_checks.content_status(path, length, expected)) == _data_file_checks.SAME_LENGTH
