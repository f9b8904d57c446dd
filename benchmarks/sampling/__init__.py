"""Per-batch sampling cost of Vanilla PDS in the paper's Table 1 setting, and pipeline throughput."""
