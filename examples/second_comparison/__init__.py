"""The second comparison of adaptive batch selection: docs/results/second_comparison.md."""
