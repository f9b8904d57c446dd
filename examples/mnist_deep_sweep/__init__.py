"""The Deep-MNIST experiment for several samplers and seeds: mean ± std table and mean curves."""
