"""The example programs of tf_repulsive, one package per example.

Each example package has a `main.py` that holds only its absl flags and calls a library module
(`train.py`, `sweep.py`, `benchmark.py` ...) whose entry point takes one settings dataclass. Run
them from the repository root:

  python -m examples.<example>.main --flagfile=configs/<example>.flags

`settings.py` turns a settings dataclass into flags; `common.py` holds what several examples use
(the sampler names and `make_sampler`, evaluation along training, mean ± std tables, plots,
timers).
"""

import os

# TensorFlow reads this when it is first imported. Python runs a package's `__init__` before any
# of its modules, so every example module is imported after this line and none has to set it
# before its own imports.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
