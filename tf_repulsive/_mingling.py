"""Mingling indices (Illian et al.): how many of a point's nearest neighbours carry another label.

For real-valued regression targets the analogue counts the neighbours whose target differs from
the point's by more than a threshold: a quantile of all points' gaps to their neighbours' targets.

Pure numpy: computed once per dataset, before any batch is drawn. Small datasets get an exhaustive
nearest-neighbour search. Beyond `_EXHAUSTIVE_BUDGET` multiply-adds the points are clustered
(k-means) and each cluster's points search only the clusters nearest to theirs; the number of
clusters searched doubles until the mingling values of a fixed subsample agree with an exhaustive
search on at least `_REQUIRED_AGREEMENT` of it (searching every cluster is exhaustive, which bounds
the loop).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from tf_repulsive import _checks
from tf_repulsive import _progress

# N * N * d up to which the search is exhaustive (a few seconds of BLAS on two cores).
_EXHAUSTIVE_BUDGET = 2e11
# Entries of one block of squared distances (64 MiB of float32), and candidates per block.
_BLOCK_ENTRIES = 1 << 24
_CANDIDATE_BLOCK = 65536
# The exact search first takes about this many candidates per wanted neighbour, spread over the data.
_BOUND_SAMPLE_PER_WANTED = 512
# Rows whose candidates nearer than their kept ones are at most 1/_SPARSE_SHARE of a block gather
# those instead of selecting among the whole block.
_SPARSE_SHARE = 4
# Points searched per step of the exhaustive search's progress bar.
_QUERY_CHUNK = 8192
# The clustered search: sqrt(N) * _CLUSTERS_PER_ROOT clusters, fitted by _KMEANS_ROUNDS Lloyd rounds on
# _KMEANS_SAMPLE_PER_CLUSTER points per cluster.
_CLUSTERS_PER_ROOT = 2
_KMEANS_ROUNDS = 10
_KMEANS_SAMPLE_PER_CLUSTER = 32
_FIRST_PROBES = 8
# Multiply-adds the clustered search may spend (N * probes * N / clusters * d): a few minutes of
# BLAS on two cores. Without cluster structure the agreement wanted can need most clusters.
_SEARCH_WORK = 3e12
# (point, cluster) pairs the clustered search holds at once (about 32 bytes each with their grouping).
_SEARCHED_PAIRS = 1 << 22
# How many exact nearest points of each check point are kept to replay the clustered search.
_CHECK_DEPTH = 64
# The subsample that checks the clustered search against the exhaustive one, and the agreement it
# must reach (0.99 on 2000 points: the whole dataset agrees on >= 98% but with tiny probability).
_CHECK_POINTS = 2000
_REQUIRED_AGREEMENT = 0.99
# Fixed, so that mingling values depend on the data only, not on the run.
_SEARCH_SEED = 0


@dataclasses.dataclass(frozen=True)
class MinglingValues:
  """Mingling values of a dataset and how far to trust them.

  Attributes:
    values: `[N]` int64, per point how many of its K nearest neighbours (itself excluded) carry
      another label (for targets: one farther than `target_gap`): K times the mingling index, in
      {0, ..., K}.
    neighbors: `K`.
    agreement: the share of points whose value equals an exhaustive search's: 1.0 when the search
      was exhaustive, else measured on a fixed subsample of `_CHECK_POINTS` points.
    target_gap: for real-valued targets, the gap `|y_i - y_j|` beyond which a neighbour's target
      counts as another; None for class labels.
  """

  values: np.ndarray
  neighbors: int
  agreement: float
  target_gap: float | None = None


def checked_target_gap_quantile(quantile: object) -> float:
  """`target_gap_quantile` as a float in (0, 1), or a TypeError / ValueError naming it."""
  number = _checks.real(quantile, "target_gap_quantile", positive=True,
                        type_hint="a number in (0, 1), e.g. 0.9, or None (class labels)")
  if not number < 1.0:
    raise ValueError(f"`target_gap_quantile` must be in (0, 1), e.g. 0.9; got {quantile}.")
  return number


def _validated(features: np.ndarray, labels: np.ndarray, neighbors: int,
               target_gap_quantile: float | None) -> tuple[np.ndarray, np.ndarray]:
  features = np.asarray(features)
  labels = np.asarray(labels)
  if features.ndim != 2:
    raise ValueError(f"`features` must be a 2-D array [N, d]; got shape {features.shape}.")
  if not np.issubdtype(features.dtype, np.number):
    raise TypeError(f"`features` must be numeric; got dtype {features.dtype}.")
  if not np.all(np.isfinite(features)):
    raise ValueError("`features` contains NaN or infinite values; clean or impute them first.")
  if labels.shape != (features.shape[0],):
    raise ValueError(
        f"`labels` must be a 1-D array with one label per row of `features` ({features.shape[0]}); "
        f"got shape {labels.shape}.")
  if target_gap_quantile is None and not np.issubdtype(labels.dtype, np.integer):
    raise TypeError(
        f"`labels` must be integer class ids; got dtype {labels.dtype}. Convert one-hot labels with argmax, "
        "or pass `target_gap_quantile` for real-valued regression targets.")
  if target_gap_quantile is not None:
    checked_target_gap_quantile(target_gap_quantile)
    if not np.issubdtype(labels.dtype, np.number) or np.issubdtype(labels.dtype, np.complexfloating):
      raise TypeError(f"`labels` must be real-valued regression targets; got dtype {labels.dtype}.")
    labels = labels.astype(np.float64)
    if not np.all(np.isfinite(labels)):
      raise ValueError("`labels` (the regression targets) contain NaN or infinite values; clean them first.")
  _checks.integer(neighbors, "neighbors")
  if not 1 <= neighbors < features.shape[0]:
    raise ValueError(
        f"`neighbors` must be in [1, N) = [1, {features.shape[0]}); got {neighbors}. "
        "Use fewer neighbours or more data.")
  return features, labels


def _keep_nearest(best_distances: np.ndarray, best_ids: np.ndarray, rows, distances: np.ndarray,
                  ids: np.ndarray) -> None:
  """Merges `distances` ([len(rows), len(ids)]) to the points `ids` into the rows' nearest so far."""
  wanted = best_ids.shape[1]
  rows = np.arange(len(best_ids))[rows] if isinstance(rows, slice) else rows
  # Only candidates nearer than a row's current farthest kept one can enter it: once a row has
  # met its own neighbourhood, most blocks it searches skip the selection below, and the rows that
  # change usually have a handful of such candidates, gathered instead of selected among all.
  nearer = distances < best_distances[rows].max(axis=1)[:, None]
  changes = np.flatnonzero(nearer.any(axis=1))
  if not len(changes):
    return
  nearer = nearer[changes]
  counts = np.count_nonzero(nearer, axis=1)
  widest = int(counts.max())
  if widest * _SPARSE_SHARE <= len(ids):
    # (Flat indices: numpy's 2-D `nonzero` is about 10x slower than `flatnonzero`.)
    row_of, column = np.divmod(np.flatnonzero(nearer), nearer.shape[1])
    position = np.arange(len(row_of)) - (np.cumsum(counts) - counts)[row_of]
    gathered_distances = np.full((len(changes), widest), np.inf, np.float32)
    gathered_ids = np.zeros((len(changes), widest), np.int64)
    gathered_distances[row_of, position] = distances[changes[row_of], column]
    gathered_ids[row_of, position] = ids[column]
    rows, distances, ids = rows[changes], gathered_distances, gathered_ids
  else:
    rows, distances = rows[changes], distances[changes]
    if len(ids) > wanted:
      nearest = np.argpartition(distances, wanted - 1, axis=1)[:, :wanted]
      distances, ids = np.take_along_axis(distances, nearest, axis=1), ids[nearest]
    else:
      ids = np.broadcast_to(ids, distances.shape)
  distances = np.concatenate([best_distances[rows], distances], axis=1)
  ids = np.concatenate([best_ids[rows], ids], axis=1)
  nearest = np.argpartition(distances, wanted - 1, axis=1)[:, :wanted]
  best_distances[rows] = np.take_along_axis(distances, nearest, axis=1)
  best_ids[rows] = np.take_along_axis(ids, nearest, axis=1)


class _Search:
  """Nearest neighbours by blocks of squared distances on the centred features."""

  def __init__(self, features: np.ndarray, neighbors: int):
    self.features = features
    self.neighbors = neighbors
    # Centred: |a|^2 - 2ab + |b|^2 in float32 cancels badly far from the origin.
    self.mean = features.mean(axis=0, dtype=np.float64).astype(np.float32)
    self.squared_norms = np.empty(features.shape[0], np.float32)
    for start in range(0, features.shape[0], _CANDIDATE_BLOCK):
      block = self.centred(slice(start, start + _CANDIDATE_BLOCK))
      self.squared_norms[start:start + _CANDIDATE_BLOCK] = np.einsum("ij,ij->i", block, block)

  def centred(self, rows) -> np.ndarray:
    return np.subtract(self.features[rows], self.mean, dtype=np.float32)

  def queries(self, rows) -> np.ndarray:
    """The centred rows with a column of ones: the left factor of `distances`."""
    ids = self.features[rows]
    augmented = np.empty((len(ids), ids.shape[1] + 1), np.float32)
    np.subtract(ids, self.mean, out=augmented[:, :-1])
    augmented[:, -1] = 1.0
    return augmented

  def candidates(self, ids: np.ndarray) -> np.ndarray:
    """The right factor of `distances`: -2 times the centred rows, with their squared norms."""
    augmented = self.queries(ids)
    augmented[:, :-1] *= -2.0
    augmented[:, -1] = self.squared_norms[ids]
    return augmented

  @staticmethod
  def distances(queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Squared distances less |query|^2 (the same along a row, so the order is unchanged): one GEMM."""
    return queries @ candidates.T

  def nearest(self, queries: np.ndarray, candidates: np.ndarray, wanted: int) -> np.ndarray:
    """`[len(queries), wanted]` ids: the `wanted` nearest `candidates` (at least that many), nearest first."""
    best_distances = np.full((len(queries), wanted), np.inf, np.float32)
    best_ids = np.zeros((len(queries), wanted), np.int64)
    candidate_step = min(len(candidates), _CANDIDATE_BLOCK)
    query_step = max(1, _BLOCK_ENTRIES // candidate_step)
    query_rows = [self.queries(queries[start:start + query_step]) for start in range(0, len(queries), query_step)]
    # A spread-out sample of the candidates comes first: the bound it sets on every row's nearest
    # lets `_keep_nearest` gather the few nearer candidates of the later blocks instead of
    # selecting among all of them.
    stride = max(1, len(candidates) // (_BOUND_SAMPLE_PER_WANTED * wanted))
    sampled = np.zeros(len(candidates), bool)
    sampled[::stride] = True
    rest = candidates[~sampled]
    blocks = [candidates[sampled]]
    blocks += [rest[start:start + candidate_step] for start in range(0, len(rest), candidate_step)]
    for ids in blocks:
      rows = self.candidates(ids)
      for block, start in enumerate(range(0, len(queries), query_step)):
        _keep_nearest(best_distances, best_ids, slice(start, start + query_step),
                      self.distances(query_rows[block], rows), ids)
    return np.take_along_axis(best_ids, np.argsort(best_distances, axis=1), axis=1)


def _neighbors_of(ids: np.ndarray, nearest: np.ndarray, neighbors: int) -> np.ndarray:
  """`[len(ids), K]`: the points `nearest` ([len(ids), K + 1] ids) holds once each query itself is left out."""
  # With duplicated points the query need not be among its own K + 1 nearest: drop it wherever it
  # is, else an arbitrary one of the K + 1 (the farthest when there are no ties).
  is_self = nearest == ids[:, None]
  drop = np.where(is_self.any(axis=1), is_self.argmax(axis=1), neighbors)
  keep = np.ones_like(nearest, dtype=bool)
  keep[np.arange(len(ids)), drop] = False
  return nearest[keep].reshape(len(ids), neighbors)


def _gaps(labels: np.ndarray, ids: np.ndarray, others: np.ndarray) -> np.ndarray:
  """`[len(ids), K]` |y_i - y_j| between each point's target and its neighbours'."""
  return np.abs(labels[others] - labels[ids, None])


def _count_others(labels: np.ndarray, ids: np.ndarray, others: np.ndarray, target_gap: float | None) -> np.ndarray:
  """Per point, its neighbours `others` with another label, or (targets) a target farther than `target_gap`."""
  if target_gap is None:
    return (labels[others] != labels[ids, None]).sum(axis=1)
  return (_gaps(labels, ids, others) > target_gap).sum(axis=1)


def _target_gap(labels: np.ndarray, ids: np.ndarray, others: np.ndarray, quantile: float | None) -> float | None:
  """The `quantile` of the points' gaps to their neighbours' targets; None for class labels."""
  if quantile is None:
    return None
  return float(np.quantile(_gaps(labels, ids, others), quantile))


class _Clusters:
  """A k-means partition of the points; each point searches the clusters nearest to it."""

  def __init__(self, search: _Search, count: int, rng: np.random.Generator):
    self._search = search
    num_points = search.features.shape[0]
    sample = np.sort(rng.choice(num_points, min(num_points, count * _KMEANS_SAMPLE_PER_CLUSTER), replace=False))
    sample_rows = search.centred(sample)
    centroids = sample_rows[rng.choice(len(sample), count, replace=False)]
    for _ in range(_KMEANS_ROUNDS):
      assignment = self._nearest_centroid(sample_rows, centroids)
      sums = np.zeros_like(centroids)
      np.add.at(sums, assignment, sample_rows)
      sizes = np.bincount(assignment, minlength=count)
      filled = sizes > 0  # an empty cluster keeps its centroid
      centroids[filled] = sums[filled] / sizes[filled, None]
    self.centroids = centroids

  def __len__(self) -> int:
    return len(self.centroids)

  @staticmethod
  def _nearest_centroid(rows: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """`[len(rows)]` the id of the centroid nearest to each row."""
    norms = np.einsum("ij,ij->i", centroids, centroids)
    # In chunks: the k-means sample against all centroids would be 32 * count^2 floats at once
    # (0.65 GB for 1.28M points).
    return np.concatenate([np.argmin(norms[None, :] - 2 * rows[start:start + _QUERY_CHUNK] @ centroids.T, axis=1)
                           for start in range(0, len(rows), _QUERY_CHUNK)])

  @staticmethod
  def _nearest_columns(distances: np.ndarray, count: int) -> np.ndarray:
    """`[rows, count]` int32 columns of the `count` smallest `distances` per row, smallest first."""
    if count == 1:
      return np.argmin(distances, axis=1).astype(np.int32)[:, None]
    if count < distances.shape[1]:
      nearest = np.argpartition(distances, count - 1, axis=1)[:, :count]
    else:
      nearest = np.broadcast_to(np.arange(distances.shape[1]), distances.shape)
    order = np.argsort(np.take_along_axis(distances, nearest, axis=1), axis=1)
    return np.take_along_axis(nearest, order, axis=1).astype(np.int32)

  def nearest(self, ids: np.ndarray, count: int) -> np.ndarray:
    """`[len(ids), count]` the clusters nearest to the points `ids`, nearest first."""
    centroids = np.concatenate([-2.0 * self.centroids, np.einsum("ij,ij->i", self.centroids, self.centroids)[:, None]],
                               axis=1).astype(np.float32)
    return np.concatenate([
        self._nearest_columns(self._search.queries(ids[start:start + _QUERY_CHUNK]) @ centroids.T, count)
        for start in range(0, len(ids), _QUERY_CHUNK)])

  def nearest_neighbors(self, probes: int, progress) -> np.ndarray:
    """`[N, K + 1]` ids: for every point the K + 1 nearest in its `probes` nearest clusters."""
    search = self._search
    num_points = search.features.shape[0]
    members, member_starts = _grouped(self.nearest(np.arange(num_points), 1)[:, 0], len(self))
    best_distances = np.full((num_points, search.neighbors + 1), np.inf, np.float32)
    best_ids = np.zeros((num_points, search.neighbors + 1), np.int64)
    # The (point, cluster) pairs to search, N * probes, for the members of a run of clusters at a
    # time: on data without cluster structure the search needs a large share of the clusters (862
    # of 2000 for 1M standard normal points in 128-d), too many pairs to hold at once. Whole
    # clusters keep the first pass below one block per cluster.
    chunk_points = max(1, _SEARCHED_PAIRS // probes)
    first = 0
    while first < len(self):
      last = max(first + 1, int(np.searchsorted(member_starts, member_starts[first] + chunk_points, side="right")) - 1)
      points = members[member_starts[first]:member_starts[last]]
      first = last
      searched = self.nearest(points, probes)  # [len(points), probes], a point's own cluster first
      own, own_starts = _grouped(searched[:, 0], len(self))
      visits, visit_starts = _grouped(searched[:, 1:].ravel(), len(self))
      visitors = points[visits // max(probes - 1, 1)]
      # Every point first searches its own cluster, where most of its neighbours are: the bound
      # this sets lets `_keep_nearest` skip most rows of the other clusters' blocks.
      for queries_of in (lambda cluster: points[own[own_starts[cluster]:own_starts[cluster + 1]]],
                         lambda cluster: visitors[visit_starts[cluster]:visit_starts[cluster + 1]]):
        for cluster in range(len(self)):
          ids = members[member_starts[cluster]:member_starts[cluster + 1]]
          queries = queries_of(cluster)
          if len(ids) and len(queries):
            rows = search.candidates(ids)
            step = max(1, _BLOCK_ENTRIES // len(ids))
            for start in range(0, len(queries), step):
              block = queries[start:start + step]
              _keep_nearest(best_distances, best_ids, block, search.distances(search.queries(block), rows), ids)
      progress.update(len(points))
    return best_ids


def _grouped(keys: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
  """Positions of `keys` ([n] in 0..count - 1) grouped by key, and where each key's group starts."""
  # numpy sorts 16-bit keys stably by radix sort, several times faster than wider ones.
  sortable = keys.astype(np.uint16) if count <= 1 << 16 else keys
  return np.argsort(sortable, kind="stable"), np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=count))])


def mingling_values(features: np.ndarray, labels: np.ndarray, neighbors: int = 5, *,
                    target_gap_quantile: float | None = None, verbose: bool = False) -> MinglingValues:
  """Per point, how many of its K nearest neighbours (itself excluded) carry another label.

  With `target_gap_quantile` the labels are real-valued regression targets, and a neighbour
  counts when its target differs from the point's by more than the `target_gap_quantile`
  quantile of the gaps `|y_i - y_j|` of all points to their K nearest neighbours: where the target
  changes abruptly (the regression analogue of a class boundary) most neighbours count, where it
  is smooth few do.

  Args:
    features: `[N, d]` array; Euclidean distance is used.
    labels: `[N]` integer class labels (the marks), or real-valued targets with `target_gap_quantile`.
    neighbors: K, the number of nearest neighbours.
    target_gap_quantile: None for class labels; for regression targets, q in (0, 1): about a
      share 1 - q of all neighbour pairs count as differing.
    verbose: show progress if the search takes more than about 2 s.

  Returns:
    The values (K times the mingling index, in `{0, ..., K}`), their agreement with an
    exhaustive search, and for targets the gap threshold.

  Raises:
    ValueError: for shapes that do not match, non-finite features or targets, K outside [1, N) or
      a quantile outside (0, 1).
    TypeError: for non-integer class labels, non-numeric targets or non-numeric features.
  """
  features, labels = _validated(features, labels, neighbors, target_gap_quantile)
  num_points, dim = features.shape
  search = _Search(features, neighbors)
  description = f"mingling values ({neighbors} nearest neighbours)"
  everyone = np.arange(num_points)
  if float(num_points) * num_points * dim <= _EXHAUSTIVE_BUDGET:
    others = np.empty((num_points, neighbors), np.int64)
    with _progress.bar(description, num_points, verbose) as progress:
      for start in range(0, num_points, _QUERY_CHUNK):
        rows = everyone[start:start + _QUERY_CHUNK]
        others[rows] = _neighbors_of(rows, search.nearest(rows, everyone, neighbors + 1), neighbors)
        progress.update(len(rows))
    target_gap = _target_gap(labels, everyone, others, target_gap_quantile)
    return MinglingValues(_count_others(labels, everyone, others, target_gap), neighbors, 1.0, target_gap)

  rng = np.random.default_rng(_SEARCH_SEED)
  with _progress.elapsed(f"{description}: clustering and checking the search", verbose):
    clusters = _Clusters(search, int(round(_CLUSTERS_PER_ROOT * np.sqrt(num_points))), rng)
    check = np.sort(rng.choice(num_points, min(num_points, _CHECK_POINTS), replace=False))
    # Replaying the clustered search on the check points: of a check point's exact nearest
    # points, it finds those in the clusters it searches, so its K + 1 nearest are the first K + 1
    # of them if at least that many are among the _CHECK_DEPTH nearest (else: a disagreement).
    exact_nearest = search.nearest(check, everyone, min(num_points, _CHECK_DEPTH))
    exact_others = _neighbors_of(check, exact_nearest[:, :neighbors + 1], neighbors)
    # For targets, the check points' own gaps estimate the threshold until every point's are known.
    check_gap = _target_gap(labels, check, exact_others, target_gap_quantile)
    exact = _count_others(labels, check, exact_others, check_gap)
    cluster_rank = np.empty((len(check), len(clusters)), np.int32)
    np.put_along_axis(cluster_rank, clusters.nearest(check, len(clusters)), np.arange(len(clusters))[None, :], axis=1)
    own_cluster = clusters.nearest(exact_nearest.ravel(), 1).reshape(exact_nearest.shape)
    ranks = np.take_along_axis(cluster_rank, own_cluster, axis=1)

    def agreement(probes: int) -> float:
      searched = ranks < probes
      first = np.argsort(~searched, axis=1, kind="stable")[:, :neighbors + 1]
      found_others = _neighbors_of(check, np.take_along_axis(exact_nearest, first, axis=1), neighbors)
      found = _count_others(labels, check, found_others, check_gap)
      return float(np.mean((found == exact) & (searched.sum(axis=1) > neighbors)))

    # The fewest clusters to search: doubling, then bisection (agreement grows with `probes`;
    # searching all of them is exhaustive), up to the work allowed.
    most = min(len(clusters), max(1, int(_SEARCH_WORK * len(clusters) / (float(num_points) * num_points * dim))))
    failing, probes = 0, min(_FIRST_PROBES, most)
    while agreement(probes) < _REQUIRED_AGREEMENT and probes < most:
      failing, probes = probes, min(2 * probes, most)
    while probes - failing > 1:
      middle = (failing + probes) // 2
      failing, probes = (failing, middle) if agreement(middle) >= _REQUIRED_AGREEMENT else (middle, probes)
    reached = agreement(probes)
  if reached < _REQUIRED_AGREEMENT and probes < len(clusters):
    warnings.warn(
        f"{description}: the nearest-neighbour search was stopped at {probes} of {len(clusters)} clusters "
        f"({_SEARCH_WORK:.0e} multiply-adds on {num_points} points in {dim}-d); the values agree with an "
        f"exhaustive search on {reached:.0%} of {len(check)} check points ({_REQUIRED_AGREEMENT:.0%} wanted). "
        "The data has little cluster structure at this dimension; features of lower dimension (a `features` "
        "function that projects them) make the search easier. stats().report['mingling_agreement'] keeps the figure.",
        stacklevel=2)

  with _progress.bar(description, num_points, verbose) as progress:
    others = _neighbors_of(everyone, clusters.nearest_neighbors(probes, progress), neighbors)
  target_gap = _target_gap(labels, everyone, others, target_gap_quantile)
  values = _count_others(labels, everyone, others, target_gap)
  exact = _count_others(labels, check, exact_others, target_gap)
  return MinglingValues(values, neighbors, float(np.mean(values[check] == exact)), target_gap)


def mingling_index(features: np.ndarray, labels: np.ndarray, neighbors: int = 5, *,
                   target_gap_quantile: float | None = None) -> np.ndarray:
  """The paper's mingling index M̄_K(x_i) for every point.

  The fraction of the K nearest neighbours of `x_i` (itself excluded, Euclidean distance) whose
  label differs from `x_i`'s: 0 for points deep inside their class, 1 for points surrounded by
  other classes. The search is exhaustive up to N * N * d = 2e11; beyond, a clustered search that
  agrees with the exhaustive one on at least 99% of a fixed 2000-point subsample.

  For regression targets (`target_gap_quantile` set), a neighbour's label differs when its target
  is farther from `x_i`'s than the given quantile of all points' gaps to their neighbours'
  targets.

  Args:
    features: `[N, d]` array of feature vectors.
    labels: `[N]` integer class labels, or real-valued targets with `target_gap_quantile`.
    neighbors: K, the number of nearest neighbours (the paper uses 5).
    target_gap_quantile: None for class labels; q in (0, 1) for regression targets.

  Returns:
    `[N]` float64 array with values in `{0, 1/K, ..., 1}`.

  Raises:
    ValueError: for shapes that do not match, non-finite features or targets, K outside [1, N) or
      a quantile outside (0, 1).
    TypeError: for non-integer class labels, non-numeric targets or non-numeric features.

  Example (a target that steps at x = 0.5 and rises slowly elsewhere: only the points beside the
  step have a neighbour across it):

  >>> import numpy as np, tf_repulsive
  >>> x = np.linspace(0, 1, 11)[:, None]
  >>> y = np.where(x[:, 0] > 0.5, 1.0, 0.0) + 0.1 * x[:, 0]
  >>> tf_repulsive.mingling_index(x, y, neighbors=2, target_gap_quantile=0.9)
  array([0. , 0. , 0. , 0. , 0. , 0.5, 0.5, 0. , 0. , 0. , 0. ])
  """
  return mingling_values(features, labels, neighbors, target_gap_quantile=target_gap_quantile).values / neighbors
