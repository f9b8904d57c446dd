#!/usr/bin/env bash
# Sets up .venv, lints (ruff.toml), type-checks the package (mypy.ini) and runs the test suite with
# the docstrings' examples (offline; about ten minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup_env.sh
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
