#!/usr/bin/env bash
# Sets up .venv and runs the test suite (offline; a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup_env.sh
exec .venv/bin/python -m pytest -q "$@"
