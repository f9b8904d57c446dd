#!/usr/bin/env bash
# Creates .venv (if missing) and installs tf_repulsive with the CPU TensorFlow and all extras.
# Sourced by the other scripts; safe to run repeatedly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
# The speech example speaks its embedded dataset with espeak-ng and resamples it with sox; the
# distributed tests run their servers in a private network namespace (unshare from util-linux,
# ip from iproute2).
if ! command -v espeak-ng >/dev/null || ! command -v sox >/dev/null || ! command -v ip >/dev/null \
    || ! command -v unshare >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox iproute2 util-linux >/dev/null
  else
    echo "note: install espeak-ng, sox (speech example) and iproute2 (distributed tests, as root)" >&2
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[cpu,datasets,examples,test]"
