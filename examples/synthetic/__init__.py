"""The paper's synthetic experiment (its figure 4): one mini-batch on a sine boundary, made quantitative."""
