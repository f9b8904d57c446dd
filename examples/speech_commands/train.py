r"""Simple Audio Recognition (TF's speech_commands "conv" model) with repulsive mini-batches.

The paper's speech experiment (section 5): TensorFlow's audio recognition tutorial with its
standard settings, the mini-batches drawn by a repulsive point process on the 98 x 40 MFCC
features instead of uniformly. Every setting's default is the TF tutorial's; `sampler` picks the
mini-batch sampler.

Sampling meets augmentation. TF's training recipe augments every example every time it is drawn
(time shift up to 100 ms, background noise in 80% of the examples, fresh noise for silence), so the
features the network sees form no fixed point set; a point process, however, needs one: the disk
radius, the distances and the mingling indices are properties of a finite dataset. This binary
therefore separates *which* examples a batch holds from *how* they are presented:

1. The point set is the training partition with its un-augmented audio: `repulsive_batch` reads
   elements `(waveform, label)` once and measures distances (radius, disks, mingling indices) on
   `features` = the MFCCs of the clean waveform. A silence entry is its fixed noise clip.
2. A batch is one draw of the sampler: the clean waveforms and labels of the drawn examples.
3. After sampling, per batch, in the tf.data pipeline and with graph ops only (stateless random
   ops keyed by a per-batch seed stream): time shift and noise mixing as TF does, then the MFCCs of
   the augmented audio, which the model trains on.

With `space` "embedding" or "gradient" the disks are drawn in the model's own space instead
(`tf_repulsive.ModelSpace`, refreshed every `refresh_every` steps): the model's features of the
clean clips, whose MFCCs `ModelSpace.inputs_fn` computes from the waveforms the batcher reads.

So augmentation is TF's, unchanged, and the repulsion acts between clips. The alternatives are
worse: sampling on augmented features would need a fixed set of pre-augmented copies (memory times
the number of copies, and copies of one clip would repel each other), and dropping augmentation
would change the recipe being compared against. The price: the clean MFCCs only approximate where
an augmented example lies. Measured on the default generated dataset (every 5th training clip, one
augmentation draw), the median distance between a clip's clean and augmented MFCCs is 122 (noise
alone 63; shift alone 357, as zero-filled shifted-in audio hits the log floor), against a disk
radius of 99 (half the median pairwise distance) and a median nearest-neighbour distance of 64: the
batch's clips are spread out, the inputs of one step less strictly so.

Differences from TF's train.py: Keras `fit` with a `PiecewiseConstantDecay` learning rate (each
`how_many_training_steps` entry runs exactly that many steps at its rate); silence entries are
fixed noise clips in every partition (see input_data.py); a uniform batch holds distinct examples
(TF draws with replacement); the split comes from validation_list.txt / testing_list.txt when the
dataset has them.

Writes to the workdir: `validation_curve.csv` (step, validation loss and accuracy every
`eval_step_interval` steps), `validation_curve.png`, `tensorboard/` (train loss, accuracy,
learning rate, the sampler's pi and mingling mix per interval; validation curve) and
`results.json` (final validation and test accuracy, sizes, mingling histogram, wall time).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import time
from typing import Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from examples import common
from examples import settings
from examples.speech_commands import input_data
from examples.speech_commands import models
from examples.speech_commands import synthesis
import tf_repulsive


@dataclasses.dataclass(frozen=True)
class Config(settings.Settings):
  """Training settings; the defaults and help texts are the TF tutorial's (tensorflow/examples/speech_commands)."""

  data_dir: str = settings.setting("/tmp/speech_dataset/", "Where the Speech Commands dataset is.")
  generate: bool = settings.setting(
      False, "If --data_dir holds no wavs, first write the espeak-ng dataset there (generate_data's defaults).")
  wanted_words: tuple[str, ...] = settings.setting(synthesis.TARGET_WORDS,
                                                   "Words to recognise; others become _unknown_.")
  sample_rate: int = settings.setting(16000, "Expected sample rate of the wavs.")
  clip_duration_ms: int = settings.setting(1000, "Expected duration in milliseconds of the wavs.")
  window_size_ms: float = settings.setting(30.0, "How long each spectrogram timeslice is.")
  window_stride_ms: float = settings.setting(10.0, "How far to move in time between spectrogram timeslices.")
  dct_coefficient_count: int = settings.setting(
      40, "How many MFCC coefficients (bins) per timeslice; at most 40, the mel channel count.")
  silence_percentage: float = settings.setting(10.0, "How much of the training data should be silence.")
  unknown_percentage: float = settings.setting(10.0, "How much of the training data should be unknown words.")
  validation_percentage: float = settings.setting(
      10.0, "What percentage of wavs to use as a validation set (hash split; unused with list files).")
  testing_percentage: float = settings.setting(
      10.0, "What percentage of wavs to use as a test set (hash split; unused with list files).")
  time_shift_ms: float = settings.setting(100.0, "Range to randomly shift the training audio by in time.")
  background_frequency: float = settings.setting(
      0.8, "How many of the training samples have background noise mixed in.")
  background_volume: float = settings.setting(0.1, "How loud the background noise should be, between 0 and 1.")
  how_many_training_steps: tuple[int, ...] = settings.setting(
      (15000, 3000), "How many training steps to run at each learning rate.", minimum=1)
  learning_rate: tuple[float, ...] = settings.setting(
      (0.001, 0.0001), "Learning rate of each stage of --how_many_training_steps.")
  batch_size: int = settings.setting(100, "How many items to train with at once.", minimum=1)
  eval_step_interval: int = settings.setting(400, "How often to evaluate the training results.", minimum=1)
  sampler: str = settings.setting("anneal_pds", "Mini-batch sampler.", choices=common.ALL_SAMPLER_NAMES)
  neighbors: int = settings.setting(5, "K of the mingling index.", minimum=1)
  radius: float | str | None = common.radius_setting()
  space: str = common.space_setting()
  refresh_every: int = common.refresh_every_setting(30)
  seed: int = settings.setting(0, "Seed of initialisation, dropout, batch draws and augmentation.")

  def __post_init__(self):
    super().__post_init__()
    if len(self.how_many_training_steps) != len(self.learning_rate):
      raise ValueError(
          "--how_many_training_steps and --learning_rate must have equal lengths; got "
          f"{len(self.how_many_training_steps)} and {len(self.learning_rate)}.")

  @property
  def audio(self) -> input_data.AudioSettings:
    return input_data.AudioSettings(
        sample_rate=self.sample_rate, clip_duration_ms=self.clip_duration_ms,
        window_size_ms=self.window_size_ms, window_stride_ms=self.window_stride_ms,
        dct_coefficient_count=self.dct_coefficient_count)

  @property
  def total_steps(self) -> int:
    return sum(self.how_many_training_steps)


@dataclasses.dataclass(frozen=True)
class Result:
  """What one training run measured."""

  validation_accuracy: float  # after the last step
  test_accuracy: float
  curve: list[dict[str, float]]  # step, validation_loss, validation_accuracy
  steps: int
  partition_sizes: dict[str, int]
  mingling_histogram: list[float]  # share of training examples per mingling value 0..K
  radius: float | None
  fallback_batches: int
  seconds: float


class _TrainingMetricsInEpochLogs(keras.callbacks.Callback):
  """Puts the epoch's training loss and accuracy back into the epoch logs.

  `PeriodicEvaluation` runs `model.evaluate` inside `fit`, which resets and refills the metric
  objects `fit` also uses; at an epoch's end `fit` then reports the evaluation's values as the
  training ones. Evaluations happen only at epoch ends here (epochs are --eval_step_interval
  steps), so the last batch's logs, taken before the evaluation, hold the epoch's training means.
  Must come before `PeriodicEvaluation` and the loggers in the callback list.
  """

  def __init__(self):
    super().__init__()
    self._last_batch_logs: dict[str, float] = {}

  def on_train_batch_end(self, batch, logs=None):
    self._last_batch_logs = dict(logs or {})

  def on_epoch_end(self, epoch, logs=None):
    if logs is not None:
      logs.update(self._last_batch_logs)


class _StopAtStep(keras.callbacks.Callback):
  """Ends `fit` after `last_step` optimizer steps (the last epoch may be shorter than the rest)."""

  def __init__(self, last_step: int):
    super().__init__()
    self._last_step = last_step

  def on_train_batch_end(self, batch, logs=None):
    if int(np.asarray(self.model.optimizer.iterations)) >= self._last_step:
      self.model.stop_training = True


def learning_rate_schedule(steps: Sequence[int],
                           rates: Sequence[float]) -> float | keras.optimizers.schedules.LearningRateSchedule:
  """`rates[i]` for exactly `steps[i]` optimizer steps, in order (the rates of TF's train loop)."""
  if len(rates) == 1:
    return float(rates[0])
  # PiecewiseConstantDecay keeps values[i] while iterations <= boundaries[i]; iterations count
  # from 0, so stage i ends at iteration cumsum(steps)[i] - 1.
  boundaries = [int(end) - 1 for end in np.cumsum(steps)[:-1]]
  return keras.optimizers.schedules.PiecewiseConstantDecay(boundaries, [float(rate) for rate in rates])


def _features(waveforms: np.ndarray, settings: input_data.AudioSettings) -> np.ndarray:
  return np.concatenate([input_data.mfcc(tf.constant(chunk), settings).numpy()
                         for chunk in np.array_split(waveforms, max(1, math.ceil(len(waveforms) / 512)))])


def train_and_evaluate(config: Config, workdir: str | pathlib.Path, verbose: int = 1) -> Result:
  """Trains the conv model with `config.sampler` mini-batches; evaluates along the way and at the end.

  Args:
    config: the settings.
    workdir: output directory (created).
    verbose: Keras verbosity of `fit`.

  Returns:
    The `Result`; also written to `workdir/results.json`.

  Raises:
    ValueError: for a dataset that does not match the settings (see `input_data`).
    RuntimeError: with `config.generate` when espeak-ng or sox is missing.
  """
  start_time = time.time()
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  data_dir = pathlib.Path(config.data_dir)
  if config.generate and not any(data_dir.glob("*/*.wav")):
    logging.info("No wavs in %s: generating the espeak-ng dataset there.", data_dir)
    synthesis.generate(data_dir)
  settings = config.audio
  index = input_data.prepare_data_index(
      data_dir, config.wanted_words, config.silence_percentage, config.unknown_percentage,
      config.validation_percentage, config.testing_percentage)
  noise = input_data.load_background_noise(data_dir, settings.desired_samples)
  partitions = {subset: input_data.load_partition(entries, noise, settings, subset)
                for subset, entries in index.partitions.items()}
  sizes = {subset: len(labels) for subset, (_, labels) in partitions.items()}
  empty = [subset for subset in ("validation", "testing") if not sizes[subset]]
  if empty:
    raise ValueError(f"the {' and '.join(empty)} partition of {data_dir} is empty; add speakers or "
                     "raise --validation_percentage / --testing_percentage.")
  logging.info("Labels %s; split from %s; partition sizes %s.", index.words_list, index.split_source, sizes)

  keras.utils.set_random_seed(config.seed)
  model = models.create_conv_model(settings.feature_shape, len(index.words_list))
  model.compile(
      optimizer=keras.optimizers.SGD(learning_rate_schedule(config.how_many_training_steps, config.learning_rate)),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=["accuracy"])
  train_waveforms, train_labels = partitions["training"]
  # The train seconds count the batcher's build and the refreshes: their cost is part of training with it.
  started = common.Clocks.now()
  sampler = common.make_sampler(config.sampler, neighbors=config.neighbors, radius=config.radius)

  def clean_mfcc(waveforms):
    return input_data.mfcc(waveforms, settings)

  # In the model's space, the features are the model's on the clean clips' MFCCs (what it takes).
  space = common.model_space(config.space, model, refresh_every=config.refresh_every, workdir=workdir,
                             seed=config.seed, inputs_fn=clean_mfcc)
  batcher = tf_repulsive.repulsive_batch(config.batch_size, sampler, seed=config.seed,
                                         features=space or (lambda waveform, label: clean_mfcc(waveform)))
  batches = tf.data.Dataset.from_tensor_slices((train_waveforms, train_labels)).apply(batcher)
  train_features = _features(train_waveforms, settings)
  time_shift_samples = int(config.sample_rate * config.time_shift_ms / 1000)

  def augment_and_featurize(batch, seed):
    waveforms, labels = batch
    augmented = input_data.augment(waveforms, labels, seed, noise, time_shift_samples,
                                   config.background_frequency, config.background_volume)
    return input_data.mfcc(augmented, settings), labels

  # A seed pair per batch for the augmentation, from its own stream so that it does not depend
  # on the sampler: every sampler sees the same augmentation randomness at step n.
  augmentation_seeds = tf.data.Dataset.random(seed=config.seed).batch(2)
  train = (tf.data.Dataset.zip(batches, augmentation_seeds)
           .map(augment_and_featurize, num_parallel_calls=tf.data.AUTOTUNE)
           .prefetch(tf.data.AUTOTUNE))

  def evaluation_data(subset: str) -> tf.data.Dataset:
    waveforms, labels = partitions[subset]
    return tf.data.Dataset.from_tensor_slices((_features(waveforms, settings), labels)).batch(config.batch_size)

  validation = common.PeriodicEvaluation(
      evaluation_data("validation"), config.eval_step_interval, workdir / "validation_curve.csv",
      log_dir=workdir / "tensorboard" / "validation", prefix="validation", started=started)
  steps_per_epoch = min(config.eval_step_interval, config.total_steps)
  trained = common.fitted_model(model, batcher, space)
  trained.fit(train, steps_per_epoch=steps_per_epoch, epochs=math.ceil(config.total_steps / steps_per_epoch),
              shuffle=False, verbose=verbose,
              callbacks=[
                  _TrainingMetricsInEpochLogs(),
                  # Before the sampler's callbacks: the time of step n's evaluation leaves out the
                  # refresh that serves the steps after n.
                  validation,
                  # Before TensorBoard, which then logs the pi and mingling mix it adds.
                  # ActiveBias records its prediction history on the clean clips' MFCCs.
                  *common.sampler_callbacks(batcher, model_inputs=train_features, dataset=train,
                                            log_dir=workdir / "tensorboard"),
                  _StopAtStep(config.total_steps),
                  keras.callbacks.TensorBoard(workdir / "tensorboard"),
              ])
  test_accuracy = float(model.evaluate(evaluation_data("testing"), verbose=0, return_dict=True)["accuracy"])

  mingling = tf_repulsive.mingling_index(train_features.reshape(len(train_labels), -1), train_labels,
                                         config.neighbors)
  histogram = np.bincount(np.rint(mingling * config.neighbors).astype(int), minlength=config.neighbors + 1)
  stats = batcher.stats()
  result = Result(
      validation_accuracy=validation.history[-1]["validation_accuracy"],
      test_accuracy=test_accuracy,
      curve=validation.history,
      steps=int(np.asarray(model.optimizer.iterations)),
      partition_sizes=sizes,
      mingling_histogram=(histogram / histogram.sum()).tolist(),
      radius=stats.report.get("radius"),
      fallback_batches=stats.fallback_batches,
      seconds=time.time() - start_time)
  (workdir / "results.json").write_text(
      json.dumps({"config": dataclasses.asdict(config), **dataclasses.asdict(result)}, indent=1))
  common.plot_curve([row["step"] for row in result.curve], [row["validation_accuracy"] for row in result.curve],
                    workdir / "validation_curve.png", "validation accuracy",
                    f"{config.sampler}, seed {config.seed}: test accuracy {test_accuracy:.3f}")
  return result
