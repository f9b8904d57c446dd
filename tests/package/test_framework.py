"""The framework guard: the tested range is stated once, holds here, and guards every internal's first use."""

import importlib.metadata
import re
import sys
import types

import keras
import numpy as np
import packaging.requirements
import packaging.specifiers
import pytest
import tensorflow as tf

import tf_repulsive
from tf_repulsive import _dataset_graph
from tf_repulsive import _framework
from tf_repulsive import _stream_ops


@pytest.fixture
def fresh_guard(monkeypatch):
  """The guard and the internals as before their first use in this process; restored after the test."""
  monkeypatch.delenv(_framework.UNTESTED_ENVIRONMENT_VARIABLE, raising=False)
  _framework.check_tested.cache_clear()
  _stream_ops._internals.cache_clear()  # pylint: disable=protected-access
  yield
  _framework.check_tested.cache_clear()
  _stream_ops._internals.cache_clear()  # pylint: disable=protected-access


def _points():
  return tf.data.Dataset.from_tensor_slices(np.arange(40, dtype=np.float32)[:, None])


def test_the_installed_releases_are_in_the_tested_range(fresh_guard):
  # Fails when CI moves to a release the range does not state: test it, then widen the range.
  _framework.check_tested()
  assert _framework._outside_range() is None  # pylint: disable=protected-access


def test_the_installed_metadata_states_the_tested_range():
  # setup.py reads the range from _framework.py; the metadata is what pip installed from it.
  requirements = {}
  for text in importlib.metadata.requires("tf_repulsive"):
    requirement = packaging.requirements.Requirement(text)
    requirements[requirement.name] = requirement.specifier
  for name, (oldest, newest) in (("tensorflow-cpu", _framework.TESTED_TENSORFLOW),
                                 ("tensorflow", _framework.TESTED_TENSORFLOW), ("keras", _framework.TESTED_KERAS)):
    major, minor = newest.split(".")
    after = f"{major}.{int(minor) + 1}"
    assert requirements[name] == packaging.specifiers.SpecifierSet(f">={oldest},<{after}"), (name, requirements[name])


@pytest.mark.parametrize("module, version, named", [(tf, "2.99.0", "TensorFlow 2.99.0"),
                                                    (keras, "4.0.1", "Keras 4.0.1")])
def test_an_untested_release_fails_at_the_first_stream_naming_the_tested_range(fresh_guard, monkeypatch, module,
                                                                                version, named):
  import tf_repulsive  # noqa: F401 (importing never fails on a version)
  monkeypatch.setattr(module, "__version__", version)
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), seed=0, start_step=0)
  tested = (f"tested on TensorFlow {_framework.TESTED_TENSORFLOW[0]} to {_framework.TESTED_TENSORFLOW[1]} and "
            f"Keras {_framework.TESTED_KERAS[0]} to {_framework.TESTED_KERAS[1]}; this process has {named}")
  with pytest.raises(_framework.UntestedFrameworkError, match=re.escape(tested)):
    _points().apply(batcher)
  with pytest.raises(_framework.UntestedFrameworkError, match=_framework.UNTESTED_ENVIRONMENT_VARIABLE):
    _dataset_graph.read_from_service(_points())
  # The user's way out: try the release anyway.
  monkeypatch.setenv(_framework.UNTESTED_ENVIRONMENT_VARIABLE, "1")
  _framework.check_tested.cache_clear()
  first = next(iter(_points().apply(tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), seed=0, start_step=0))))
  assert len(set(first.numpy().ravel().tolist())) == 10


def test_a_moved_internal_fails_at_first_use_naming_it_and_the_tested_range(fresh_guard, monkeypatch):
  moved = types.ModuleType("tensorflow.python.data.ops.unbatch_op")  # a release without _UnbatchDataset
  monkeypatch.setitem(sys.modules, "tensorflow.python.data.ops.unbatch_op", moved)
  monkeypatch.setattr(sys.modules["tensorflow.python.data.ops"], "unbatch_op", moved)
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.Uniform(), seed=0, start_step=0)
  with pytest.raises(_framework.UntestedFrameworkError,
                     match=r"private tf\.data constructors.*_UnbatchDataset.*tested on TensorFlow"):
    _points().apply(batcher)
