"""The demo: the same classifier trained with uniform and with repulsive mini-batches."""
