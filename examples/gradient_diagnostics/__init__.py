"""Theorem-1 diagnostics of the Deep-MNIST CNN: the gradient-variance split and g(r) per sampler."""
