"""Speech Commands input: the TF tutorial's data index and split, MFCCs and augmentation in tf.

Mirrors tensorflow/examples/speech_commands/input_data.py: `prepare_words_list`, `which_set`, the
data index with `_silence_` and `_unknown_` entries, and the training-time augmentation (time shift,
background noise mixing). Differences, all deliberate:

* MFCCs come from `tf.signal` (STFT, 40-channel mel filterbank from 20 Hz to 4 kHz as the TF op's
  defaults, log, DCT) instead of the `audio_ops` kernels; the shapes (98 x 40 at the defaults) match.
* When the dataset has `validation_list.txt` / `testing_list.txt` (v0.02 does) they define the
  split, as the dataset's README prescribes; otherwise the TF tutorial's hash split.
* Silence entries are fixed background-noise clips (file, offset and volume drawn once per entry)
  in every partition. The TF tutorial feeds an all-zero clip to validation and testing and a fresh
  noise clip to training; a fixed clip per entry gives the sampler a real point in feature space for
  each silence entry and makes evaluation silence look like training silence. Training still mixes
  fresh noise into every silence example (see `augment`), as TF does.
* Augmentation works on a whole batch with stateless random ops, so it is TensorFlow graph code
  that can run after the mini-batch is drawn.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import pathlib
import random
import re
from typing import Sequence

import numpy as np
import tensorflow as tf

MAX_NUM_WAVS_PER_CLASS = 2**27 - 1  # ~134M
SILENCE_LABEL = "_silence_"
SILENCE_INDEX = 0
UNKNOWN_WORD_LABEL = "_unknown_"
UNKNOWN_WORD_INDEX = 1
BACKGROUND_NOISE_DIR_NAME = "_background_noise_"
RANDOM_SEED = 59185
SPLIT_LIST_FILES = {"validation": "validation_list.txt", "testing": "testing_list.txt"}
# Mel filterbank of TF's Mfcc op (filterbank_channel_count, lower/upper_frequency_limit).
MEL_CHANNELS = 40
MEL_LOWER_HZ = 20.0
MEL_UPPER_HZ = 4000.0
_LOG_FLOOR = 1e-12  # TF's Mfcc op's kFilterbankFloor


def prepare_words_list(wanted_words: Sequence[str]) -> list[str]:
  """The label list: `_silence_`, `_unknown_`, then the wanted words in the given order."""
  return [SILENCE_LABEL, UNKNOWN_WORD_LABEL, *wanted_words]


def which_set(filename: str, validation_percentage: float, testing_percentage: float) -> str:
  """The TF tutorial's stable split of a file: "training", "validation" or "testing".

  Everything from `_nohash_` on is ignored, so all clips of one speaker land in the same set;
  the SHA1 of the rest, as a percentage, decides. Adding files never moves existing ones.

  Args:
    filename: path of the wav; only its base name counts.
    validation_percentage: share of the data for validation, in percent.
    testing_percentage: share of the data for testing, in percent.

  Returns:
    The partition name.
  """
  base_name = pathlib.PurePath(filename).name
  hash_name = re.sub(r"_nohash_.*$", "", base_name)
  hash_name_hashed = hashlib.sha1(hash_name.encode("utf-8")).hexdigest()
  percentage_hash = ((int(hash_name_hashed, 16) % (MAX_NUM_WAVS_PER_CLASS + 1))
                     * (100.0 / MAX_NUM_WAVS_PER_CLASS))
  if percentage_hash < validation_percentage:
    return "validation"
  if percentage_hash < testing_percentage + validation_percentage:
    return "testing"
  return "training"


@dataclasses.dataclass(frozen=True)
class AudioSettings:
  """Clip and MFCC geometry (TF's `prepare_model_settings`)."""

  sample_rate: int = 16000
  clip_duration_ms: int = 1000
  window_size_ms: float = 30.0
  window_stride_ms: float = 10.0
  dct_coefficient_count: int = 40

  def __post_init__(self):
    if not 1 <= self.dct_coefficient_count <= MEL_CHANNELS:
      raise ValueError(f"dct_coefficient_count must be in [1, {MEL_CHANNELS}]; got "
                       f"{self.dct_coefficient_count}.")
    if self.spectrogram_length < 1:
      raise ValueError("window_size_ms is longer than clip_duration_ms.")

  @property
  def desired_samples(self) -> int:
    return int(self.sample_rate * self.clip_duration_ms / 1000)

  @property
  def window_size_samples(self) -> int:
    return int(self.sample_rate * self.window_size_ms / 1000)

  @property
  def window_stride_samples(self) -> int:
    return int(self.sample_rate * self.window_stride_ms / 1000)

  @property
  def spectrogram_length(self) -> int:
    length_minus_window = self.desired_samples - self.window_size_samples
    return -1 if length_minus_window < 0 else 1 + length_minus_window // self.window_stride_samples

  @property
  def feature_shape(self) -> tuple[int, int]:
    """(time frames, MFCC coefficients): (98, 40) at the TF defaults."""
    return self.spectrogram_length, self.dct_coefficient_count


def mfcc(waveforms: tf.Tensor, settings: AudioSettings) -> tf.Tensor:
  """MFCC features of `[..., desired_samples]` float waveforms: `[..., frames, coefficients]`."""
  stft = tf.signal.stft(waveforms, frame_length=settings.window_size_samples,
                        frame_step=settings.window_stride_samples)
  mel_matrix = tf.signal.linear_to_mel_weight_matrix(
      num_mel_bins=MEL_CHANNELS, num_spectrogram_bins=stft.shape[-1],
      sample_rate=settings.sample_rate, lower_edge_hertz=MEL_LOWER_HZ,
      upper_edge_hertz=MEL_UPPER_HZ)
  # TF's Mfcc op also sums FFT magnitudes (not powers) under the mel triangles.
  mel = tf.tensordot(tf.abs(stft), mel_matrix, 1)
  log_mel = tf.math.log(tf.maximum(mel, _LOG_FLOOR))
  return tf.signal.mfccs_from_log_mel_spectrograms(log_mel)[..., :settings.dct_coefficient_count]


@dataclasses.dataclass(frozen=True)
class Entry:
  """One example of the data index: a label id and its wav (None for `_silence_`)."""

  label: int
  path: pathlib.Path | None


@dataclasses.dataclass(frozen=True)
class DataIndex:
  """The examples of each partition and the label list."""

  words_list: list[str]
  partitions: dict[str, list[Entry]]
  split_source: str  # "lists" (validation_list.txt / testing_list.txt) or "hash"


def _read_split_lists(data_dir: pathlib.Path) -> dict[str, set[str]] | None:
  present = {subset: (data_dir / name) for subset, name in SPLIT_LIST_FILES.items()
             if (data_dir / name).exists()}
  if not present:
    return None
  if len(present) != len(SPLIT_LIST_FILES):
    missing = sorted(set(SPLIT_LIST_FILES.values()) - {path.name for path in present.values()})
    raise ValueError(
        f"{data_dir} has {', '.join(path.name for path in present.values())} but not "
        f"{', '.join(missing)}; provide both (they define the split) or neither (hash split).")
  return {subset: {line.strip() for line in path.read_text().splitlines() if line.strip()}
          for subset, path in present.items()}


def prepare_data_index(data_dir: str | pathlib.Path, wanted_words: Sequence[str],
                       silence_percentage: float, unknown_percentage: float,
                       validation_percentage: float, testing_percentage: float) -> DataIndex:
  """Finds the wavs and splits them; adds `_silence_` and `_unknown_` examples per partition.

  As in TF: every wav of a wanted word is used; each partition then gets
  ceil(size * silence_percentage / 100) silence entries and as many unknown-word wavs (a seeded
  shuffle of the non-wanted words' wavs of that partition) for unknown_percentage; each partition
  is shuffled with TF's fixed seed.

  Args:
    data_dir: root of the Speech Commands layout.
    wanted_words: target words; labels 2, 3, ... in this order.
    silence_percentage: silence entries per partition, in percent of its wanted-word wavs.
    unknown_percentage: unknown-word entries per partition, likewise.
    validation_percentage: hash split share (unused when the list files exist).
    testing_percentage: hash split share (unused when the list files exist).

  Returns:
    The `DataIndex`.

  Raises:
    ValueError: if there are no wavs, a wanted word has none, or only one list file exists.
  """
  data_dir = pathlib.Path(data_dir)
  rng = random.Random(RANDOM_SEED)
  wanted_index = {word: index + 2 for index, word in enumerate(wanted_words)}
  split_lists = _read_split_lists(data_dir)
  partitions: dict[str, list[Entry]] = {"validation": [], "testing": [], "training": []}
  unknown: dict[str, list[Entry]] = {"validation": [], "testing": [], "training": []}
  all_words = set()
  for wav_path in sorted(data_dir.glob("*/*.wav")):
    word = wav_path.parent.name.lower()
    if word == BACKGROUND_NOISE_DIR_NAME:
      continue
    all_words.add(word)
    if split_lists is None:
      subset = which_set(wav_path.name, validation_percentage, testing_percentage)
    else:
      relative = wav_path.relative_to(data_dir).as_posix()
      subset = next((name for name, files in split_lists.items() if relative in files), "training")
    if word in wanted_index:
      partitions[subset].append(Entry(wanted_index[word], wav_path))
    else:
      unknown[subset].append(Entry(UNKNOWN_WORD_INDEX, wav_path))
  if not all_words:
    raise ValueError(f"no .wav files found under {data_dir}/*/; point --data_dir at the Speech "
                     "Commands layout (one folder per word), or pass --generate to create one.")
  missing = [word for word in wanted_words if word not in all_words]
  if missing:
    raise ValueError(f"--wanted_words {', '.join(missing)} have no wavs in {data_dir}; found "
                     f"{', '.join(sorted(all_words))}.")
  for subset in ("validation", "testing", "training"):
    set_size = len(partitions[subset])
    silence_size = int(math.ceil(set_size * silence_percentage / 100))
    partitions[subset].extend(Entry(SILENCE_INDEX, None) for _ in range(silence_size))
    rng.shuffle(unknown[subset])
    unknown_size = int(math.ceil(set_size * unknown_percentage / 100))
    partitions[subset].extend(unknown[subset][:unknown_size])
  for subset in ("validation", "testing", "training"):
    rng.shuffle(partitions[subset])
  return DataIndex(words_list=prepare_words_list(wanted_words), partitions=partitions,
                   split_source="hash" if split_lists is None else "lists")


@dataclasses.dataclass(frozen=True)
class BackgroundNoise:
  """The `_background_noise_` wavs, concatenated so that graph code can slice any of them."""

  samples: np.ndarray  # [total] float32, all files back to back
  starts: np.ndarray  # [files] int64, where each file begins in `samples`
  lengths: np.ndarray  # [files] int64
  names: tuple[str, ...]


def _decode_wav(path: pathlib.Path) -> np.ndarray:
  audio, _ = tf.audio.decode_wav(tf.io.read_file(str(path)), desired_channels=1)
  return audio[:, 0].numpy()


def load_background_noise(data_dir: str | pathlib.Path, desired_samples: int) -> BackgroundNoise:
  """Reads `_background_noise_/*.wav`; each must be longer than one clip.

  Raises:
    ValueError: if there are none, or one is not longer than `desired_samples`.
  """
  paths = sorted((pathlib.Path(data_dir) / BACKGROUND_NOISE_DIR_NAME).glob("*.wav"))
  if not paths:
    raise ValueError(f"no background noise wavs in {pathlib.Path(data_dir) / BACKGROUND_NOISE_DIR_NAME}; "
                     "silence examples and noise augmentation need them (v0.02 has six).")
  clips = [_decode_wav(path) for path in paths]
  for path, clip in zip(paths, clips):
    if len(clip) <= desired_samples:
      raise ValueError(f"background noise {path} has {len(clip)} samples; it must be longer "
                       f"than a clip ({desired_samples}).")
  lengths = np.array([len(clip) for clip in clips], np.int64)
  return BackgroundNoise(samples=np.concatenate(clips).astype(np.float32),
                         starts=np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64),
                         lengths=lengths, names=tuple(path.name for path in paths))


def load_partition(entries: Sequence[Entry], noise: BackgroundNoise, settings: AudioSettings,
                   subset: str) -> tuple[np.ndarray, np.ndarray]:
  """Decodes a partition's wavs (padded / cut to one clip) and builds its silence clips.

  Silence entry j of `subset` is background noise from a file, offset and volume ~ U(0, 1)
  drawn from TF's seed, the partition and j: the same clip in every run.

  Args:
    entries: the partition from `prepare_data_index`.
    noise: the background noise.
    settings: clip geometry.
    subset: partition name (keys the silence clips).

  Returns:
    `[n, desired_samples]` float32 waveforms in [-1, 1] and `[n]` int64 label ids.
  """
  desired = settings.desired_samples
  paths = [str(entry.path) for entry in entries if entry.path is not None]
  decoded = np.zeros([0, desired], np.float32)
  if paths:
    decoded = np.concatenate(list(
        tf.data.Dataset.from_tensor_slices(paths)
        .map(lambda path: tf.audio.decode_wav(tf.io.read_file(path), desired_channels=1,
                                              desired_samples=desired)[0][:, 0],
             num_parallel_calls=tf.data.AUTOTUNE)
        .batch(512).as_numpy_iterator()))
  subset_key = int(hashlib.sha1(subset.encode()).hexdigest()[:8], 16)
  waveforms = np.empty([len(entries), desired], np.float32)
  wavs_read = 0
  for row, entry in enumerate(entries):
    if entry.path is not None:
      waveforms[row] = decoded[wavs_read]
      wavs_read += 1
      continue
    rng = np.random.default_rng([RANDOM_SEED, subset_key, row])
    file = int(rng.integers(len(noise.lengths)))
    offset = int(noise.starts[file] + rng.integers(noise.lengths[file] - desired))
    waveforms[row] = noise.samples[offset:offset + desired] * rng.uniform(0.0, 1.0)
  labels = np.array([entry.label for entry in entries], np.int64)
  return waveforms, labels


def time_shift(waveforms: tf.Tensor, shifts: tf.Tensor) -> tf.Tensor:
  """Shifts each row of `[batch, samples]` by `shifts[i]` samples (later if > 0), zero-filled."""
  samples = tf.shape(waveforms)[1]
  source = tf.range(samples)[tf.newaxis, :] - shifts[:, tf.newaxis]
  inside = (source >= 0) & (source < samples)
  gathered = tf.gather(waveforms, tf.clip_by_value(source, 0, samples - 1), batch_dims=1)
  return tf.where(inside, gathered, tf.zeros_like(gathered))


def augment(waveforms: tf.Tensor, labels: tf.Tensor, seed: tf.Tensor, noise: BackgroundNoise,
            time_shift_samples: int, background_frequency: float,
            background_volume_range: float) -> tf.Tensor:
  """TF's training augmentation for a batch, as stateless graph ops.

  Per example: shift by U{-time_shift_samples..time_shift_samples}; pick a background file and
  offset uniformly; mix the noise in at volume U(0, background_volume_range) with probability
  `background_frequency`, else not at all; silence examples are noise only, at volume U(0, 1);
  clip to [-1, 1].

  Args:
    waveforms: `[batch, samples]` float32.
    labels: `[batch]` int64 label ids.
    seed: `[2]` int seed of this batch's random draws.
    noise: the background noise.
    time_shift_samples: largest shift in samples.
    background_frequency: probability of mixing noise into a non-silence example.
    background_volume_range: largest noise volume for non-silence examples.

  Returns:
    The augmented `[batch, samples]` waveforms.
  """
  batch = tf.shape(waveforms)[0]
  samples = tf.shape(waveforms)[1]
  shift_seed, file_seed, offset_seed, mix_seed, volume_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed, 5))
  shifts = tf.random.stateless_uniform([batch], shift_seed, minval=-time_shift_samples,
                                       maxval=time_shift_samples + 1, dtype=tf.int32)
  shifted = time_shift(waveforms, shifts)

  lengths = tf.constant(noise.lengths)
  files = tf.random.stateless_uniform([batch], file_seed, maxval=len(noise.lengths), dtype=tf.int32)
  # Offsets in [0, length - samples), as TF's randint; float64 keeps them exact for long files.
  spans = tf.cast(tf.gather(lengths, files) - tf.cast(samples, tf.int64), tf.float64)
  offsets = tf.cast(tf.random.stateless_uniform([batch], offset_seed, dtype=tf.float64) * spans,
                    tf.int64)
  starts = tf.gather(tf.constant(noise.starts), files) + offsets
  positions = starts[:, tf.newaxis] + tf.range(tf.cast(samples, tf.int64))[tf.newaxis, :]
  background = tf.gather(tf.constant(noise.samples), positions)

  is_silence = tf.equal(labels, SILENCE_INDEX)
  volume_draw = tf.random.stateless_uniform([batch], volume_seed)
  mixed = tf.random.stateless_uniform([batch], mix_seed) < background_frequency
  volumes = tf.where(is_silence, volume_draw,
                     tf.where(mixed, volume_draw * background_volume_range, 0.0))
  foreground = tf.where(is_silence, 0.0, 1.0)
  return tf.clip_by_value(shifted * foreground[:, tf.newaxis] + background * volumes[:, tf.newaxis],
                          -1.0, 1.0)
