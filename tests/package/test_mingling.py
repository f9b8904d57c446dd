import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf
from sklearn import neighbors as sk_neighbors

import tf_repulsive
from tf_repulsive import _mingling
from tf_repulsive import diagnostics


def _brute_force_mingling(features, labels, neighbors):
  """Counts with a full distance sort; ties broken by index like a stable argsort."""
  distances = np.sqrt(((features[:, None] - features[None]) ** 2).sum(-1))
  np.fill_diagonal(distances, np.inf)
  order = np.argsort(distances, axis=1, kind="stable")[:, :neighbors]
  return (labels[order] != labels[:, None]).mean(axis=1)


def test_matches_brute_force_on_random_points():
  rng = np.random.default_rng(0)
  features = rng.normal(size=(300, 4))
  labels = rng.integers(0, 3, 300)
  for neighbors in (1, 5, 12):
    np.testing.assert_allclose(
        tf_repulsive.mingling_index(features, labels, neighbors),
        _brute_force_mingling(features, labels, neighbors))


def test_matches_brute_force_on_digits(digits):
  features, labels = digits
  np.testing.assert_allclose(
      tf_repulsive.mingling_index(features[:500], labels[:500], 5),
      _brute_force_mingling(features[:500].astype(np.float64), labels[:500], 5))


def test_matches_brute_force_when_candidates_come_in_many_blocks(monkeypatch):
  # Small blocks: after the first few, a row's nearer candidates are few and take the gathered
  # path of `_keep_nearest` instead of the selection over the whole block.
  monkeypatch.setattr(_mingling, "_CANDIDATE_BLOCK", 64)
  rng = np.random.default_rng(1)
  features = rng.normal(size=(1200, 3))
  labels = rng.integers(0, 3, 1200)
  np.testing.assert_allclose(tf_repulsive.mingling_index(features, labels, 5),
                             _brute_force_mingling(features, labels, 5))


def test_excludes_the_point_itself_even_among_duplicates():
  # Three copies of a point of class 0 next to far-away class-1 points: each copy's nearest
  # neighbours are the two other copies, never itself.
  features = np.array([[0.0], [0.0], [0.0], [10.0], [11.0], [12.0]])
  labels = np.array([0, 0, 0, 1, 1, 1])
  np.testing.assert_allclose(tf_repulsive.mingling_index(features, labels, 2), 0.0)
  np.testing.assert_allclose(tf_repulsive.mingling_index(features, labels, 3)[:3], 1 / 3)


def test_values_are_multiples_of_one_over_k():
  rng = np.random.default_rng(1)
  values = tf_repulsive.mingling_index(rng.normal(size=(200, 2)), rng.integers(0, 2, 200), 5)
  np.testing.assert_allclose(values * 5, np.round(values * 5))


@pytest.mark.parametrize("neighbors", [0, 10])
def test_rejects_neighbors_outside_range(neighbors):
  with pytest.raises(ValueError, match="neighbors"):
    tf_repulsive.mingling_index(np.zeros((10, 2)), np.zeros(10, np.int64), neighbors)


def test_rejects_float_labels():
  with pytest.raises(TypeError, match="labels"):
    tf_repulsive.mingling_index(np.zeros((10, 2)), np.zeros(10), 3)


def test_rejects_mismatched_labels():
  with pytest.raises(ValueError, match="labels"):
    tf_repulsive.mingling_index(np.zeros((10, 2)), np.zeros(9, np.int64), 3)


def _overlapping_classes(num_points=6000, dim=8, seed=0):
  """Classes of 4 Gaussian blobs each whose blobs overlap: mingling values spread over 0..K."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 5, num_points)
  centres = rng.normal(0.0, 1.0, (5, 4, dim))
  features = centres[labels, rng.integers(0, 4, num_points)] + rng.normal(0.0, 0.45, (num_points, dim))
  return features.astype(np.float32), labels


def _sklearn_mingling_values(features, labels, neighbors):
  """K times the mingling index by scikit-learn's exhaustive search (points without duplicates)."""
  _, nearest = sk_neighbors.NearestNeighbors(n_neighbors=neighbors + 1).fit(features).kneighbors(features)
  assert np.all(nearest[:, 0] == np.arange(len(features)))
  return (labels[nearest[:, 1:]] != labels[:, None]).sum(axis=1)


@pytest.fixture
def clustered_search(monkeypatch):
  """Forces the clustered search on small data; records how many clusters each point searched."""
  monkeypatch.setattr(_mingling, "_EXHAUSTIVE_BUDGET", 0)
  searched = []
  original = _mingling._Clusters.nearest_neighbors

  def recording(clusters, probes, progress):
    searched.append((probes, len(clusters)))
    return original(clusters, probes, progress)

  monkeypatch.setattr(_mingling._Clusters, "nearest_neighbors", recording)
  return searched


def test_clustered_search_agrees_with_the_exhaustive_one(clustered_search):
  features, labels = _overlapping_classes()
  exhaustive = _sklearn_mingling_values(features, labels, 5)
  assert 0.1 < np.mean(exhaustive == 0) < 0.9  # not an easy case: most points see other labels
  result = _mingling.mingling_values(features, labels, 5)
  (probes, clusters), = clustered_search
  assert probes < clusters / 2  # it did not search everything
  actual = np.mean(result.values == exhaustive)
  assert result.agreement >= 0.99 and actual >= 0.98
  assert abs(result.agreement - actual) < 0.01  # the subsample estimate is honest
  again = _mingling.mingling_values(features, labels, 5)
  np.testing.assert_array_equal(again.values, result.values)  # a function of the data only


def test_clustered_search_in_chunks_of_points_finds_what_one_pass_finds(clustered_search, monkeypatch):
  """Memory: the search holds the (point, cluster) pairs of a chunk of points, not of all N."""
  features, labels = _overlapping_classes()
  whole = _mingling.mingling_values(features, labels, 5)
  (probes, _), = clustered_search
  assert len(features) * probes <= _mingling._SEARCHED_PAIRS  # one chunk
  monkeypatch.setattr(_mingling, "_SEARCHED_PAIRS", 7 * probes + 3)  # chunks of 7 points
  chunked = _mingling.mingling_values(features, labels, 5)
  np.testing.assert_array_equal(chunked.values, whole.values)
  assert chunked.agreement == whole.agreement


def test_clustered_search_work_is_bounded_and_says_what_it_found(clustered_search, monkeypatch):
  features, labels = _overlapping_classes()
  num_points, dim = features.shape
  clusters = int(round(_mingling._CLUSTERS_PER_ROOT * np.sqrt(num_points)))
  # Work for 2 clusters per point, fewer than the agreement wanted needs here.
  monkeypatch.setattr(_mingling, "_SEARCH_WORK", 2.5 * num_points * num_points * dim / clusters)
  with pytest.warns(UserWarning, match=r"stopped at 2 of \d+ clusters.*agree with an exhaustive search on \d+%"):
    result = _mingling.mingling_values(features, labels, 5)
  (probes, _), = clustered_search
  assert probes == 2 and result.agreement < 0.99
  actual = np.mean(result.values == _sklearn_mingling_values(features, labels, 5))
  assert abs(result.agreement - actual) < 0.03  # the figure reported is the values' agreement


def test_clustered_search_ends_exhaustive_when_agreement_cannot_be_reached(clustered_search, monkeypatch):
  monkeypatch.setattr(_mingling, "_REQUIRED_AGREEMENT", 1.01)
  features, labels = _overlapping_classes(num_points=2500)
  result = _mingling.mingling_values(features, labels, 5)
  (probes, clusters), = clustered_search
  assert probes == clusters
  np.testing.assert_array_equal(result.values, _sklearn_mingling_values(features, labels, 5))
  assert result.agreement == 1.0


@pytest.mark.slow
def test_stats_report_the_agreement_of_mingling_values(digits):
  features, labels = digits
  dataset = tf.data.Dataset.from_tensor_slices((features, labels))
  easy = tf_repulsive.repulsive_batch(20, tf_repulsive.EasyPDS(), seed=0,
                                      options=tf_repulsive.BatcherOptions(verbose=False))
  dataset.apply(easy)
  assert easy.stats().report["mingling_agreement"] == 1.0 and "target_gap" not in easy.stats().report
  vanilla = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  dataset.apply(vanilla)
  assert set(vanilla.stats().report) == {"radius"}


# The regression analogue: a neighbour counts when its target is farther than a quantile of all gaps.

def _brute_force_target_values(features, targets, neighbors, quantile):
  """K times the regression mingling index with scikit-learn's exhaustive search, and the threshold."""
  _, nearest = sk_neighbors.NearestNeighbors(n_neighbors=neighbors + 1).fit(features).kneighbors(features)
  assert np.all(nearest[:, 0] == np.arange(len(features)))
  gaps = np.abs(targets[nearest[:, 1:]] - targets[:, None])
  threshold = np.quantile(gaps, quantile)
  return (gaps > threshold).sum(axis=1), threshold, gaps


def _noisy_step(num_points=3000, dim=2, seed=0):
  """Points in [-1, 1]^dim whose target steps by 1 at x0 = 0, plus noise of scale 0.05."""
  rng = np.random.default_rng(seed)
  features = rng.uniform(-1, 1, (num_points, dim)).astype(np.float32)
  targets = (features[:, 0] > 0).astype(np.float64) + 0.05 * rng.standard_normal(num_points)
  return features, targets


@hypothesis.settings(max_examples=20, deadline=None, derandomize=True, database=None)
@hypothesis.given(num_points=st.integers(20, 400), neighbors=st.integers(1, 8), quantile=st.floats(0.05, 0.95),
                  seed=st.integers(0, 2**16))
def test_target_values_count_the_gaps_beyond_the_quantile(num_points, neighbors, quantile, seed):
  features, targets = _noisy_step(num_points, dim=3, seed=seed)
  result = _mingling.mingling_values(features, targets, neighbors, target_gap_quantile=quantile)
  expected, threshold, gaps = _brute_force_target_values(features, targets, neighbors, quantile)
  np.testing.assert_array_equal(result.values, expected)
  assert result.target_gap == pytest.approx(threshold)
  # A share 1 - q of the neighbour pairs count, up to one pair and the pairs tied at the threshold
  # (mutual neighbours share a gap).
  pairs = num_points * neighbors
  assert result.values.sum() <= (1 - quantile) * pairs + 1
  assert np.sum(gaps >= result.target_gap) >= (1 - quantile) * pairs - 1


def test_target_values_are_high_beside_the_step_and_low_away_from_it():
  features, targets = _noisy_step()
  index = tf_repulsive.mingling_index(features, targets, 5, target_gap_quantile=0.9)
  beside = np.abs(features[:, 0]) < 0.02
  away = np.abs(features[:, 0]) > 0.2
  # Away from the step the counted pairs are the noise's largest gaps (about 1 - q of all pairs).
  assert index[beside].mean() > 0.3 and index[away].mean() < 0.12
  assert index[beside].mean() > 3 * index[away].mean()


def test_integer_targets_count_like_classes_when_the_threshold_is_zero(digits):
  features, labels = digits
  # Most neighbour pairs share the digit, so the 0.5 quantile of the gaps is 0: any other digit counts.
  as_targets = _mingling.mingling_values(features, labels.astype(np.float64), 5, target_gap_quantile=0.5)
  assert as_targets.target_gap == 0.0
  np.testing.assert_array_equal(as_targets.values, _mingling.mingling_values(features, labels, 5).values)


def test_clustered_search_of_target_values_agrees_with_the_exhaustive_one(clustered_search):
  features, targets = _noisy_step(num_points=6000, dim=8)
  exhaustive, threshold, _ = _brute_force_target_values(features, targets, 5, 0.9)
  result = _mingling.mingling_values(features, targets, 5, target_gap_quantile=0.9)
  (probes, clusters), = clustered_search
  assert probes < clusters
  assert result.target_gap == pytest.approx(threshold, rel=0.02)
  actual = np.mean(result.values == exhaustive)
  assert result.agreement >= 0.99 and actual >= 0.98


@pytest.mark.parametrize("quantile,error", [(0.0, ValueError), (1.0, ValueError), (-0.5, ValueError),
                                            ("0.9", TypeError)])
def test_rejects_a_target_gap_quantile_outside_zero_one(quantile, error):
  with pytest.raises(error, match="target_gap_quantile"):
    tf_repulsive.mingling_index(np.zeros((10, 2)), np.arange(10.0), 3, target_gap_quantile=quantile)
  with pytest.raises(error, match="target_gap_quantile"):
    tf_repulsive.EasyPDS(target_gap_quantile=quantile)


def test_rejects_targets_that_are_not_finite_real_values():
  with pytest.raises(ValueError, match="NaN or infinite"):
    tf_repulsive.mingling_index(np.zeros((10, 2)), np.full(10, np.nan), 3, target_gap_quantile=0.9)
  with pytest.raises(TypeError, match="real-valued"):
    tf_repulsive.mingling_index(np.zeros((10, 2)), np.array(["a"] * 10), 3, target_gap_quantile=0.9)


def _step_dataset(num_points=3000):
  features, targets = _noisy_step(num_points)
  return features, targets, tf.data.Dataset.from_tensor_slices((features, targets.astype(np.float32)))


def test_dense_pds_on_targets_draws_only_the_values_pi_weights():
  features, targets, dataset = _step_dataset()
  batcher = tf_repulsive.repulsive_batch(20,
                                         tf_repulsive.DensePDS([0, 1, 1, 1, 1, 1], radius=0.0, target_gap_quantile=0.9),
                                         seed=0, start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  stream = iter(dataset.apply(batcher))
  values = batcher.drawer.groups.of_points
  assert batcher.stats().report["target_gap"] > 0
  for step in range(5):
    x, y = next(stream)
    indices = batcher.batch_indices(step)
    np.testing.assert_array_equal(x.numpy(), features[indices])
    assert y.dtype == tf.float32  # the elements are delivered as they are; only the marks are float64
    assert np.all(values[indices] >= 1)


@pytest.mark.slow
def test_easy_pds_on_targets_favours_the_points_beside_the_step():
  features, _, dataset = _step_dataset()
  batcher = tf_repulsive.repulsive_batch(30, tf_repulsive.EasyPDS(radius="auto", target_gap_quantile=0.9), seed=0,
                                         start_step=0,
                                         options=tf_repulsive.BatcherOptions(verbose=False))
  dataset.apply(batcher)
  beside = np.abs(features[:, 0]) < 0.05
  drawn = diagnostics.draw_batches(batcher, 100).ravel()
  share, expected = beside[drawn].mean(), beside.mean()
  # Uniform batches hold the points beside the step at their share of the data, with a standard
  # error of sqrt(p (1 - p) / n) (batches are without replacement, so at most that).
  assert (share - expected) / np.sqrt(expected * (1 - expected) / len(drawn)) > 5


@pytest.mark.parametrize("targets,error,match", [
    (np.zeros((100, 2), np.float32), ValueError, "one regression target per element"),
    (np.array(["a"] * 100), TypeError, "real-valued regression target"),
    (np.zeros(100, np.float32), ValueError, "at least two values"),
])
def test_regression_samplers_refuse_targets_they_cannot_use(targets, error, match):
  features = np.random.default_rng(0).normal(size=(100, 2)).astype(np.float32)
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.EasyPDS(target_gap_quantile=0.9), seed=0, start_step=0)
  with pytest.raises(error, match=match):
    tf.data.Dataset.from_tensor_slices((features, targets)).apply(batcher)


def test_class_samplers_name_the_quantile_for_float_targets():
  features, targets, dataset = _step_dataset(200)
  batcher = tf_repulsive.repulsive_batch(10, tf_repulsive.AnnealPDS(), seed=0, start_step=0)
  with pytest.raises(TypeError, match="target_gap_quantile"):
    dataset.apply(batcher)
