import numpy as np
import pytest
import tensorflow as tf
from sklearn import neighbors as sk_neighbors

import tf_repulsive
from tf_repulsive import _mingling


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


def test_clustered_search_ends_exhaustive_when_agreement_cannot_be_reached(clustered_search, monkeypatch):
  monkeypatch.setattr(_mingling, "_REQUIRED_AGREEMENT", 1.01)
  features, labels = _overlapping_classes(num_points=2500)
  result = _mingling.mingling_values(features, labels, 5)
  (probes, clusters), = clustered_search
  assert probes == clusters
  np.testing.assert_array_equal(result.values, _sklearn_mingling_values(features, labels, 5))
  assert result.agreement == 1.0


def test_stats_report_the_agreement_of_mingling_values(digits):
  features, labels = digits
  dataset = tf.data.Dataset.from_tensor_slices((features, labels))
  easy = tf_repulsive.repulsive_batch(20, tf_repulsive.EasyPDS(), seed=0, verbose=False)
  dataset.apply(easy)
  assert easy.stats().mingling_agreement == 1.0
  vanilla = tf_repulsive.repulsive_batch(20, tf_repulsive.VanillaPDS(), seed=0, verbose=False)
  dataset.apply(vanilla)
  assert vanilla.stats().mingling_agreement is None
