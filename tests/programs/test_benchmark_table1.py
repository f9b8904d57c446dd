"""benchmarks/table1: the kernel of its outside reference (a run takes minutes; see BUILD_NOTES.md)."""

import numpy as np
import pytest

from benchmarks.table1 import benchmark

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow


def test_rbf_eigendecomposition_is_that_of_the_kernel():
  eigenvalues, eigenvectors = benchmark.rbf_eigendecomposition(np.array([[0.0, 0.0], [3.0, 4.0]]), bandwidth=5.0)
  kernel = (eigenvectors * eigenvalues) @ eigenvectors.T
  # exp(-|x - y|² / (2 bandwidth²)) = exp(-25 / 50) off the diagonal, 1 on it.
  np.testing.assert_allclose(kernel, [[1.0, np.exp(-0.5)], [np.exp(-0.5), 1.0]], atol=1e-12)


def test_both_tables_run_end_to_end_at_a_small_size(capsys):
  benchmark.benchmark(benchmark.Config(sizes=(5,), num_points=300, batches=1, scaling_sizes=(400,)))
  printed = capsys.readouterr().out
  for row in ("k-DPP", "Fast k-DPP", "PDS", "Uniform", "Table B"):
    assert row in printed
  # Table B's row for N = 400: N, preparation, CPU and wall ms per batch, fallback share.
  assert any(line.split()[:1] == ["400"] for line in printed.splitlines())
