"""Which disk radius: `tf_repulsive.diagnostics.radius_sweep` on the Deep-MNIST CNN and the digits."""
