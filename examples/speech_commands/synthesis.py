"""A small Speech Commands dataset spoken by espeak-ng, in exactly the v0.02 layout.

Layout written under `data_dir` (as in speech_commands_v0.02.tar.gz):

  <word>/<speaker>_nohash_<n>.wav    16 kHz mono 16-bit PCM, exactly 1 s
  _background_noise_/<name>.wav     long noise recordings for mixing and for `_silence_`
  validation_list.txt, testing_list.txt   "<word>/<file>.wav" per line, from `which_set`

A "speaker" is an espeak-ng voice (accent + voice variant) at one pitch and speed; its hash names
the files, so the hash split keeps all clips of a speaker in one partition, as in the real data.
Repetitions `_nohash_<n>` of a word by one speaker jitter pitch, speed, position, loudness and
room noise a little. Every random choice comes from numpy generators keyed by the seed and the
clip, so the dataset is a pure function of the arguments (espeak-ng and sox are deterministic).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import pathlib
import shutil
import subprocess
import tempfile
import wave

import numpy as np

from examples import settings
from examples.speech_commands import input_data

# The v0.02 target words and ten of its auxiliary words (the `_unknown_` pool).
TARGET_WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
UNKNOWN_WORDS = ("bed", "bird", "cat", "dog", "happy", "house", "marvin", "sheila", "tree", "wow")
# espeak-ng's English accents (its own "gmw" voices; the mbrola ones need extra packages).
ACCENTS = ("en", "en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan",
           "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
# Voice variants that stay intelligible (whisper, croak and the robot voices do not).
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "klatt",
            "klatt2", "klatt3", "klatt4")
NOISE_KINDS = ("white_noise", "pink_noise", "brown_noise", "hum")

_SAMPLE_RATE = 16000
_CLIP_SAMPLES = _SAMPLE_RATE
# Room noise under each clip: standard deviation between these, as a fraction of full scale.
_ROOM_NOISE_RANGE = (10**-3.5, 10**-2.5)
_NOISE_RMS = 0.1


@dataclasses.dataclass(frozen=True)
class Speaker:
  """An espeak-ng voice at one pitch (0-99) and speed (words per minute)."""

  accent: str
  variant: str
  pitch: int
  speed: int

  @property
  def voice(self) -> str:
    return f"{self.accent}+{self.variant}"

  @property
  def hash_name(self) -> str:
    """8 hex digits like the real dataset's speaker ids, a function of voice, pitch and speed."""
    key = f"{self.voice}|p{self.pitch}|s{self.speed}"
    return hashlib.sha1(key.encode()).hexdigest()[:8]


def check_tools() -> None:
  """Raises RuntimeError naming the fix if espeak-ng or sox is not on PATH."""
  missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
  if missing:
    raise RuntimeError(
        f"{' and '.join(missing)} not found on PATH; the generated speech dataset needs both. "
        "Install them with `apt-get install espeak-ng sox` (scripts/setup_env.sh does this when "
        "run as root), or pass --data_dir with the real Speech Commands v0.02 dataset.")


def choose_speakers(num_speakers: int, seed: int) -> list[Speaker]:
  """`num_speakers` distinct speakers: espeak-ng voices at random pitch and speed.

  Every voice (accent + variant) is used once before any is used again at another pitch and
  speed, so small datasets get the most varied voices.

  Args:
    num_speakers: how many (>= 1).
    seed: seed of the draw.

  Returns:
    The speakers, with distinct `hash_name`s.

  Raises:
    ValueError: if num_speakers < 1.
  """
  if num_speakers < 1:
    raise ValueError(f"num_speakers must be >= 1; got {num_speakers}.")
  voices = [(accent, variant) for accent in ACCENTS for variant in VARIANTS]
  rng = np.random.default_rng([seed, 0])
  order = rng.permutation(len(voices))
  speakers: dict[str, Speaker] = {}
  draw = 0
  while len(speakers) < num_speakers:
    accent, variant = voices[order[draw % len(voices)]]
    speaker = Speaker(accent=accent, variant=variant, pitch=int(rng.integers(25, 76)),
                      speed=int(rng.integers(120, 221)))
    speakers.setdefault(speaker.hash_name, speaker)
    draw += 1
  return list(speakers.values())


def _speak(word: str, voice: str, pitch: int, speed: int, raw_wav: pathlib.Path) -> np.ndarray:
  """The word spoken by espeak-ng, resampled by sox to 16 kHz mono with silence trimmed.

  Args:
    word: the text.
    voice: espeak-ng voice, "<accent>+<variant>".
    pitch: 0-99.
    speed: words per minute.
    raw_wav: scratch file for espeak-ng's 22.05 kHz output (removed afterwards).

  Returns:
    float32 samples in [-1, 1].
  """
  subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", str(speed), "-w",
                  str(raw_wav), word], check=True, capture_output=True)
  # sox: resample, then strip espeak's leading and trailing silence so placement is ours.
  resampled = subprocess.run(
      ["sox", str(raw_wav), "-t", "f32", "-r", str(_SAMPLE_RATE), "-c", "1", "-",
       "silence", "1", "0.01", "0.5%", "reverse", "silence", "1", "0.01", "0.5%", "reverse"],
      check=True, capture_output=True).stdout
  raw_wav.unlink()
  return np.frombuffer(resampled, dtype=np.float32)


def _write_wav(path: pathlib.Path, audio: np.ndarray) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  pcm = np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")
  with wave.open(str(path), "wb") as handle:
    handle.setnchannels(1)
    handle.setsampwidth(2)
    handle.setframerate(_SAMPLE_RATE)
    handle.writeframes(pcm.tobytes())


def _clip(word: str, speaker: Speaker, repetition: int, seed: int,
          scratch: pathlib.Path) -> np.ndarray:
  """One 1 s take: jittered voice, random position and loudness, a little room noise."""
  word_key = int(hashlib.sha1(word.encode()).hexdigest()[:8], 16)
  speaker_key = int(speaker.hash_name, 16)
  rng = np.random.default_rng([seed, 1, speaker_key, word_key, repetition])
  pitch = int(np.clip(speaker.pitch + rng.integers(-4, 5), 0, 99))
  speed = int(speaker.speed * rng.uniform(0.92, 1.08))
  # Words longer than a clip are cut, as the real dataset's recordings are.
  speech = _speak(word, speaker.voice, pitch, speed, scratch)[:_CLIP_SAMPLES]
  peak = float(np.max(np.abs(speech))) if speech.size else 0.0
  if peak > 0:
    speech = speech * (rng.uniform(0.3, 0.9) / peak)
  audio = rng.normal(0.0, rng.uniform(*_ROOM_NOISE_RANGE), _CLIP_SAMPLES)
  start = int(rng.integers(0, _CLIP_SAMPLES - speech.size + 1))
  audio[start:start + speech.size] += speech
  return audio


def _noise(kind: str, seconds: float, rng: np.random.Generator) -> np.ndarray:
  """Background noise at RMS `_NOISE_RMS`: white, pink (1/f), brown (1/f^2) or mains hum."""
  samples = int(seconds * _SAMPLE_RATE)
  white = rng.normal(size=samples)
  if kind == "white_noise":
    noise = white
  elif kind in ("pink_noise", "brown_noise"):
    spectrum = np.fft.rfft(white)
    frequencies = np.fft.rfftfreq(samples, 1.0 / _SAMPLE_RATE)
    # Below 20 Hz the 1/f shapes would be all rumble; hold them flat there.
    power = 1.0 if kind == "pink_noise" else 2.0
    spectrum /= np.maximum(frequencies, 20.0) ** (power / 2.0)
    noise = np.fft.irfft(spectrum, samples)
  elif kind == "hum":
    time = np.arange(samples) / _SAMPLE_RATE
    noise = sum(np.sin(2 * np.pi * 50 * h * time + rng.uniform(0, 2 * np.pi)) / h
                for h in range(1, 8)) + 0.3 * white
  else:
    raise ValueError(f"unknown noise kind {kind!r}; choose from {', '.join(NOISE_KINDS)}.")
  return noise * (_NOISE_RMS / np.sqrt(np.mean(noise**2)))


@dataclasses.dataclass(frozen=True)
class Summary:
  """What `generate` wrote."""

  clips: int  # spoken wavs (background noise not counted)
  speakers: int
  words: tuple[str, ...]  # the folders written, sorted
  split_counts: dict[str, int]  # clips per partition of the hash split


@dataclasses.dataclass(frozen=True)
class DatasetConfig(settings.Settings):
  """What `generate` writes: the speakers, words and split."""

  num_speakers: int = settings.setting(
      200, "Speakers (espeak-ng voice, pitch, speed); each says every target word 1 to --max_repetitions "
      "times and --unknown_words_per_speaker other words once.", minimum=1)
  max_repetitions: int = settings.setting(2, "Most takes of a target word per speaker.", minimum=1)
  unknown_words_per_speaker: int = settings.setting(3, "Non-target words each speaker says.", minimum=0)
  target_words: tuple[str, ...] = settings.setting(TARGET_WORDS, "Target words.")
  # The TF recipe uses only unknown_percentage of the set size from this pool, so a smaller pool
  # than the real one's costs nothing.
  unknown_words: tuple[str, ...] = settings.setting(UNKNOWN_WORDS, "Non-target words (the _unknown_ pool).")
  noise_seconds: float = settings.setting(30.0, "Length of each background noise wav.", greater_than=0.0)
  validation_percentage: float = settings.setting(10.0, "Hash-split share written to validation_list.txt.",
                                                  minimum=0.0, maximum=100.0)
  testing_percentage: float = settings.setting(10.0, "Hash-split share written to testing_list.txt.",
                                               minimum=0.0, maximum=100.0)
  seed: int = settings.setting(0, "Seed of speakers, takes and noise: the dataset is a pure function of the "
                               "settings.")
  workers: int = settings.setting(2, "Concurrent espeak-ng / sox processes.", minimum=1)

  def __post_init__(self):
    super().__post_init__()
    if self.unknown_words_per_speaker > len(self.unknown_words):
      raise ValueError(
          f"--unknown_words_per_speaker must be <= {len(self.unknown_words)}, the number of --unknown_words; "
          f"got {self.unknown_words_per_speaker}.")


def generate(data_dir: str | pathlib.Path, config: DatasetConfig = DatasetConfig()) -> Summary:
  """Writes the dataset; every speaker says every target word and a few unknown words.

  Args:
    data_dir: output directory, best empty (created; files of the same names are overwritten,
      other wavs would join the dataset).
    config: the speakers, words and split.

  Returns:
    A `Summary` of the written clips.

  Raises:
    RuntimeError: if espeak-ng or sox is missing.
  """
  check_tools()
  data_dir = pathlib.Path(data_dir)
  speakers = choose_speakers(config.num_speakers, config.seed)
  rng = np.random.default_rng([config.seed, 2])
  jobs = []
  for speaker in speakers:
    for word in config.target_words:
      jobs += [(word, speaker, n) for n in range(int(rng.integers(1, config.max_repetitions + 1)))]
    spoken = rng.choice(len(config.unknown_words), size=config.unknown_words_per_speaker, replace=False)
    jobs += [(config.unknown_words[i], speaker, 0) for i in sorted(spoken)]

  split_lists: dict[str, list[str]] = {"validation": [], "testing": [], "training": []}
  with tempfile.TemporaryDirectory() as tmp, \
      concurrent.futures.ThreadPoolExecutor(max_workers=config.workers) as pool:
    workdir = pathlib.Path(tmp)

    def write(job):
      word, speaker, repetition = job
      name = f"{word}/{speaker.hash_name}_nohash_{repetition}.wav"
      scratch = workdir / name.replace("/", "_")
      _write_wav(data_dir / name, _clip(word, speaker, repetition, config.seed, scratch))
      return name

    for name in pool.map(write, jobs):
      subset = input_data.which_set(name, config.validation_percentage, config.testing_percentage)
      split_lists[subset].append(name)

  noise_rng = np.random.default_rng([config.seed, 3])
  for kind in NOISE_KINDS:
    _write_wav(data_dir / input_data.BACKGROUND_NOISE_DIR_NAME / f"{kind}.wav",
               _noise(kind, config.noise_seconds, noise_rng))
  for subset, file_name in (("validation", "validation_list.txt"), ("testing", "testing_list.txt")):
    (data_dir / file_name).write_text("".join(f"{name}\n" for name in sorted(split_lists[subset])))
  return Summary(clips=len(jobs), speakers=len(speakers),
                 words=tuple(sorted({word for word, _, _ in jobs})),
                 split_counts={subset: len(names) for subset, names in split_lists.items()})
