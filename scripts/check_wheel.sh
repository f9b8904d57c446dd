#!/usr/bin/env bash
# Builds a wheel from the working tree, installs it with the `cpu` extra into a fresh venv and
# imports it there: catches what the editable install of .venv hides (a module or requirement the
# wheel lacks, a version setup.py reads wrongly). Run by scripts/test.sh, after scripts/setup_env.sh
# has put uv in .venv and TensorFlow's wheel in uv's cache: a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=.venv/bin/uv
expected=$(sed -n 's/^__version__ = "\([^"]*\)"$/\1/p' tf_repulsive/__init__.py)
if [ -z "$expected" ]; then
  echo "check_wheel: no __version__ = \"...\" line in tf_repulsive/__init__.py" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tf_repulsive_wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Build from a copy of the files git sees (tracked or new, not ignored), so that nothing stale in
# build/ or *.egg-info/ gets into the wheel.
mkdir "$work/src" "$work/dist" "$work/run"
git ls-files -z --cached --others --exclude-standard \
  | tar --null --files-from=- --ignore-failed-read -cf - | tar -xf - -C "$work/src"
"$uv" build -q --wheel -o "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/tf_repulsive-*.whl)
case "$(basename "$wheel")" in
  "tf_repulsive-$expected-"*) ;;
  *) echo "check_wheel: built $(basename "$wheel"), expected version $expected" >&2; exit 1 ;;
esac

# The venv without a pip of its own: uv installs into it. No byte-compiling either: the venv is
# thrown away after one import.
.venv/bin/python -m venv --without-pip "$work/venv"
"$uv" pip install -q --python "$work/venv/bin/python" "$wheel[cpu]"
"$uv" pip check -q --python "$work/venv/bin/python" >/dev/null
# From an empty directory, so that the import finds the installed wheel, not this checkout.
installed=$(cd "$work/run" && TF_CPP_MIN_LOG_LEVEL=2 "$work/venv/bin/python" -c '
import pathlib, sys, tf_repulsive
if not pathlib.Path(tf_repulsive.__file__).resolve().is_relative_to(pathlib.Path(sys.prefix).resolve()):
  sys.exit(f"imported {tf_repulsive.__file__}, not the installed wheel")
print(tf_repulsive.__version__)')
if [ "$installed" != "$expected" ]; then
  echo "check_wheel: the installed wheel reports version '$installed', expected '$expected'" >&2
  exit 1
fi
echo "check_wheel: $(basename "$wheel") installs with [cpu] into a fresh venv and imports (version $installed)."
