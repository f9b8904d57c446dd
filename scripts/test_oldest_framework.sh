#!/usr/bin/env bash
# Runs the stream, checkpoint, callback and composition tests on the oldest releases the package
# claims (tf_repulsive/_framework.py): TensorFlow 2.16 with Keras 3.7, in .venv-oldest (needs
# PyPI). Prints the versions and pytest's summary; BUILD_NOTES.md records the last run.
#
#   ./scripts/test_oldest_framework.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv-oldest/bin/python ]; then
  "$PYTHON" -m venv .venv-oldest
fi
.venv-oldest/bin/python -m pip install -q --upgrade pip
# TensorFlow 2.16 needs numpy < 2. The package goes in without its dependencies, so that pip
# keeps these releases.
.venv-oldest/bin/python -m pip install -q "tensorflow-cpu==2.16.2" "keras==3.7.0" "numpy<2" "tqdm>=4.60" \
    "pytest>=9" "pytest-xdist>=3.5" "hypothesis>=6.100" "absl-py>=1.4" "scikit-learn>=1.3"
.venv-oldest/bin/python -m pip install -q --no-deps -e .
.venv-oldest/bin/python -c "import keras, tensorflow as tf; print('TensorFlow', tf.__version__, 'Keras', keras.__version__)"
exec .venv-oldest/bin/python -m pytest -q -n 2 --dist loadgroup --max-worker-restart=0 -p no:cacheprovider \
    tests/package/test_pipeline.py tests/integration/test_checkpoints.py tests/package/test_callback.py tests/integration/test_compositions.py "$@"
