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
# uv installs the environments: on a fresh machine 22 s against pip's 49 s for .venv, 3 s against
# 19 s for PyTorch (BUILD_NOTES.md, "Dependencies"). It compiles the modules as pip does: without
# that, the tests' processes compile them at first import, which costs more than it saves.
.venv/bin/python -m pip install -q --disable-pip-version-check "uv>=0.5"
uv=.venv/bin/uv
"$uv" pip install -q --compile-bytecode --python .venv/bin/python -e ".[cpu,datasets,examples,test]"
# Keras' PyTorch backend gets its own environment: PyPI's default torch (with CUDA libraries)
# crashes on import beside TensorFlow, its CPU build does not. .venv-torch is .venv plus that
# build (a .pth adds .venv's packages), for tests/integration/test_backends.py.
if [ ! -x .venv-torch/bin/python ]; then
  "$PYTHON" -m venv --without-pip .venv-torch
  site_packages=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  torch_site=$(.venv-torch/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "import site; site.addsitedir('$site_packages')" > "$torch_site/tf_repulsive_base.pth"
fi
# The CPU build is not on PyPI: it comes from where pip's configuration finds wheels on this
# machine (uv does not read pip's configuration).
find_links=()
for links in $(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true); do
  find_links+=(--find-links "$links")
done
if ! "$uv" pip install -q --compile-bytecode --python .venv-torch/bin/python "${find_links[@]}" \
    "torch==2.13.0+cpu"; then
  echo "note: PyTorch's CPU build (torch==2.13.0+cpu) could not be installed; the PyTorch-backend test skips" >&2
  rm -rf .venv-torch
fi
