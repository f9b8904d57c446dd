"""pytest reads this first, before any test module imports TensorFlow: quiet its C++ logging."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
