"""examples/speech_commands: generated dataset, TF's split and labels, features, augmentation, training."""

import hashlib
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import wave

import keras
import numpy as np
import pytest
import tensorflow as tf

from examples import common
from examples import settings
from examples.speech_commands import input_data
from examples.speech_commands import models
from examples.speech_commands import summary
from examples.speech_commands import synthesis
from examples.speech_commands import train
from conftest import check_auto_radius
from conftest import draw_steps
import tf_repulsive

# Minutes of the full suite, not of the fast tier (`./scripts/test.sh --fast`).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_example_speech_commands")]

_REPO = pathlib.Path(__file__).resolve().parents[2]
_TOOLS_MISSING = shutil.which("espeak-ng") is None or shutil.which("sox") is None
needs_tools = pytest.mark.skipif(_TOOLS_MISSING, reason="espeak-ng and sox are needed to speak the dataset")

# A dataset small enough to speak in a second or two: 8 speakers, 3 targets, 2 unknown words.
# Generous validation / test shares and a seed whose speakers split 5 / 2 / 1.
_TINY = dict(num_speakers=8, target_words=("yes", "no", "up"), unknown_words=("cat", "dog"),
             unknown_words_per_speaker=1, max_repetitions=2, noise_seconds=3.0,
             validation_percentage=25.0, testing_percentage=25.0, seed=1)


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
  data_dir = tmp_path_factory.mktemp("speech") / "data"
  return data_dir, synthesis.generate(data_dir, synthesis.DatasetConfig(**_TINY))


def _tf_which_set(filename, validation_percentage, testing_percentage):
  """TensorFlow's input_data.which_set, restated from the tutorial."""
  base_name = os.path.basename(filename)
  hash_name = re.sub(r"_nohash_.*$", "", base_name)
  hashed = int(hashlib.sha1(hash_name.encode("utf-8")).hexdigest(), 16)
  percentage = (hashed % (2**27)) * (100.0 / (2**27 - 1))
  if percentage < validation_percentage:
    return "validation"
  if percentage < validation_percentage + testing_percentage:
    return "testing"
  return "training"


def _read_wav(path):
  with wave.open(str(path), "rb") as handle:
    params = handle.getparams()
    audio = np.frombuffer(handle.readframes(params.nframes), "<i2").astype(np.float64) / 32768.0
  return params, audio


@needs_tools
def test_generator_writes_the_v002_layout(tiny_dataset):
  data_dir, summary = tiny_dataset
  words = {"yes", "no", "up", "cat", "dog"}
  folders = {path.name for path in data_dir.iterdir() if path.is_dir()}
  assert folders - {"_background_noise_"} <= words
  assert {"yes", "no", "up", "_background_noise_"} <= folders
  clips = sorted(data_dir.glob("*/*.wav"))
  speech = [path for path in clips if path.parent.name != "_background_noise_"]
  assert len(speech) == summary.clips
  # Every speaker says every target word 1-2 times and one unknown word once.
  assert 8 * (3 + 1) <= len(speech) <= 8 * (2 * 3 + 1)
  for path in speech:
    assert re.fullmatch(r"[0-9a-f]{8}_nohash_\d+\.wav", path.name), path
    params, audio = _read_wav(path)
    assert (params.nchannels, params.sampwidth, params.framerate, params.nframes) == (1, 2, 16000, 16000)
    assert np.max(np.abs(audio)) > 0.2, f"{path} is (nearly) silent"
  noise = sorted((data_dir / "_background_noise_").glob("*.wav"))
  assert [path.stem for path in noise] == sorted(synthesis.NOISE_KINDS)
  for path in noise:
    params, audio = _read_wav(path)
    assert (params.nchannels, params.sampwidth, params.framerate, params.nframes) == (1, 2, 16000, 48000)
    assert 0.05 < np.sqrt(np.mean(audio**2)) < 0.2

  listed = {}
  for subset, name in (("validation", "validation_list.txt"), ("testing", "testing_list.txt")):
    for line in (data_dir / name).read_text().splitlines():
      assert (data_dir / line).exists(), line
      assert line not in listed
      listed[line] = subset
  for path in speech:
    relative = path.relative_to(data_dir).as_posix()
    assert listed.get(relative, "training") == _tf_which_set(relative, 25.0, 25.0)
  assert set(listed.values()) == {"validation", "testing"}


@needs_tools
def test_generator_is_deterministic_and_keeps_speakers_in_their_file_names(tiny_dataset, tmp_path):
  data_dir, _ = tiny_dataset
  small = dict(_TINY, num_speakers=2, target_words=("yes",), unknown_words=("cat",))
  synthesis.generate(tmp_path / "a", synthesis.DatasetConfig(**small))
  synthesis.generate(tmp_path / "b", synthesis.DatasetConfig(**small))
  files_a = sorted(path.relative_to(tmp_path / "a") for path in (tmp_path / "a").rglob("*.*"))
  assert files_a == sorted(path.relative_to(tmp_path / "b") for path in (tmp_path / "b").rglob("*.*"))
  for relative in files_a:
    assert (tmp_path / "a" / relative).read_bytes() == (tmp_path / "b" / relative).read_bytes()
  # The file-name hash is the speaker (voice, pitch, speed): the same prefixes as the first
  # two speakers of the 8-speaker draw with the same seed, and repetitions share it.
  speakers = synthesis.choose_speakers(8, seed=_TINY["seed"])
  assert len({speaker.hash_name for speaker in speakers}) == 8
  prefixes = {path.name.split("_nohash_")[0] for path in (tmp_path / "a" / "yes").glob("*.wav")}
  assert prefixes == {speaker.hash_name for speaker in speakers[:2]}
  speaker = speakers[0]
  assert speaker.hash_name == hashlib.sha1(
      f"{speaker.accent}+{speaker.variant}|p{speaker.pitch}|s{speaker.speed}".encode()).hexdigest()[:8]


@needs_tools
def test_speech_is_trimmed_and_resampled_to_16khz(tmp_path):
  raw = tmp_path / "raw.wav"
  subprocess.run(["espeak-ng", "-v", "en-us+m3", "-p", "50", "-s", "175", "-w", str(raw), "sheila"], check=True)
  with wave.open(str(raw), "rb") as handle:
    raw_rate, raw_frames = handle.getframerate(), handle.getnframes()
  # The same silence trimming at espeak's own rate (22.05 kHz), without resampling.
  trimmed = subprocess.run(["sox", str(raw), "-t", "f32", "-", "silence", "1", "0.01", "0.5%", "reverse",
                            "silence", "1", "0.01", "0.5%", "reverse"], check=True, capture_output=True).stdout
  trimmed_seconds = len(trimmed) / 4 / raw_rate
  assert 0.3 < trimmed_seconds < raw_frames / raw_rate
  speech = synthesis._speak("sheila", "en-us+m3", 50, 175, tmp_path / "scratch.wav")
  assert speech.dtype == np.float32
  assert abs(len(speech) / 16000 - trimmed_seconds) < 0.02 * trimmed_seconds
  assert not (tmp_path / "scratch.wav").exists()


def test_missing_tools_fail_with_the_fix(monkeypatch):
  monkeypatch.setattr(shutil, "which", lambda tool: None)
  with pytest.raises(RuntimeError, match=r"espeak-ng and sox not found.*apt-get install espeak-ng sox"):
    synthesis.check_tools()


def test_which_set_matches_the_tensorflow_tutorial():
  # Names shaped like the real dataset's; expected partitions by the tutorial's formula.
  rng = np.random.default_rng(0)
  names = [f"{word}/{rng.integers(2**32):08x}_nohash_{rng.integers(5)}.wav"
           for word in ("yes", "marvin", "_unknown_") for _ in range(700)]
  names += ["yes/0a7c2a8d_nohash_0.wav", "left/ffd2ba2f_nohash_4.wav", "go/c1d39ce8_nohash_8.wav"]
  got = [input_data.which_set(name, 10.0, 10.0) for name in names]
  assert got == [_tf_which_set(name, 10.0, 10.0) for name in names]
  shares = {subset: got.count(subset) / len(got) for subset in ("validation", "testing", "training")}
  assert abs(shares["validation"] - 0.1) < 0.03 and abs(shares["testing"] - 0.1) < 0.03
  # Hand-checked values of the formula, so that a shared mistake in both versions shows.
  # "0a7c2a8d": SHA1 mod 2**27 = 76284507, i.e. 56.836%.
  assert int(hashlib.sha1(b"0a7c2a8d").hexdigest(), 16) % 2**27 == 76284507
  assert input_data.which_set("/data/yes/0a7c2a8d_nohash_3.wav", 10.0, 10.0) == "training"
  assert input_data.which_set("yes/0a7c2a8d_nohash_0.wav", 56.9, 0.0) == "validation"
  assert input_data.which_set("yes/0a7c2a8d_nohash_0.wav", 56.8, 0.1) == "testing"
  assert input_data.which_set("yes/0a7c2a8d_nohash_0.wav", 56.8, 0.0) == "training"


def test_which_set_keeps_a_speakers_clips_together():
  for speaker in ("0a7c2a8d", "3cfc6b3a", "fb8c31a9", "12345678"):
    subsets = {input_data.which_set(f"{word}/{speaker}_nohash_{n}.wav", 30.0, 30.0)
               for word in ("yes", "no", "bed") for n in range(4)}
    assert len(subsets) == 1


def test_labels_are_silence_unknown_then_wanted_words_in_order():
  assert input_data.prepare_words_list(["up", "down", "yes"]) == ["_silence_", "_unknown_", "up", "down", "yes"]
  assert train.Config().wanted_words == ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
  assert len(input_data.prepare_words_list(train.Config().wanted_words)) == 12


@needs_tools
def test_data_index_labels_split_and_fill_ins(tiny_dataset, tmp_path):
  data_dir, _ = tiny_dataset
  # The list files decide, not the (different) hash percentages passed here.
  index = input_data.prepare_data_index(data_dir, ["up", "yes"], 20.0, 10.0, 5.0, 5.0)
  assert index.words_list == ["_silence_", "_unknown_", "up", "yes"]
  assert index.split_source == "lists"
  listed = {line: subset for subset in ("validation", "testing")
            for line in (data_dir / f"{subset}_list.txt").read_text().splitlines()}

  def subset_of(path):
    return listed.get(path.relative_to(data_dir).as_posix(), "training")

  other_words = [path for path in data_dir.glob("*/*.wav")
                 if path.parent.name not in ("up", "yes", "_background_noise_")]
  for subset, entries in index.partitions.items():
    known = [entry for entry in entries if entry.label >= 2]
    silence = [entry for entry in entries if entry.label == 0]
    unknown = [entry for entry in entries if entry.label == 1]
    assert known
    assert len(silence) == math.ceil(len(known) * 0.2)
    available = sum(1 for path in other_words if subset_of(path) == subset)
    assert len(unknown) == min(math.ceil(len(known) * 0.1), available)
    for entry in known + unknown:
      assert entry.label == {"up": 2, "yes": 3}.get(entry.path.parent.name, 1)
      assert subset_of(entry.path) == subset
    assert all(entry.path is None for entry in silence)
  # Without the list files, the hash split decides; with only one of them, it is an error.
  unlisted = tmp_path / "unlisted"
  shutil.copytree(data_dir, unlisted, ignore=shutil.ignore_patterns("*_list.txt"))
  hashed = input_data.prepare_data_index(unlisted, ["up"], 0.0, 0.0, 30.0, 20.0)
  assert hashed.split_source == "hash"
  for subset, entries in hashed.partitions.items():
    assert all(_tf_which_set(entry.path.name, 30.0, 20.0) == subset for entry in entries)
  (unlisted / "testing_list.txt").write_text("")
  with pytest.raises(ValueError, match="validation_list.txt"):
    input_data.prepare_data_index(unlisted, ["up"], 0.0, 0.0, 30.0, 20.0)


def test_mfcc_features_are_98_by_40():
  settings = input_data.AudioSettings()
  assert settings.feature_shape == (98, 40)
  time = np.arange(16000) / 16000
  tone = 0.5 * np.sin(2 * np.pi * 440 * time).astype(np.float32)
  features = input_data.mfcc(tf.constant(np.stack([tone, 0.1 * tone])), settings).numpy()
  assert features.shape == (2, 98, 40)
  assert np.all(np.isfinite(features))
  # Scaling the audio by 1/10 shifts every log-mel channel by log(10): only coefficient 0 moves,
  # by sqrt(2 * 40) * log(10) (tf.signal's DCT-II scaling).
  np.testing.assert_allclose(features[0, :, 0] - features[1, :, 0], np.sqrt(80) * np.log(10), rtol=1e-3)
  np.testing.assert_allclose(features[0, :, 1:], features[1, :, 1:], atol=1e-2)
  assert input_data.AudioSettings(window_stride_ms=20.0, dct_coefficient_count=13).feature_shape == (49, 13)


def _noise():
  samples = np.random.default_rng(1).normal(0, 0.1, 40000).astype(np.float32)
  return input_data.BackgroundNoise(samples=samples, starts=np.array([0, 20000]),
                                    lengths=np.array([20000, 20000]), names=("a.wav", "b.wav"))


def test_augment_shifts_mixes_noise_and_mutes_silence():
  noise = _noise()
  ramp = np.tile(np.linspace(-0.5, 0.5, 16000, dtype=np.float32), [4, 1])
  labels = tf.constant([0, 2, 3, 0], tf.int64)
  seed = tf.constant([3, 4], tf.int64)
  clean = input_data.augment(tf.constant(ramp), labels, seed, noise, 0, 0.0, 0.1).numpy()
  # Without shift and noise, words pass unchanged; silence is noise only, whatever the clip.
  np.testing.assert_array_equal(clean[1:3], ramp[1:3])
  muted = input_data.augment(tf.constant(ramp * 0), labels, seed, noise, 0, 0.0, 0.1).numpy()
  np.testing.assert_array_equal(clean[[0, 3]], muted[[0, 3]])
  assert np.all(np.std(clean[[0, 3]], axis=1) > 0)
  # Noise always mixed in: the difference is a noise slice at volume <= 0.1.
  noisy = input_data.augment(tf.constant(ramp), labels, seed, noise, 0, 1.0, 0.1).numpy()
  added = noisy[1:3] - ramp[1:3]
  assert np.all(np.std(added, axis=1) > 0) and np.all(np.std(added, axis=1) < 0.1 * 0.1 * 1.05)
  shifted = input_data.augment(tf.constant(ramp), labels, seed, noise, 1600, 0.8, 0.1).numpy()
  np.testing.assert_array_equal(
      shifted, input_data.augment(tf.constant(ramp), labels, seed, noise, 1600, 0.8, 0.1).numpy())
  assert not np.array_equal(
      shifted, input_data.augment(tf.constant(ramp), labels, tf.constant([3, 5], tf.int64), noise, 1600,
                                  0.8, 0.1).numpy())
  assert np.all(np.abs(shifted) <= 1.0)


def test_time_shift_moves_audio_later_for_positive_shifts():
  waveforms = tf.constant([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
  shifted = input_data.time_shift(waveforms, tf.constant([1, -2])).numpy()
  np.testing.assert_array_equal(shifted, [[0.0, 1.0, 2.0, 3.0], [3.0, 4.0, 0.0, 0.0]])


def test_learning_rate_stages_last_exactly_their_steps():
  schedule = train.learning_rate_schedule((3, 2, 1), (0.1, 0.01, 0.001))
  rates = [float(schedule(step)) for step in range(6)]
  np.testing.assert_allclose(rates, [0.1, 0.1, 0.1, 0.01, 0.01, 0.001])
  assert train.learning_rate_schedule((5,), (0.5,)) == 0.5


@pytest.mark.parametrize("name", ["speech_commands_smoke.flags", "speech_commands.flags",
                                  "speech_commands_long.flags"])
def test_flagfiles_parse(example_main, name):
  example_main("examples.speech_commands.main", f"--flagfile={_REPO / 'configs' / name}")
  config = settings.config_from_flags(train.Config)
  assert config.sampler in ("anneal_pds",)
  assert config.generate
  assert len(input_data.prepare_words_list(config.wanted_words)) == 12
  assert config.audio.feature_shape == (98, 40)
  assert config.total_steps <= (100 if "smoke" in name else 1000)
  assert config.radius is None
  example_main("examples.speech_commands.main", f"--flagfile={_REPO / 'configs' / name}", "--radius=51",
               "--feature_bin_count=13")
  config = settings.config_from_flags(train.Config)
  assert config.radius == 51.0 and config.dct_coefficient_count == 13


def _tiny_config(tiny_dataset, steps: tuple[int, int], sampler: str, **settings_) -> train.Config:
  data_dir, _ = tiny_dataset
  return train.Config(data_dir=str(data_dir), wanted_words=("yes", "no", "up"), how_many_training_steps=steps,
                      learning_rate=(0.001, 0.0001), eval_step_interval=3, batch_size=8, sampler=sampler,
                      validation_percentage=25.0, testing_percentage=25.0, seed=1, **settings_)


@needs_tools
def test_smoke_flagfile_run_trains_and_writes_its_outputs(example_main, tiny_dataset, tmp_path, capsys):
  data_dir, _ = tiny_dataset
  run = tmp_path / "run"
  program = example_main(
      "examples.speech_commands.main", f"--flagfile={_REPO / 'configs' / 'speech_commands_smoke.flags'}",
      f"--data_dir={data_dir}", "--wanted_words=yes,no,up", "--validation_percentage=25", "--testing_percentage=25",
      "--how_many_training_steps=4,2", "--eval_step_interval=3", "--batch_size=8", "--seed=1", f"--workdir={run}",
      "--verbose=0")
  program.main(["main"])
  assert "after 6 steps" in capsys.readouterr().out
  saved = json.loads((run / "results.json").read_text())
  assert saved["steps"] == 6 and saved["config"]["sampler"] == "anneal_pds"
  assert [row["step"] for row in saved["curve"]] == [0, 3, 6]
  for accuracy in (saved["validation_accuracy"], saved["test_accuracy"]):
    assert math.isfinite(accuracy) and 0.0 <= accuracy <= 1.0
  assert saved["radius"] > 0
  assert math.isclose(sum(saved["mingling_histogram"]), 1.0)
  assert len(saved["mingling_histogram"]) == 6
  lines = (run / "validation_curve.csv").read_text().splitlines()
  assert lines[0].split(",")[0] == "step" and "validation_accuracy" in lines[0] and len(lines) == 4
  assert (run / "validation_curve.png").read_bytes()[:4] == b"\x89PNG"
  assert list((run / "tensorboard" / "train").glob("events.out.tfevents.*"))
  assert list((run / "tensorboard" / "validation").glob("events.out.tfevents.*"))


@needs_tools
def test_active_bias_learns_on_the_mfcc_inputs(tiny_dataset, tmp_path):
  # Its per-epoch pass predicts on the clean MFCCs; on the stored waveforms the model would fail.
  result = train.train_and_evaluate(_tiny_config(tiny_dataset, (6, 3), "active_bias"), tmp_path / "run", verbose=0)
  assert result.steps == 9
  assert [row["step"] for row in result.curve] == [0, 3, 6, 9]


@needs_tools
def test_gradient_space_draws_on_the_models_gradients_of_the_clean_mfccs(tiny_dataset, tmp_path):
  """The features of refresh 0 are the initial model's gradient features of the clean clips' MFCCs."""
  config = _tiny_config(tiny_dataset, (4, 2), "vanilla_pds", radius="auto", space="gradient", refresh_every=6)
  result = train.train_and_evaluate(config, tmp_path / "run", verbose=0)
  assert result.steps == 6 and all(row["train_seconds"] > 0 for row in result.curve[1:])
  data_dir, _ = tiny_dataset
  index = input_data.prepare_data_index(
      data_dir, config.wanted_words, config.silence_percentage, config.unknown_percentage,
      config.validation_percentage, config.testing_percentage)
  noise = input_data.load_background_noise(data_dir, config.audio.desired_samples)
  waveforms, labels = input_data.load_partition(index.partitions["training"], noise, config.audio, "training")
  keras.utils.set_random_seed(config.seed)
  initial = models.create_conv_model(config.audio.feature_shape, len(index.words_list))
  expected = tf_repulsive.compute_features(tf_repulsive.GradientFeatures(seed=config.seed), initial,
                                         input_data.mfcc(tf.constant(waveforms), config.audio).numpy(), labels)
  with np.load(tmp_path / "run" / "refreshes" / "refresh-000000000.npz") as saved:
    np.testing.assert_allclose(saved["features"], expected, rtol=1e-4, atol=1e-6)


@needs_tools
def test_generate_data_program_writes_a_dataset(example_main, tmp_path, capsys):
  program = example_main("examples.speech_commands.generate_data", f"--data_dir={tmp_path}", "--num_speakers=2",
                         "--target_words=yes", "--unknown_words=cat", "--unknown_words_per_speaker=1",
                         "--max_repetitions=1", "--noise_seconds=1")
  program.main(["main"])
  assert "Wrote 4 clips of 2 words by 2 speakers" in capsys.readouterr().out
  assert len(list(tmp_path.glob("*/*.wav"))) == 4 + len(synthesis.NOISE_KINDS)


def test_dataset_config_checks_the_unknown_pool():
  with pytest.raises(ValueError, match="--unknown_words_per_speaker must be <= 2"):
    synthesis.DatasetConfig(unknown_words=("cat", "dog"), unknown_words_per_speaker=3)


def _fake_run(test_accuracy, curve, seconds_per_step=None):
  rows = [{"step": 10 * i, "validation_accuracy": value} for i, value in enumerate(curve)]
  if seconds_per_step is not None:
    rows = [{**row, "train_seconds": seconds_per_step * row["step"]} for row in rows]
  return {"validation_accuracy": curve[-1], "test_accuracy": test_accuracy, "steps": 20, "seconds": 120.0,
          "curve": rows,
          "partition_sizes": {"training": 30, "validation": 5, "testing": 5},
          "mingling_histogram": [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]}


def test_summary_pairs_each_sampler_with_uniform_by_seed():
  runs = {"vanilla_pds": {1: _fake_run(0.6, [0.1, 0.3, 0.5], 2.0), 2: _fake_run(0.8, [0.1, 0.25, 0.6], 3.0)},
          "uniform": {1: _fake_run(0.5, [0.1, 0.2, 0.3]), 2: _fake_run(0.6, [0.1, 0.2, 0.25])}}
  lines = summary.summary_table(runs, target_accuracy=0.3).splitlines()
  assert lines[2].startswith("| uniform | 2 (1,2) | 20 | 0.2750 ± 0.0354 | 0.5500 ± 0.0707 |")
  # Uniform reaches 0.3 on seed 1 only, and recorded no train seconds.
  assert "| 20, — | — |" in lines[2]
  # Paired test-accuracy differences 0.1 and 0.2; curve-mean differences 0.1 and 0.2; accuracy 0.3
  # at step 10 (20 s) and at step 20 (60 s).
  assert lines[3].startswith("| vanilla_pds | 2 (1,2) | 20 |")
  assert "| 0.1500 ± 0.0707 | 0.1167 ± 0.0236 | 10, 20 | 40.0 ± 28.3 (2/2) | 2.0 (2.0–2.0) |" in lines[3]


def test_mean_curves_refuse_runs_of_different_configs():
  runs = {"uniform": {1: _fake_run(0.5, [0.1, 0.2, 0.3]), 2: _fake_run(0.6, [0.1, 0.2, 0.3, 0.4])}}
  with pytest.raises(ValueError, match=r"seeds \[2\] were evaluated at other steps"):
    summary.mean_curves(runs)
  runs = {"uniform": {1: _fake_run(0.5, [0.1, 0.2]), 2: _fake_run(0.6, [0.3, 0.4])}}
  steps, mean, _ = summary.mean_curves(runs)["uniform"]
  np.testing.assert_allclose(mean, [0.2, 0.3])
  np.testing.assert_array_equal(steps, [0, 10])


@needs_tools
@pytest.mark.parametrize("sampler", ["vanilla_pds", "anneal_pds"])
def test_auto_radius_fills_the_batches_of_mfccs(tiny_dataset, sampler):
  data_dir, _ = tiny_dataset
  config = _tiny_config(tiny_dataset, (1, 1), sampler)
  index = input_data.prepare_data_index(
      data_dir, config.wanted_words, config.silence_percentage, config.unknown_percentage,
      config.validation_percentage, config.testing_percentage)
  noise = input_data.load_background_noise(data_dir, config.audio.desired_samples)
  waveforms, labels = input_data.load_partition(index.partitions["training"], noise, config.audio, "training")
  mfccs = input_data.mfcc(tf.constant(waveforms), config.audio).numpy().reshape(len(labels), -1)
  auto = common.make_sampler(sampler, radius="auto")
  batcher, batches = draw_steps(mfccs, labels, config.batch_size, auto)
  check_auto_radius(batcher, batches, auto)


def test_runs_at_other_radii_count_as_their_own_sampler(example_main, tmp_path, capsys):
  runs = [("uniform_seed1", "uniform", None, "input", 1), ("vanilla_pds_seed1", "vanilla_pds", None, "input", 1),
          ("r51_seed1", "vanilla_pds", 51.0, "input", 1), ("r51_seed2", "vanilla_pds", 51.0, "input", 2),
          ("gradient_seed1", "vanilla_pds", "auto", "gradient", 1),
          ("gradient_r100_seed1", "vanilla_pds", "auto", "gradient", 1)]
  for name, sampler, radius, space, seed in runs:
    (tmp_path / name).mkdir()
    result = {**_fake_run(0.5, [0.1, 0.2]), "config": {
        "sampler": sampler, "radius": radius, "space": space, "seed": seed,
        "refresh_every": 100 if "r100" in name else 50}}
    (tmp_path / name / "results.json").write_text(json.dumps(result))
  runs = summary.load_runs(tmp_path)
  assert {name: sorted(seeds) for name, seeds in runs.items()} == {
      "uniform": [1], "vanilla_pds": [1], "vanilla_pds@51.0": [1, 2], "vanilla_pds@auto@gradient@R50": [1],
      "vanilla_pds@auto@gradient@R100": [1]}
  program = example_main("examples.speech_commands.summarize", f"--runs_dir={tmp_path}")
  program.main(["summarize"])
  table = (tmp_path / "summary.md").read_text()
  assert table.startswith("Speech commands, 20 steps") and table in capsys.readouterr().out + "\n"
  assert "| vanilla_pds@51.0 | 2 (1,2) |" in table
  assert (tmp_path / "summary.png").stat().st_size > 0 and (tmp_path / "summary_curves.csv").exists()
