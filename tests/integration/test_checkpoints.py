"""Iterator checkpoints at every break point: the batches after a restore are the uninterrupted ones.

One harness in the spirit of TF's `checkpoint_test_base`: for every sampler, in two of the pipelines
users compose (`apply`, `+ prefetch`, `+ repeat + prefetch`, `+ map + prefetch`; `cases.CASES`), the iterator is
saved after every step of the first three epochs, then restored into a new iterator in this process
(while the saved-from iterator is alive and ahead of it), and at three of those break points in a
fresh process (pipelines built anew; a callback-started stream is not started there, so its start
must come from the checkpoint).
The fresh process restores every case while this one checks its in-process restores.
"""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import checkpoint_cases as cases
from tf_repulsive import diagnostics

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_checkpoints")]

_FRESH_PROCESS_SECONDS = 600


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """Every case saved at every break point; the fresh process restoring them, started."""
  directory = tmp_path_factory.mktemp("iterator_checkpoints")
  uninterrupted, pipelines = {}, {}
  for sampler_name, pipeline_name in cases.CASES:
    _, pipeline = cases.build(sampler_name, pipeline_name)
    iterator = iter(pipeline)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    batches = []
    for step in range(cases.READ):
      if step in cases.BREAKS:
        checkpoint.write(cases.checkpoint_path(str(directory), sampler_name, pipeline_name, step))
      batches.append(cases.read(iterator, 1)[0])
    uninterrupted[sampler_name, pipeline_name] = np.stack(batches)
    pipelines[sampler_name, pipeline_name] = pipeline
  output = directory / "restored.npz"
  fresh = subprocess.Popen([sys.executable, cases.__file__, str(directory), str(output)])
  yield directory, uninterrupted, pipelines, fresh, output
  fresh.kill()


def _pipelines_of(sampler_name):
  return [pipeline_name for name, pipeline_name in cases.CASES if name == sampler_name]


def test_the_cases_put_every_sampler_behind_a_prefetch_and_every_pipeline_under_both_starts():
  assert {name for name, _ in cases.CASES} == set(cases.SAMPLERS)
  assert all(any("prefetch" in pipeline for pipeline in _pipelines_of(name)) for name in cases.SAMPLERS)
  for pipeline_name in cases.PIPELINES:
    names = {name for name, pipeline in cases.CASES if pipeline == pipeline_name}
    assert names & cases.FIXED_START and names - cases.FIXED_START, pipeline_name


def _expected_stream(sampler_name):
  """The steps a case's stream holds: its start onwards."""
  start = 0 if sampler_name in cases.FIXED_START else cases.CALLBACK_START
  return start, start + cases.READ


@pytest.mark.parametrize("sampler_name", list(cases.SAMPLERS))
def test_uninterrupted_batches_are_the_draws_of_their_steps_and_epochs_differ(saved, sampler_name):
  _, uninterrupted, _, _, _ = saved
  batcher, _ = cases.build(sampler_name, "apply")
  start, stop = _expected_stream(sampler_name)
  draws = diagnostics.draw_batches(batcher, stop - start, start_step=start)
  steps = cases.STEPS_PER_EPOCH
  for pipeline_name in _pipelines_of(sampler_name):
    batches = uninterrupted[sampler_name, pipeline_name]
    np.testing.assert_array_equal(batches, draws, err_msg=pipeline_name)
    # A restore that restarted an epoch would be caught.
    assert not np.array_equal(batches[:steps], batches[steps:2 * steps])


@pytest.mark.parametrize("sampler_name", list(cases.SAMPLERS))
def test_restored_in_process_continues_with_the_uninterrupted_batches(saved, sampler_name):
  directory, uninterrupted, pipelines, _, _ = saved
  for pipeline_name in _pipelines_of(sampler_name):
    batches = uninterrupted[sampler_name, pipeline_name]
    # A new iterator restored again and again: a restore replaces all of its state.
    iterator = iter(pipelines[sampler_name, pipeline_name])
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    for after in cases.BREAKS:
      checkpoint.read(cases.checkpoint_path(str(directory), sampler_name, pipeline_name, after)).assert_consumed()
      np.testing.assert_array_equal(cases.read(iterator, cases.READ - after), batches[after:],
                                    err_msg=f"{pipeline_name}, restored after {after}")


def test_restored_in_a_fresh_process_continues_with_the_uninterrupted_batches(saved):
  _, uninterrupted, _, fresh, output = saved
  assert fresh.wait(timeout=_FRESH_PROCESS_SECONDS) == 0
  restored = np.load(output)
  for (sampler_name, pipeline_name), batches in uninterrupted.items():
    for after in cases.FRESH_BREAKS:
      np.testing.assert_array_equal(restored[f"{sampler_name}-{pipeline_name}-{after}"], batches[after:],
                                    err_msg=f"{sampler_name}, {pipeline_name}, restored after {after}")


def test_regression_repeat_prefetch_restored_while_the_original_ran_ahead(tmp_path):
  # Saved after 17 of 20 steps, 6 more consumed, restored in the same process: a position shared
  # with the running iterator would continue 17, 18, 19, then 40, 41, 42. Here after 5 of 3-step
  # epochs.
  batcher, pipeline = cases.build("vanilla_pds", "apply_repeat_prefetch")
  iterator = iter(pipeline)
  cases.read(iterator, 5)
  path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "ahead"))
  ahead = cases.read(iterator, 6)
  restored = iter(pipeline)
  tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
  np.testing.assert_array_equal(cases.read(restored, 6), ahead)
  start = cases.CALLBACK_START
  np.testing.assert_array_equal(ahead, np.stack([batcher.batch_indices(start + step) for step in range(5, 11)]))
