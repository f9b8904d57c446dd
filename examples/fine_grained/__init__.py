"""The paper's fine-grained classification experiment (Oxford Flowers), on an offline stand-in."""
