"""Shared fixtures and helpers. The repository root's conftest.py quiets TensorFlow's logging first.

The tests' layout: `package/` tests the modules of tf_repulsive, one file per module (named after
it); `integration/` what crosses modules (checkpoints, compositions, distribution, backends, the
docs); `programs/` the examples and benchmarks; `support/` the helpers and the programs tests run
in new processes (on sys.path, pytest.ini).
"""

import collections
import importlib
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow as tf
from sklearn import datasets as sk_datasets

import loopback
import tf_repulsive

# Four logical CPUs, for the MirroredStrategy tests; must be set before TensorFlow initialises.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 4)


@pytest.fixture(scope="session")
def digits():
  """scikit-learn's bundled handwritten digits: float32 [1797, 64] in [0, 1], int64 labels."""
  data = sk_datasets.load_digits()
  return data.data.astype(np.float32) / 16.0, data.target.astype(np.int64)


def pairwise_distances(points: np.ndarray) -> np.ndarray:
  """Exact float64 Euclidean distances, +inf on the diagonal."""
  points = points.astype(np.float64)
  distances = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(-1))
  np.fill_diagonal(distances, np.inf)
  return distances


def draw_steps(x, y, batch_size, sampler, seed=0, steps=200):
  """The batcher and its first `steps` batches (points, labels)."""
  batcher = tf_repulsive.repulsive_batch(batch_size, sampler, seed=seed, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  return batcher, list(batches.take(steps).as_numpy_iterator())


def check_auto_radius(batcher, batches, sampler):
  """Fill rate < 1% over the steps; without a fill, every pair the disks cover is that far apart."""
  radius = batcher.stats().report["radius"]
  assert radius > 0
  # Per step, not from stats(): those count every batch drawn, also the prefetched ones past `batches`.
  fills = [batcher.fallback_points(step) for step in range(len(batches))]
  assert np.count_nonzero(fills) < 0.01 * len(batches)
  if isinstance(sampler, tf_repulsive.EasyPDS):
    # Only easy points (mingling value 0) have disks.
    has_disk = tf_repulsive.mingling_index(batcher.elements[0], batcher.element_labels, sampler.neighbors) == 0
  for step, (points, _) in enumerate(batches):
    if fills[step]:
      continue
    if isinstance(sampler, tf_repulsive.EasyPDS):
      points = points[has_disk[batcher.batch_indices(step)]]
    assert pairwise_distances(points).min() >= radius


@pytest.fixture
def absl_flags():
  """absl's global flag registry; the flags defined during the test are removed after it."""
  known = set(flags.FLAGS)
  yield flags.FLAGS
  flags.FLAGS.unparse_flags()
  for name in set(flags.FLAGS) - known:
    delattr(flags.FLAGS, name)


@pytest.fixture
def example_main(absl_flags):
  """Imports an example program (e.g. "examples.synthetic.main") and parses command-line `args`.

  As in `python -m`, the program defines its flags in absl's global registry when imported. The
  flags and the module are gone after the test, so that the next test can import a program whose
  flags share names with this one's (--seed, --workdir ...).
  """
  imported = []

  def load(module_name, *args):
    module = importlib.import_module(module_name)
    imported.append(module_name)
    absl_flags([module_name, *args])
    return module

  yield load
  for module_name in imported:
    sys.modules.pop(module_name, None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
  """Refuses a `--dist loadgroup` run whose `xdist_group` modules would not each run in one process.

  pytest-xdist puts the group's name in each marked test's node id, and its scheduler keeps a
  group in one process by that id. Where that fails (pytest-xdist 3.8 under pytest 9.2), every
  such module sets up its costly fixtures once per process instead, and the suite runs minutes
  longer without any other sign.
  """
  if not getattr(config.option, "loadgroup", False):
    return
  lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
  if lost:
    message = (f"pytest-xdist did not group {len(lost)} tests marked xdist_group (the first: {lost[0]}); "
               "install the pytest that setup.py's test extra names (./scripts/setup_env.sh).")
    # (A worker's exception reaches the controller as an internal error without its message.)
    print(message, file=sys.stderr)
    raise pytest.UsageError(message)


# Cases the property-based tests generated, by property: this process's, and (under pytest-xdist)
# those the worker processes reported when they finished.
_GENERATED_ELSEWHERE: collections.Counter = collections.Counter()


def _generated_here() -> dict[str, int]:
  properties = sys.modules.get("test_properties")
  return dict(properties.GENERATED) if properties is not None else {}


def pytest_sessionfinish(session):
  if hasattr(session.config, "workeroutput"):  # an xdist worker: hand the counts to the controller
    session.config.workeroutput["generated_cases"] = _generated_here()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
  del error
  _GENERATED_ELSEWHERE.update(getattr(node, "workeroutput", {}).get("generated_cases", {}))


def pytest_terminal_summary(terminalreporter):
  """How many cases the property-based tests generated (tests/integration/test_properties.py)."""
  generated = _GENERATED_ELSEWHERE + collections.Counter(_generated_here())
  if generated:
    counts = ", ".join(f"{name}: {count}" for name, count in sorted(generated.items()))
    terminalreporter.write_line(f"property-based cases generated: {sum(generated.values())} ({counts})")


@pytest.fixture(scope="session")
def private_network():
  """Skips unless servers can run in a private network namespace (loopback only; needs root)."""
  if not loopback.available():
    pytest.skip("needs `unshare --net` (root) so that the servers listen on loopback only")
