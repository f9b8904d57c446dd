"""Adaptive batch selection against tuned baselines: the protocol of docs/results/adaptive_density.md."""
