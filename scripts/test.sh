#!/usr/bin/env bash
# Sets up .venv, lints (ruff.toml), type-checks the package (mypy.ini), builds the API reference
# (docs/, warnings as errors) and checks that it documents every public name, checks that a wheel
# of the tree installs and imports in a fresh venv (scripts/check_wheel.sh), and runs the test
# suite with the docstrings' examples on two processes, a test module per process at a time
# (offline).
#
#   ./scripts/test.sh           the full suite (what CI runs)
#   ./scripts/test.sh --fast    the fast tier: no docs, no wheel, no test marked slow
#
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=false
if [ "${1:-}" = "--fast" ]; then
  fast=true
  shift
fi
./scripts/setup_env.sh
.venv/bin/ruff check .
.venv/bin/mypy
# --dist loadgroup: tests go to whichever process is free, except that a module marked with an
# xdist_group (one with costly module fixtures: servers, subprocess runs) runs in one process, so
# its fixtures are set up once. Spreading the other modules' tests evens out the two processes.
# --max-worker-restart=0: a process that crashes fails the run at once; pytest-xdist can wait
# forever after replacing a crashed process.
pytest=(.venv/bin/python -m pytest -q -n 2 --dist loadgroup --max-worker-restart=0)
if $fast; then
  exec "${pytest[@]}" -m "not slow" "$@"
fi
# -E: read every page again, so that a warning is never hidden by an earlier build's saved state.
.venv/bin/python -m sphinx -W --keep-going -q -E -b html docs docs/_build/html
.venv/bin/python scripts/check_api_docs.py docs/_build/html
./scripts/check_wheel.sh
exec "${pytest[@]}" "$@"
