"""Disk samplers with the N x N distance cache at any dimension, so tests on small data reach it.

By default the build makes the cache only from d = 1024 on (`DartTuning.cache_from_dim`).
"""

import tf_repulsive
from tf_repulsive import _dart_config

CACHE_AT_ANY_DIM = _dart_config.DartTuning(cache_from_dim=1)


class VanillaPDSWithCache(tf_repulsive.VanillaPDS):
  _tuning = CACHE_AT_ANY_DIM


class EasyPDSWithCache(tf_repulsive.EasyPDS):
  _tuning = CACHE_AT_ANY_DIM
