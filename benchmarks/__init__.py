"""Benchmark programs: what the results pages measure, each run from the repository root.

  .venv/bin/python -m benchmarks.<name> [--flags]       one program per file here
  .venv/bin/python -m benchmarks.<name>.main [--flags]  imagenet_scale, sampling, table1

Each times its subject against a baseline in the same run (`shuffle(N).batch(k)`, uniform
sampling, or the same stream without the feature measured) and prints the ratio beside the
figures. `data.py` holds the synthetic datasets they share. Some time one stage of the stream on
its own and so import the private module that holds it; the rest use the public API only.
"""
