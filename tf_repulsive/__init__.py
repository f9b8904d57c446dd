"""tf_repulsive: active mini-batch sampling with repulsive point processes for tf.data / Keras.

Implements Zhang, Öztireli, Mandt, Salvi, "Active Mini-Batch Sampling using Repulsive Point
Processes": Poisson disk sampling by dart throwing (Vanilla PDS), mingling-index variants (Easy,
Dense, Anneal PDS) and the annealing schedule, as a `tf.data` transformation.
"""

from tf_repulsive import diagnostics
from tf_repulsive._active_bias import ActiveBias
from tf_repulsive._callback import ActiveBiasCallback
from tf_repulsive._callback import AnnealingCallback
from tf_repulsive._callback import BatchStreamCallback
from tf_repulsive._contract import BatchDrawer
from tf_repulsive._contract import FeatureSource
from tf_repulsive._contract import PointGroups
from tf_repulsive._contract import Sampler
from tf_repulsive._contract import SamplingContext
from tf_repulsive._draw_record import SamplingStats
from tf_repulsive._epoch_shuffle import EpochShuffle
from tf_repulsive._importance import Importance
from tf_repulsive._importance import ImportancePDS
from tf_repulsive._importance import Marginals
from tf_repulsive._kdpp import FastKDPP
from tf_repulsive._kdpp import KDPP
from tf_repulsive._mingling import mingling_index
from tf_repulsive._model_features import EmbeddingFeatures
from tf_repulsive._model_features import GradientFeatures
from tf_repulsive._model_features import LossFeatures
from tf_repulsive._model_features import compute_features
from tf_repulsive._model_space import ModelSpace
from tf_repulsive._online_importance import OnlineImportance
from tf_repulsive._options import BatcherOptions
from tf_repulsive._pipeline import RepulsiveBatcher
from tf_repulsive._pipeline import repulsive_batch
from tf_repulsive._pruning import EpochPruning
from tf_repulsive._pruning import PassState
from tf_repulsive._pruning import RandomPruning
from tf_repulsive._recording import RecordingModel
from tf_repulsive._rs2 import RS2
from tf_repulsive._samplers import AnnealPDS
from tf_repulsive._samplers import DensePDS
from tf_repulsive._samplers import EasyPDS
from tf_repulsive._samplers import Uniform
from tf_repulsive._samplers import VanillaPDS
from tf_repulsive._schedule import Schedule
from tf_repulsive._schedule import paper_schedule

__version__ = "0.1.0"

__all__ = (
    "ActiveBias",
    "ActiveBiasCallback",
    "AnnealPDS",
    "AnnealingCallback",
    "BatchDrawer",
    "BatcherOptions",
    "BatchStreamCallback",
    "DensePDS",
    "EasyPDS",
    "EmbeddingFeatures",
    "EpochPruning",
    "EpochShuffle",
    "FastKDPP",
    "FeatureSource",
    "GradientFeatures",
    "Importance",
    "ImportancePDS",
    "KDPP",
    "LossFeatures",
    "Marginals",
    "ModelSpace",
    "OnlineImportance",
    "PassState",
    "PointGroups",
    "RS2",
    "RandomPruning",
    "RecordingModel",
    "RepulsiveBatcher",
    "Sampler",
    "SamplingContext",
    "SamplingStats",
    "Schedule",
    "Uniform",
    "VanillaPDS",
    "compute_features",
    "diagnostics",
    "mingling_index",
    "paper_schedule",
    "repulsive_batch",
)

# Names the package does not have, and what to use instead.
_REMOVED = {
    "ModelFeatures": "the contract for features computed from a model is tf_repulsive.FeatureSource",
    "model_features": "the features of a model for a dataset come from tf_repulsive.compute_features",
    "ActiveBiasState": "the checkpointable state of the ActiveBias weights is ActiveBiasCallback(...).state",
    "anneal_pi": "the schedule is tf_repulsive.paper_schedule(h, n), which takes arrays too (.numpy() for one)",
}


def __getattr__(name: str):
  if name in _REMOVED:
    raise AttributeError(f"module 'tf_repulsive' has no attribute {name!r}: {_REMOVED[name]}.")
  raise AttributeError(f"module 'tf_repulsive' has no attribute {name!r}")
