import numpy as np
import pytest

import tf_repulsive

# The MNIST histogram of mingling values from the paper's appendix.
PAPER_H = np.array([0.9017, 0.0474, 0.0212, 0.013, 0.0096, 0.0071])


@pytest.mark.parametrize("n", [1, 10, 100, 172, 1000, 20000])
def test_matches_the_formula(n):
  expected = PAPER_H ** (1.0 / np.log(0.01 * n + 1.0))
  np.testing.assert_allclose(tf_repulsive.paper_schedule(PAPER_H, n).numpy(), expected / expected.sum(), rtol=1e-9)


def test_normalises_counts():
  np.testing.assert_allclose(tf_repulsive.paper_schedule(PAPER_H * 1000, 50).numpy(),
                             tf_repulsive.paper_schedule(PAPER_H, 50).numpy())


def test_limit_at_zero_is_the_mode():
  np.testing.assert_allclose(tf_repulsive.paper_schedule(PAPER_H, 0).numpy(), [1, 0, 0, 0, 0, 0])
  np.testing.assert_allclose(tf_repulsive.paper_schedule([0.4, 0.4, 0.2], 0).numpy(), [0.5, 0.5, 0.0])


def test_equals_h_when_exponent_is_one():
  n = 100 * (np.e - 1)  # log(0.01 n + 1) = 1; the nearest integers bracket h closely
  assert np.abs(tf_repulsive.paper_schedule(PAPER_H, int(round(n))).numpy() - PAPER_H).max() < 2e-3


def test_easy_share_decreases_and_hard_shares_increase():
  shares = np.array([tf_repulsive.paper_schedule(PAPER_H, n).numpy() for n in (0, 10, 100, 1000, 10000)])
  assert np.all(np.diff(shares[:, 0]) < 0)
  assert np.all(np.diff(shares[:, -1]) > 0)


def test_absent_values_keep_zero_probability():
  pi = tf_repulsive.paper_schedule([0.7, 0.0, 0.3], 5000).numpy()
  assert pi[1] == 0.0 and np.isclose(pi.sum(), 1.0)


@pytest.mark.parametrize("h", [[], [[0.5, 0.5]], [0.5, -0.1], [0.0, 0.0], [np.nan, 1.0]])
def test_rejects_bad_histograms(h):
  with pytest.raises(ValueError, match="`h`"):
    tf_repulsive.paper_schedule(h, 3)


def test_the_removed_name_names_the_schedule():
  with pytest.raises(AttributeError, match=r"paper_schedule\(h, n\)"):
    tf_repulsive.anneal_pi  # pylint: disable=pointless-statement


def test_rejects_bad_steps():
  with pytest.raises(ValueError, match="`n`"):
    tf_repulsive.paper_schedule(PAPER_H, -1).numpy()
  with pytest.raises(TypeError, match="`n`"):
    tf_repulsive.paper_schedule(PAPER_H, 1.5).numpy()
