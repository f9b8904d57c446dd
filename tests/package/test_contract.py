"""A sampler written outside the package, through the exported contract, works end to end."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_repulsive


@dataclasses.dataclass(frozen=True, eq=False)
class ClassBalanced(tf_repulsive.Sampler):
  """k distinct points, each class about equally often: Gumbel top-k with weights 1 / class size."""

  needs_labels = True

  def build(self, context: tf_repulsive.SamplingContext) -> tf_repulsive.BatchDrawer:
    counts = np.bincount(context.labels)
    log_weights = tf.constant(-np.log(counts[context.labels]), tf.float32)
    batch_size = context.batch_size

    class Drawer(tf_repulsive.BatchDrawer):
      def draw(self, key, first_step):
        uniform = tf.random.stateless_uniform(log_weights.shape,
                                              tf.random.experimental.stateless_fold_in(key, first_step),
                                              minval=1e-12, maxval=1.0)
        scores = log_weights - tf.math.log(-tf.math.log(uniform))
        return tf.math.top_k(scores, batch_size).indices[None], tf.zeros([1], tf.int32)

    return Drawer()


def _imbalanced(size=500, seed=0):
  rng = np.random.default_rng(seed)
  labels = (rng.random(size) < 0.2).astype(np.int64)
  return rng.normal(size=(size, 3)).astype(np.float32), labels


def test_it_gets_the_labels_and_balances_the_classes():
  x, y = _imbalanced()
  batcher = tf_repulsive.repulsive_batch(10, ClassBalanced(), seed=0, start_step=0)
  batches = list(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher).take(300).as_numpy_iterator())
  labels = np.concatenate([batch_labels for _, batch_labels in batches])
  assert 0.4 < labels.mean() < 0.6  # the data has 20% of class 1
  for step, (points, _) in enumerate(batches[:20]):
    np.testing.assert_array_equal(points, x[batcher.batch_indices(step)])
    assert len(set(batcher.batch_indices(step).tolist())) == 10
  assert batcher.pi(0) is None and batcher.stats().fallback_batches == 0


@dataclasses.dataclass(frozen=True, eq=False)
class LargestTargets(tf_repulsive.Sampler):
  """The k elements with the largest regression targets, every step: reads its labels as targets."""

  needs_labels = True
  label_kind = "target"

  def build(self, context: tf_repulsive.SamplingContext) -> tf_repulsive.BatchDrawer:
    assert context.labels.dtype == np.float64
    largest = tf.constant(np.argsort(-context.labels)[:context.batch_size].astype(np.int32))

    class Drawer(tf_repulsive.BatchDrawer):
      def draw(self, key, first_step):
        return largest[None], tf.zeros([1], tf.int32)

    return Drawer()


def test_a_sampler_of_targets_gets_them_as_floats_and_a_bad_label_kind_is_refused():
  x = np.arange(20, dtype=np.float32)[:, None]
  y = np.linspace(0.0, 1.0, 20, dtype=np.float32) ** 2  # as integers these would all be 0 but the last
  batcher = tf_repulsive.repulsive_batch(3, LargestTargets(), seed=0, start_step=0)
  tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher)
  assert sorted(batcher.batch_indices(0).tolist()) == [17, 18, 19]

  class Misnamed(LargestTargets):
    label_kind = "regression"

  wrong = tf_repulsive.repulsive_batch(3, Misnamed(), seed=0, start_step=0)
  with pytest.raises(ValueError, match="label_kind must be 'class' or 'target'"):
    tf.data.Dataset.from_tensor_slices((x, y)).apply(wrong)


def test_a_restored_iterator_continues_with_the_same_batches(tmp_path):
  x, y = _imbalanced()
  batcher = tf_repulsive.repulsive_batch(10, ClassBalanced(), seed=3, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher).prefetch(2)
  iterator = iter(batches)
  for _ in range(5):
    next(iterator)
  checkpoint = tf.train.Checkpoint(iterator=iterator)
  path = checkpoint.write(str(tmp_path / "ckpt"))
  expected = [next(iterator)[1].numpy() for _ in range(4)]
  restored = iter(batches)
  tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
  np.testing.assert_array_equal([next(restored)[1].numpy() for _ in range(4)], expected)


def test_it_trains_with_the_callback_in_fit():
  x, y = _imbalanced()
  batcher = tf_repulsive.repulsive_batch(10, ClassBalanced(), seed=0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).apply(batcher), epochs=2,
                      steps_per_epoch=batcher.steps_per_epoch, verbose=0,
                      callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  assert batcher.stats().last_start == 0
  assert history.history["sampler_fallback_batches"] == [0.0, 0.0]


def test_the_contract_is_exported():
  for name in ("Sampler", "SamplingContext", "BatchDrawer", "PointGroups", "Schedule"):
    assert name in tf_repulsive.__all__
  with pytest.raises(TypeError, match="must be a tf_repulsive sampler"):
    tf_repulsive.repulsive_batch(10, object())


@dataclasses.dataclass(frozen=True, eq=False)
class EvenOdd(tf_repulsive.Sampler):
  """Even steps take the first k points, odd steps the last k; reports the points' parity as groups."""

  report: dict = dataclasses.field(default_factory=lambda: {"spread": 0.25})
  groups_name: str = "parity"
  levels: tuple = (0.0, 1.0)
  pi_weights: tuple | None = (1.0, 3.0)

  def build(self, context):
    num_points, k = context.features.shape[0], context.batch_size
    sampler = self

    class Drawer(tf_repulsive.BatchDrawer):
      report = sampler.report
      groups = tf_repulsive.PointGroups(name=sampler.groups_name, of_points=np.arange(num_points) % 2,
                                        levels=np.asarray(sampler.levels))

      def draw(self, key, first_step):
        del key
        start = tf.cast(first_step % 2, tf.int32) * (num_points - k)
        return tf.range(start, start + k)[None], tf.zeros([1], tf.int32)

      def pi(self, step):
        return None if sampler.pi_weights is None else tf.constant(sampler.pi_weights, tf.float64)

    return Drawer()


def test_what_a_drawer_reports_reaches_stats_pi_mixes_and_logs():
  batcher = tf_repulsive.repulsive_batch(3, EvenOdd(levels=(0.0, 10.0)), seed=0)
  stream = tf.data.Dataset.from_tensor_slices((np.arange(10.0)[:, None], np.zeros(10, np.int64))).apply(batcher)
  model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(2)])
  model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  history = model.fit(stream, epochs=1, steps_per_epoch=4, verbose=0,
                      callbacks=[tf_repulsive.AnnealingCallback(batcher)])
  assert batcher.stats().report == {"spread": 0.25}
  np.testing.assert_allclose(batcher.pi(4), [0.25, 0.75])
  # Even steps hold points 0, 1, 2 (parities 0, 1, 0); odd steps 7, 8, 9 (1, 0, 1).
  np.testing.assert_allclose(batcher.group_mixes([0, 1, 2]), [[2 / 3, 1 / 3], [1 / 3, 2 / 3], [2 / 3, 1 / 3]])
  logs = {key: values[0] for key, values in history.history.items() if key.startswith("sampler")}
  assert logs == pytest.approx({"sampler_fallback_batches": 0.0, "sampler_parity": 5.0, "sampler_parity_0": 0.5,
                                "sampler_parity_1": 0.5, "sampler_pi_parity": 7.5, "sampler_pi_0": 0.25,
                                "sampler_pi_1": 0.75})


@pytest.mark.parametrize("change, message", [
    ({"report": {"spread": "wide"}}, "report must map names"),
    ({"groups_name": "pi"}, "other than 'pi'"),
    ({"groups_name": "two words"}, "name for log keys"),
    ({"levels": (0.0,)}, r"of_points must be \[N\] = \[10\] integers in 0 ... 0"),
    ({"levels": (0.0, float("nan"))}, "levels must be"),
])
def test_a_report_or_groups_off_the_contract_fails_at_build(change, message):
  batcher = tf_repulsive.repulsive_batch(3, EvenOdd(**change), seed=0, start_step=0)
  with pytest.raises((TypeError, ValueError), match=message):
    tf.data.Dataset.from_tensor_slices(np.arange(10.0)).apply(batcher)


def test_pi_must_weigh_the_groups():
  batcher = tf_repulsive.repulsive_batch(3, EvenOdd(pi_weights=(1.0, 1.0, 1.0)), seed=0, start_step=0)
  tf.data.Dataset.from_tensor_slices(np.arange(10.0)).apply(batcher)
  with pytest.raises(ValueError, match=r"pi\(0\) must be \[G\] = \[2\] non-negative weights"):
    batcher.pi(0)


def test_build_must_return_a_batch_drawer():
  class NotADrawer(tf_repulsive.Sampler):
    def build(self, context):
      return lambda key, step: (tf.range(context.batch_size), tf.constant(0, tf.int32))

  batcher = tf_repulsive.repulsive_batch(2, NotADrawer(), seed=0, start_step=0)
  with pytest.raises(TypeError, match="must return a tf_repulsive.BatchDrawer"):
    tf.data.Dataset.from_tensor_slices(np.arange(10.0)).apply(batcher)


class ShiftedBlocks(tf_repulsive.Sampler):
  """Four steps per draw: step n is the k elements from n * k on (mod N), drawn side by side."""

  def __init__(self, steps_per_draw=4, wrong_shape=False):
    self.steps_per_draw = steps_per_draw
    self.wrong_shape = wrong_shape

  def build(self, context):
    num_points, k, sampler = context.features.shape[0], context.batch_size, self

    class Drawer(tf_repulsive.BatchDrawer):
      steps_per_draw = sampler.steps_per_draw

      def draw(self, key, first_step):
        del key
        steps = first_step + tf.range(self.steps_per_draw, dtype=tf.int64)
        indices = tf.cast((steps[:, None] * k + tf.range(k, dtype=tf.int64)) % num_points, tf.int32)
        if sampler.wrong_shape:
          return indices[0], tf.zeros([1], tf.int32)
        return indices, tf.zeros([self.steps_per_draw], tf.int32)

    return Drawer()


@pytest.mark.parametrize("start_step", [0, 6])
def test_a_drawer_of_several_steps_per_draw_gives_each_step_its_row(start_step):
  batcher = tf_repulsive.repulsive_batch(3, ShiftedBlocks(), seed=0, start_step=start_step)
  batches = tf.data.Dataset.from_tensor_slices(np.arange(50.0)).apply(batcher)
  seen = [batch.numpy() for batch in batches.take(7)]
  for offset, batch in enumerate(seen):
    step = start_step + offset
    np.testing.assert_array_equal(batch, (np.arange(3) + 3 * step) % 50)
    np.testing.assert_array_equal(batcher.batch_indices(step), batch.astype(int))
  assert batcher.stats().batches >= 7


def test_a_drawer_must_return_its_declared_shapes():
  batcher = tf_repulsive.repulsive_batch(3, ShiftedBlocks(wrong_shape=True), seed=0, start_step=0)
  with pytest.raises(ValueError, match=r"must return indices of shape \[steps_per_draw, batch_size\] = \[4, 3\]"):
    tf.data.Dataset.from_tensor_slices(np.arange(50.0)).apply(batcher)


def test_steps_per_draw_must_be_a_positive_int():
  batcher = tf_repulsive.repulsive_batch(3, ShiftedBlocks(steps_per_draw=0), seed=0, start_step=0)
  with pytest.raises(ValueError, match=r"Drawer.steps_per_draw` must be >= 1; got 0. It is the number of steps"):
    tf.data.Dataset.from_tensor_slices(np.arange(50.0)).apply(batcher)


class EvenThenOddSteps(tf_repulsive.Sampler):
  """Python control flow on tensors, which only AutoGraph turns into graph ops."""

  def build(self, context):
    num_points, k = context.features.shape[0], context.batch_size

    class Drawer(tf_repulsive.BatchDrawer):
      def draw(self, key, first_step):
        del key
        if first_step % 2 == 0:
          indices = tf.range(k)
        else:
          indices = num_points - 1 - tf.range(k)
        return indices[None], tf.zeros([1], tf.int32)

    return Drawer()


def test_a_drawer_with_python_control_flow_on_tensors_is_converted_by_autograph():
  batcher = tf_repulsive.repulsive_batch(3, EvenThenOddSteps(), seed=0, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices(np.arange(50.0)).apply(batcher)
  assert [batch.numpy().tolist() for batch in batches.take(3)] == [[0, 1, 2], [49, 48, 47], [0, 1, 2]]
  np.testing.assert_array_equal(batcher.batch_indices(1), [49, 48, 47])


@dataclasses.dataclass(frozen=True, eq=False)
class FirstPointsWithItsOwnTrace(tf_repulsive.Sampler):
  """The first k points at every step, with a traced function of the draw that counts its calls."""

  calls: list = dataclasses.field(default_factory=list)

  def build(self, context):
    k, calls = context.batch_size, self.calls

    class Drawer(tf_repulsive.BatchDrawer):
      def draw(self, key, first_step):
        del key, first_step
        return tf.range(k)[None], tf.zeros([1], tf.int32)

      def traced_draw(self):
        traced = tf.function(self.draw)

        def draw(key, first_step):
          calls.append(int(first_step))
          return traced(key, first_step)

        return draw

    return Drawer()


def test_a_drawer_s_own_traced_draw_serves_the_draws_outside_the_pipeline():
  sampler = FirstPointsWithItsOwnTrace()
  batcher = tf_repulsive.repulsive_batch(3, sampler, seed=0, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices(np.arange(50.0)).apply(batcher)
  assert [batch.numpy().tolist() for batch in batches.take(2)] == [[0, 1, 2], [0, 1, 2]]
  np.testing.assert_array_equal(batcher.batch_indices(7), [0, 1, 2])
  assert batcher.fallback_points(9) == 0
  assert sampler.calls == [0, 7, 9]  # the build's check of the first batch, then the two above


@dataclasses.dataclass(frozen=True, eq=False)
class RotatingWindow(tf_repulsive.Sampler):
  """Step n takes the points n, n + 1, ..., n + k - 1 (mod N); counts the traces of its draw."""

  traces: list = dataclasses.field(default_factory=list)

  def build(self, context):
    num_points, k, traces = context.features.shape[0], context.batch_size, self.traces

    class Drawer(tf_repulsive.BatchDrawer):
      def draw(self, key, first_step):
        del key
        traces.append(first_step.graph)  # Python runs once per trace
        return tf.cast((first_step + tf.range(k, dtype=tf.int64)) % num_points, tf.int32)[None], tf.zeros([1], tf.int32)

    return Drawer()


def test_a_drawer_without_its_own_trace_is_traced_once_for_the_stream_and_the_draws_outside_it():
  sampler = RotatingWindow()
  batcher = tf_repulsive.repulsive_batch(3, sampler, seed=0, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices(np.arange(10.0)).apply(batcher)
  delivered = [batch.numpy().tolist() for batch in batches.take(10)]
  assert delivered[:3] == [[0, 1, 2], [1, 2, 3], [2, 3, 4]] and delivered[9] == [9, 0, 1]
  np.testing.assert_array_equal(batcher.batch_indices(12), [2, 3, 4])
  assert len(sampler.traces) == 1


@dataclasses.dataclass(frozen=True, eq=False)
class FilledFirstPoints(tf_repulsive.Sampler):
  """The first k points, of which its own fill supplied the last; reports `report`."""

  report: dict = dataclasses.field(default_factory=dict)

  def build(self, context):
    k, report = context.batch_size, self.report

    class Drawer(tf_repulsive.BatchDrawer):
      def draw(self, key, first_step):
        del key, first_step
        return tf.range(k)[None], tf.ones([1], tf.int32)

    drawer = Drawer()
    drawer.report = report
    return drawer


@pytest.mark.parametrize("report", [{}, {"radius": 0.5}])
def test_a_first_batch_the_fill_completed_is_reported_and_only_disks_get_radius_advice(report):
  batcher = tf_repulsive.repulsive_batch(3, FilledFirstPoints(report), seed=0, start_step=0)
  with pytest.warns(RuntimeWarning, match=r"filled only 2 of 3 points of the first batch") as caught:
    tf.data.Dataset.from_tensor_slices(np.arange(10.0)).apply(batcher)
  assert ("pass radius=" in str(caught[0].message)) == ("radius" in report)
