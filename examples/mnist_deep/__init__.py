"""The paper's MNIST experiment: the Deep-MNIST CNN trained with repulsive mini-batches."""
