#!/usr/bin/env bash
# Sets up .venv and runs the quickstart demo on scikit-learn's bundled digits (no internet).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup_env.sh
exec .venv/bin/python -m examples.quickstart.main "$@"
