r"""The ImageNet-shaped pipeline: sample (path, label, features) records, decode images afterwards.

What users with image datasets keep in memory per element: the file path, the label and a small
feature vector (an embedding from a pretrained network, or a random projection). `repulsive_batch`
draws the batch from those records; the images of the sampled batch are then read and decoded by
a `map`, so only k images per step are ever decoded. `benchmark` builds that pipeline at
ImageNet's shape: `num_elements` records (default 1.28M) over `num_files` real PNG files on disk
(the digits, 32x32 RGB, paths repeated to reach N), `feature_dim`-d synthetic features (1000
classes, Gaussian clusters). It reports the build time, the peak memory of the build against the
records' size, and batches/s against `shuffle(N).batch(k).map(load)` on the same file list.
"""

from __future__ import annotations

import dataclasses
import gc
import pathlib
import time
from typing import Callable

import numpy as np
from sklearn import datasets as sk_datasets
import tensorflow as tf

from examples import common
from examples import settings
import tf_repulsive

_IMAGE_SIZE = 32
_NUM_CLASSES = 1000


@dataclasses.dataclass(frozen=True)
class Config(settings.Settings):
  """One run."""

  num_elements: int = settings.setting(1_281_167, "Records (ImageNet's training set: 1,281,167).", minimum=2)
  num_files: int = settings.setting(2000, "Distinct image files written to <workdir>/images.", minimum=1)
  feature_dim: int = settings.setting(128, "Dimension of the per-record feature vector.", minimum=1)
  sampler: str = settings.setting("vanilla_pds", "Mini-batch sampler.", choices=common.ALL_SAMPLER_NAMES)
  batch_size: int = settings.setting(256, "Mini-batch size k.", minimum=1)
  measure_batches: int = settings.setting(300, "Batches timed per pipeline.", minimum=1)
  seed: int = settings.setting(0, "Seed of the records and the batch draws.")

  def __post_init__(self):
    super().__post_init__()
    if self.batch_size > self.num_elements:
      raise ValueError(f"--batch_size ({self.batch_size}) must be <= --num_elements ({self.num_elements}).")


@dataclasses.dataclass(frozen=True)
class Result:
  """What `benchmark` measured (memory in bytes, times in seconds)."""

  record_bytes: int
  build_seconds: float
  build_peak_bytes: int
  first_batch_seconds: float
  batches_per_second: float
  baseline_first_batch_seconds: float
  baseline_batches_per_second: float
  radius: float | None

  def table(self) -> str:
    gib = 2**30
    return "\n".join([
        "| | records (GiB) | build (s) | build peak above baseline (GiB) | first batch (s) | batches/s |",
        "|---|---|---|---|---|---|",
        f"| repulsive_batch + map(load) | {self.record_bytes / gib:.2f} | {self.build_seconds:.1f} | "
        f"{self.build_peak_bytes / gib:.2f} | {self.first_batch_seconds:.2f} | {self.batches_per_second:.0f} |",
        f"| shuffle(N).batch(k).map(load) | | | | {self.baseline_first_batch_seconds:.2f} | "
        f"{self.baseline_batches_per_second:.0f} |"])


def write_images(data_dir: pathlib.Path, num_files: int) -> list[str]:
  """`num_files` PNGs of the digits (32x32 RGB, cycling through the 1797 images); their paths."""
  data_dir.mkdir(parents=True, exist_ok=True)
  images = sk_datasets.load_digits().images
  paths = []
  for index in range(num_files):
    path = data_dir / f"{index:06d}.png"
    if not path.exists():
      image = tf.image.resize(images[index % len(images)][..., None] / 16.0, [_IMAGE_SIZE, _IMAGE_SIZE])
      rgb = tf.cast(tf.round(255.0 * tf.repeat(image, 3, axis=-1)), tf.uint8)
      tf.io.write_file(str(path), tf.io.encode_png(rgb))
    paths.append(str(path))
  return paths


def records(config: Config, paths: list[str]) -> dict[str, np.ndarray]:
  """Path (repeated to N), a class label and a feature vector near the class's centre, per record."""
  rng = np.random.default_rng(config.seed)
  labels = rng.integers(0, _NUM_CLASSES, config.num_elements)
  centres = rng.normal(size=(_NUM_CLASSES, config.feature_dim)).astype(np.float32)
  features = centres[labels]
  features += 0.5 * rng.standard_normal(features.shape, dtype=np.float32)
  return {"path": np.asarray(paths, dtype=object)[np.arange(config.num_elements) % len(paths)].astype(bytes),
          "label": labels, "features": features}


def load_batch(batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
  """The decoded images of a batch of records (uint8 [k, 32, 32, 3]) and their labels."""
  images = tf.map_fn(lambda path: tf.io.decode_png(tf.io.read_file(path), channels=3), batch["path"],
                     fn_output_signature=tf.TensorSpec([_IMAGE_SIZE, _IMAGE_SIZE, 3], tf.uint8))
  return images, batch["label"]


def _resident_bytes(field: str) -> int:
  with open("/proc/self/status") as status:
    for line in status:
      if line.startswith(field + ":"):
        return 1024 * int(line.split()[1])
  raise KeyError(field)


def _timed_batches(dataset: tf.data.Dataset, count: int) -> tuple[float, float]:
  """Seconds to the first batch of a new iterator, then batches/s over `count` more."""
  start = time.perf_counter()
  iterator = iter(dataset)
  next(iterator)
  first = time.perf_counter() - start
  wall, _ = common.seconds_per_element(iterator, count)
  return first, 1.0 / wall


def benchmark(config: Config, workdir: str | pathlib.Path, log: Callable[[str], None] = print) -> Result:
  """Builds both pipelines over the same records and measures them.

  Args:
    config: the run.
    workdir: the image files go to `workdir/images` (written once, reused by later runs).
    log: receives the progress lines and the result table.

  Returns:
    The measurements.
  """
  paths = write_images(pathlib.Path(workdir) / "images", config.num_files)
  data = records(config, paths)
  record_bytes = sum(int(array.nbytes) for array in data.values())
  log(f"{config.num_elements:,} records ({record_bytes / 2**30:.2f} GiB) over {len(paths)} image files; "
      f"{config.sampler}, k = {config.batch_size}")
  dataset = tf.data.Dataset.from_tensor_slices(data)
  gc.collect()
  baseline = _resident_bytes("VmRSS")
  measure_peak = pathlib.Path("/proc/self/clear_refs").exists()
  if measure_peak:
    pathlib.Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current size
  start = time.perf_counter()
  batcher = tf_repulsive.repulsive_batch(config.batch_size, common.make_sampler(config.sampler), seed=config.seed,
                                         start_step=0)
  batches = dataset.apply(batcher)
  build_seconds = time.perf_counter() - start
  build_peak = _resident_bytes("VmHWM") - baseline if measure_peak else -1
  images = batches.map(load_batch, num_parallel_calls=tf.data.AUTOTUNE)
  first, rate = _timed_batches(images, config.measure_batches)
  shuffled = (dataset.shuffle(config.num_elements, seed=config.seed).batch(config.batch_size)
              .map(load_batch, num_parallel_calls=tf.data.AUTOTUNE).repeat())
  baseline_first, baseline_rate = _timed_batches(shuffled, config.measure_batches)
  result = Result(record_bytes=record_bytes, build_seconds=build_seconds, build_peak_bytes=build_peak,
                  first_batch_seconds=first, batches_per_second=rate, baseline_first_batch_seconds=baseline_first,
                  baseline_batches_per_second=baseline_rate, radius=batcher.stats().report.get("radius"))
  log(result.table())
  return result
