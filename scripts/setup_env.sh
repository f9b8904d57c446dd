#!/usr/bin/env bash
# Creates .venv (if missing) and installs tf_repulsive with the CPU TensorFlow and all extras.
# Sourced by the other scripts; safe to run repeatedly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
# The speech example speaks its embedded dataset with espeak-ng and resamples it with sox.
if ! command -v espeak-ng >/dev/null || ! command -v sox >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox >/dev/null
  else
    echo "note: install espeak-ng and sox (apt-get install espeak-ng sox) for the speech example" >&2
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[cpu,datasets,examples,test]"
