"""The extension contracts, in one place.

A `Sampler` builds a `BatchDrawer` from a `SamplingContext`: `build` runs once per dataset
(one-time preparation, numpy allowed); the drawer's `draw` is traced into the pipeline and runs
for every batch (TensorFlow ops, stateless randomness). The built-in samplers (`_samplers`,
`_epoch_shuffle`, `_kdpp`, `_active_bias`) are written against this module only, as a user's own
sampler is.

A `FeatureSource` says how features are computed from a model, when distances are measured in the
model's own space (`_model_features` holds the built-in ones): from the model as it is now, a
function of a chunk of elements to their feature vectors.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Callable, Mapping

import numpy as np
import tensorflow as tf

# The most steps one draw may cover: past it, a draw's ops have enough work per step.
MOST_STEPS_PER_DRAW = 16


@dataclasses.dataclass(frozen=True)
class SamplingContext:
  """What a sampler is built against: the dataset, read once.

  Attributes:
    features: `[N, d]` float32 feature vectors (distances are measured here).
    labels: for samplers with `needs_labels`, `[N]` int64 class ids (`label_kind` "class") or
      float64 regression targets (`label_kind` "target"); else None.
    batch_size: `k`.
    distance_cache_bytes: memory the sampler may spend on an N x N distance matrix.
    verbose: whether one-time work longer than about 2 s shows a progress bar.
    max_steps_per_draw: the most steps the drawer's `draw` may cover (`steps_per_draw`): 1 when
      the features are refreshed from a model (`ModelSpace`), whose stream draws each step as
      it delivers it.
  """

  features: np.ndarray
  labels: np.ndarray | None
  batch_size: int
  distance_cache_bytes: int
  verbose: bool = False
  max_steps_per_draw: int = MOST_STEPS_PER_DRAW


@dataclasses.dataclass(frozen=True, eq=False)
class PointGroups:
  """Groups of the dataset's points whose share in every batch the pipeline records, for the logs.

  The mingling samplers (Easy, Dense, Anneal PDS) report their mingling values: group m holds the
  points with mingling index m / K. A drawer of your own may report any grouping (clusters,
  difficulty bins, ...); `batcher.group_mixes` and `AnnealingCallback`'s logs then show it, and
  `BatchDrawer.pi` may say how the draws weigh the groups.

  Attributes:
    name: what the logs call the grouping: `AnnealingCallback` logs `<callback name>_<name>`, the
      mean level of the epoch's batch points, and `<callback name>_<name>_<g>`, the share of group g.
    of_points: `[N]` int, the group of every point, in 0 ... G - 1.
    levels: `[G]` float, a number per group that the logs average (for mingling values, m / K).
  """

  name: str
  of_points: np.ndarray
  levels: np.ndarray


class BatchDrawer:
  """Base of what a sampler builds: draws the indices of the batches of global steps.

  `draw` is traced into the tf.data pipeline (and into `batcher.batch_indices`), so it must be
  TensorFlow ops only, its randomness stateless and derived from `key` and the steps alone: that
  is what makes batches reproducible, checkpoints exact and pipelines shippable. The pipeline runs
  it as a single-device function on the host CPU; variables it reads belong there too (create
  them under `tf.device("CPU:0")`): one placed elsewhere (a GPU) still works, through tf.data's
  slower multi-device function.

  One call draws the batches of `steps_per_draw` consecutive steps, so that a drawer whose work
  per batch is small can vectorise it over steps instead of paying TensorFlow's per-op cost for
  every batch; the pipeline calls it with `first_step` a multiple of `steps_per_draw`.

  A drawer may report what its sampler prepared, for `batcher.stats()`, `batcher.group_mixes`,
  `batcher.pi` and the callbacks' logs; the pipeline passes it on without reading it.

  A drawer that learns from the training (`learns_from_losses`) draws a step on the losses the
  training steps before it recorded (`record_losses`). Its stream draws each step as it delivers
  it, and its state (`state`) is what a checkpoint of the model must carry.

  Attributes:
    steps_per_draw: S, the steps one call of `draw` covers (a constant of the drawer).
    report: named numbers of the one-time preparation, shown as `batcher.stats().report` (the
      disk samplers report their `radius`; see `SamplingStats`); empty by default.
    groups: a grouping of the points whose share in every batch the pipeline records
      (`PointGroups`); None (the default): none.
    learns_from_losses: whether the draws depend on the losses that `record_losses` records
      (False by default). Then `steps_per_draw` is 1.
    state: a `tf.Module` of the variables the draws depend on beyond (seed, step), for
      checkpoints (`batcher.sampler_state`); None (the default): none.
  """

  steps_per_draw: int = 1
  report: Mapping[str, float] = types.MappingProxyType({})
  groups: PointGroups | None = None
  learns_from_losses: bool = False
  state: tf.Module | None = None

  def draw(self, key: tf.Tensor, first_step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The batches of steps `first_step` ... `first_step + steps_per_draw - 1`.

    Args:
      key: `[2]` int64 stateless seed of the pipeline.
      first_step: int64 scalar, a global step n that is a multiple of `steps_per_draw`.

    Returns:
      `[steps_per_draw, k]` int32 indices into the dataset, each row k distinct ones (the batch
      of one step), and `[steps_per_draw]` int32 counts of them that a fallback fill supplied
      (zeros for samplers without one).
    """
    raise NotImplementedError

  def sample_weights(self, indices: tf.Tensor) -> tf.Tensor | None:
    """`[S, k]` float32 Keras sample weights of the elements a `draw` just returned, or None (the default).

    Called in the same pipeline call as `draw`, on its indices. The stream then hands Keras
    `(x, y, sample_weight)` batches (a given sample weight is multiplied).
    """
    del indices
    return None

  def record_losses(self, step: tf.Tensor, losses: tf.Tensor) -> tf.Operation:
    """The op that records the training losses of the batch of `step`, for a drawer that `learns_from_losses`.

    `RecordingModel` adds it to each training step; a custom loop calls `batcher.record_losses`.

    Args:
      step: int64 scalar, the step whose batch was trained on.
      losses: `[k]` float32 per-element losses of that batch, in the batch's order.
    """
    raise NotImplementedError(f"{type(self).__name__} does not learn from losses (learns_from_losses is False).")

  def check_recorded(self) -> None:
    """Raises a ValueError if a training step recorded losses this drawer could not place (asked each epoch)."""

  def traced_draw(self) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None:
    """A traced function that computes `draw`, for the draws the batcher makes outside the pipeline.

    Those are `batcher.batch_indices`, `batcher.fallback_points` and the build's check of the
    first batch. The default, None, lets the batcher trace `draw` itself. A drawer that has
    traced a function of its draw already (the disk samplers calibrate `radius="auto"` with
    one) returns it, and the build is spared a second trace. It must return what `draw` does.
    """
    return None

  def pi(self, step: tf.Tensor) -> tf.Tensor | None:
    """`[G]` weights of the `groups` that the draws follow at `step`, or None (the default).

    Dense and Anneal PDS draw each dart's mingling value from pi first; `batcher.pi` normalises
    the weights, and `AnnealingCallback` logs them.
    """
    del step
    return None

  def inclusion_probabilities(self, key: tf.Tensor, verbose: bool) -> np.ndarray | None:
    """`[N]` float64: each element's probability of being in a batch, or None (the default).

    What `repulsive_batch(..., inclusion_weights=...)` weights the batches by. Only for a
    drawer whose batches follow the same law at every step (the probabilities are computed once,
    and again on each refresh of a `ModelSpace` batcher); None: it cannot, and such a batcher
    refuses the sampler. Each should be positive for the points a batch can hold, and they sum
    to k.

    Args:
      key: `[2]` int64 stateless key reserved for this estimate (not the stream's).
      verbose: show a progress bar if it takes more than about 2 s.
    """
    del key, verbose
    return None

  def refreshable(self) -> BatchDrawer | None:
    """A drawer of the same draws whose per-dataset tensors live in variables, or None (the default).

    What `ModelSpace` batchers need: when the features are recomputed, the sampler builds a new
    drawer on them and the pipeline's drawer takes over its state (`refresh_from`), with no new
    trace of the stream. None: this drawer cannot, and a `ModelSpace` batcher refuses the sampler.
    """
    return None

  def refresh_from(self, other: BatchDrawer) -> None:
    """Makes this drawer (from `refreshable`) draw what `other`, built by the same sampler on new features, draws.

    Called while no draw is running on the old state. Also takes over `report` and `groups`
    (groups of the same name and number).
    """
    raise NotImplementedError


class Sampler:
  """Base of all samplers: frozen configurations, reusable by any number of `repulsive_batch` batchers.

  The pipeline's state (draws, counters, where its stream starts) lives in the batcher that
  `repulsive_batch` returns, not here.

  A sampler of your own subclasses this and overrides `build`, which receives the dataset's
  `SamplingContext` once and returns a `BatchDrawer`; set `needs_labels = True` to get the labels
  in the context. Checkpoints, callbacks and `batch_indices` then work as for the built-in ones.
  A drawer draws one step per call unless it sets `steps_per_draw` (see `BatchDrawer`).

  Attributes:
    needs_labels: whether `build` needs the labels in its `SamplingContext` (False here, True for
      the mingling samplers and `ActiveBias`).
    label_kind: what those labels are: "class" (integer class ids, read as int64; the default) or
      "target" (real-valued regression targets, read as float64).

  Example (every batch the next k elements, a new random rotation each epoch):

  >>> import numpy as np, tensorflow as tf, tf_repulsive
  >>> class RotatedBlocks(tf_repulsive.Sampler):
  ...   def build(self, context):
  ...     num_points, k = context.features.shape[0], context.batch_size
  ...     class Drawer(tf_repulsive.BatchDrawer):
  ...       def draw(self, key, first_step):  # one step per draw: first_step is the step
  ...         epoch = first_step // -(-num_points // k)
  ...         shift = tf.random.stateless_uniform(
  ...             [], tf.random.experimental.stateless_fold_in(key, epoch), maxval=num_points, dtype=tf.int64)
  ...         indices = (first_step * k + shift + tf.range(k, dtype=tf.int64)) % num_points
  ...         return tf.cast(indices, tf.int32)[None], tf.zeros([1], tf.int32)
  ...     return Drawer()
  >>> batcher = tf_repulsive.repulsive_batch(4, RotatedBlocks(), seed=0, start_step=0)
  >>> batches = tf.data.Dataset.from_tensor_slices(np.arange(10.0)).apply(batcher)
  >>> first = next(iter(batches)).numpy()
  >>> bool(np.all(np.diff(first) % 10 == 1)), bool(np.array_equal(first, batcher.batch_indices(0)))
  (True, True)
  """

  # Whether `build` needs the labels in its context, and as class ids or regression targets.
  needs_labels: bool = False
  label_kind: str = "class"

  def build(self, context: SamplingContext) -> BatchDrawer:
    """Prepares this sampler's per-batch draw for a dataset (one-time preprocessing).

    Args:
      context: the dataset's features (labels when `needs_labels`) and the batch size.

    Returns:
      The drawer the pipeline calls for every batch.
    """
    raise NotImplementedError


class FeatureSource:
  """Base of feature sources: how features are computed from a Keras model.

  Input-space repulsion spreads a batch over the pixels; the mini-batch gradient's variance lives
  in the model's space. A `FeatureSource` maps elements to vectors computed by the model being
  trained (its embedding, its per-example last-layer gradient, ...), for `ModelSpace`,
  `compute_features` and the
  `features=` argument of the diagnostics. The built-in ones are `EmbeddingFeatures` and
  `GradientFeatures`; a source of your own subclasses this and overrides `features_fn`.

  Attributes:
    needs_labels: whether `features_fn`'s function uses the labels (a class attribute).

  Example (the logits as features):

  >>> import keras, numpy as np, tf_repulsive
  >>> class Logits(tf_repulsive.FeatureSource):
  ...   def features_fn(self, model):
  ...     return lambda inputs, labels: model(inputs, training=False)
  >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
  >>> tf_repulsive.compute_features(Logits(), model, np.ones([10, 3], np.float32)).shape
  (10, 4)
  """

  needs_labels: bool = False

  def features_fn(self, model: Any) -> Callable[[Any, Any], Any]:
    """A function of the model as it is now: (inputs, labels) of n elements -> `[n, d]` features.

    Called once per computation of the features (and again after the model has changed); the
    function it returns is called on consecutive chunks of the dataset, in inference mode. It
    may be traced (keep it free of Python side effects per call) and must return the same d for
    every chunk.

    Args:
      model: the Keras model, built.

    Returns:
      The function; `inputs` is a chunk of the model's inputs (an array, or the nested structure
      the model takes), `labels` the chunk's `[n]` labels (None unless `needs_labels`).
    """
    raise NotImplementedError

  def last_layer_fn(self, model: Any) -> Callable[[Any, Any, Any], Any] | None:
    """The features from what the model's last layer takes and gives, or None (the default).

    What `ModelSpace(..., from_training_step=True)` needs: the training step's own forward pass
    gives, for the k elements it trains on, the input h of the model's last layer and that
    layer's output (after its activation). A source whose features follow from those returns a
    function `(h, outputs, labels) -> [n, d]` features, equal to what `features_fn` computes
    when both see the same h. None: the source needs more, and such a space is refused.

    Args:
      model: the Keras model, built.
    """
    del model
    return None
