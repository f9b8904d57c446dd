import numpy as np
import pytest

import tf_repulsive


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
