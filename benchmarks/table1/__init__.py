"""The paper's Table 1 side by side: seconds per mini-batch of k-DPP, fast k-DPP, PDS and uniform."""
