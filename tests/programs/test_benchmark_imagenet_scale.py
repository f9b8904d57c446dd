"""benchmarks/imagenet_scale on small N: records sampled, images decoded after sampling."""

import pathlib

import numpy as np
import pytest
import tensorflow as tf

from examples import settings
from benchmarks.imagenet_scale import benchmark
import tf_repulsive

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = pytest.mark.slow

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


def test_flagfile_parses(example_main):
  example_main("benchmarks.imagenet_scale.main", f"--flagfile={CONFIGS / 'imagenet_scale.flags'}")
  config = settings.config_from_flags(benchmark.Config)
  assert (config.num_elements, config.feature_dim, config.batch_size) == (1_281_167, 128, 256)


def test_small_run_from_the_flagfile_measures_both_pipelines(example_main, tmp_path):
  example_main("benchmarks.imagenet_scale.main", f"--flagfile={CONFIGS / 'imagenet_scale.flags'}",
               "--num_elements=3000", "--num_files=20", "--feature_dim=8", "--batch_size=32", "--measure_batches=5")
  lines = []
  result = benchmark.benchmark(settings.config_from_flags(benchmark.Config), tmp_path, log=lines.append)
  assert len(list((tmp_path / "images").glob("*.png"))) == 20
  assert result.build_seconds > 0 and result.batches_per_second > 0 and result.baseline_batches_per_second > 0
  assert result.radius > 0
  assert lines[-1] == result.table() and "shuffle(N).batch(k).map(load)" in lines[-1]


def test_sampled_records_decode_to_their_own_images(tmp_path):
  config = benchmark.Config(num_elements=500, num_files=7, feature_dim=4, batch_size=16)
  paths = benchmark.write_images(tmp_path / "images", config.num_files)
  data = benchmark.records(config, paths)
  batcher = tf_repulsive.repulsive_batch(16, tf_repulsive.VanillaPDS(), seed=0, start_step=0)
  batches = tf.data.Dataset.from_tensor_slices(data).apply(batcher)
  images, labels = next(iter(batches.map(benchmark.load_batch)))
  indices = batcher.batch_indices(0)
  assert images.shape == (16, 32, 32, 3)
  np.testing.assert_array_equal(labels.numpy(), data["label"][indices])
  for image, index in zip(images.numpy(), indices):
    expected = tf.io.decode_png(tf.io.read_file(paths[index % len(paths)]), channels=3).numpy()
    np.testing.assert_array_equal(image, expected)
