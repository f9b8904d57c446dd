#!/usr/bin/env bash
# Creates .venv (if missing) and installs tf_repulsive with the CPU TensorFlow and all extras.
# Sourced by the other scripts; safe to run repeatedly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[cpu,datasets,examples,test]"
