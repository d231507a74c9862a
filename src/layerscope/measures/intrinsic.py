"""Intrinsic dimension of a cloud of states, by TwoNN.

    d = twonn_dimension(x)                      # x: (n, D) states of one layer -> float
    d, n_used = twonn_dimension(x, return_n=True)   # also how many distinct points it used
    d = twonn_dimension(x, estimator="facco")   # Facco et al.'s regression, the top 10 % of mu discarded
    d = twonn_from_distances(pairwise_distances(x)[np.ix_(u, u)])   # a subset u of the points, no refit of distances

TwoNN (Facco et al. 2017, "Estimating the intrinsic dimension of datasets by a minimal neighborhood
information"): for each point, r1 and r2 are the distances to its first and second nearest neighbours and
mu = r2 / r1. On a locally uniform d-dimensional manifold mu follows the Pareto law P(mu) = d mu^(-d-1), whose
maximum-likelihood estimate over N points is d = N / sum(log mu) (``estimator="mle"``, the default).
``estimator="facco"`` is the paper's own fit (and scikit-dimension's default): sort mu, take the empirical
distribution F_i = i / N, discard the largest 10 % (``FACCO_DISCARD``), and fit -log(1 - F) = d log(mu) by least
squares through the origin. The two agree on clean manifolds and can differ by 10-15 % on real states.

Duplicate rows are removed first (np.unique over rows): a repeated point has r1 = 0. The neighbours are found
exactly by brute force, a block of rows against all points at a time, so no n x n matrix is built when n is
large (a block holds at most about 64 MB of distances). Within a block the squared distances come from
||a||^2 + ||b||^2 - 2 a.b on the centred points (float64); those pick each point's few nearest candidates,
whose distances are then recomputed directly from the differences, so r1 and r2 carry no cancellation error.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import pdist, squareform

from ..errors import check_finite_rows

BLOCK_BYTES = 64 * 2**20  # distances held at a time
CANDIDATES = 4  # nearest candidates per point re-measured exactly
ESTIMATORS = ("mle", "facco")
FACCO_DISCARD = 0.1
"""The fraction of the largest mu Facco et al.'s fit leaves out (scikit-dimension's ``discard_fraction``)."""


def twonn_dimension(x: np.ndarray, return_n: bool = False, estimator: str = "mle") -> float | tuple[float, int]:
    """The TwoNN intrinsic dimension of the rows of x (n, D), float64, by ``estimator`` (module docstring).

    With ``return_n`` also the number of distinct rows used (N in the formula). Raises ValueError when fewer
    than 3 distinct rows remain, or when every point's two nearest neighbours are equally far (mu = 1
    everywhere, e.g. a regular grid), where the estimate is infinite.
    """
    points = _distinct(x)
    r1, r2 = two_nearest(points)
    dimension = _estimate(r2 / r1, estimator)
    if not np.isfinite(dimension):
        raise ValueError(
            f"every one of the {len(points)} points has its two nearest neighbours at the same "
            "distance (a regular grid?), so TwoNN's estimate is infinite; use points with some "
            "spread (real states, or add small noise)"
        )
    return (dimension, len(points)) if return_n else dimension


def pairwise_distances(x: np.ndarray) -> np.ndarray:
    """(n, n) float64 Euclidean distances between the rows of x (n, D), each from the differences (no
    cancellation); for many TwoNN estimates on subsets of the same points (:func:`twonn_from_distances`)."""
    return squareform(pdist(np.asarray(x, dtype=np.float64)))


def twonn_from_distances(distances: np.ndarray, estimator: str = "mle") -> float:
    """TwoNN dimension of m points given their (m, m) distances; a point at distance 0 from another (both copies
    of a repeated row) is left out. NaN when fewer than 3 points remain or the
    estimate is infinite."""
    d = np.array(distances, dtype=np.float64, copy=True)
    np.fill_diagonal(d, np.inf)
    keep = d.min(axis=1) > 0
    if keep.sum() < 3:
        return float("nan")
    d = d[np.ix_(keep, keep)]
    nearest = np.partition(d, 1, axis=1)[:, :2]
    return _estimate(nearest[:, 1] / nearest[:, 0], estimator)


def _estimate(mu: np.ndarray, estimator: str) -> float:
    """d from the ratios mu = r2 / r1 (N,); inf when every mu is 1."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"TwoNN estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")
    x = np.log(np.sort(mu))
    if estimator == "mle":
        total = float(x.sum())
        return len(x) / total if total > 0 else float("inf")
    n = len(x)
    kept = int(np.floor(n * (1 - FACCO_DISCARD)))
    x, y = x[:kept], -np.log(1 - np.arange(1, kept + 1) / n)
    denominator = float(x @ x)
    return float(x @ y) / denominator if denominator > 0 else float("inf")


def _distinct(x: np.ndarray) -> np.ndarray:
    """The distinct rows of x as float64 (N, D), N >= 3, every entry finite."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"x has shape {x.shape}; pass a 2-D array (n points, D features)")
    check_finite_rows(x, "states", "an intrinsic dimension")
    points = np.unique(x, axis=0) if len(x) else x
    if len(points) < 3:
        raise ValueError(
            f"x has {len(points)} distinct row(s) (of {len(x)}); TwoNN needs at least 3 distinct "
            "points, so pass more texts or tokens"
        )
    return points


def two_nearest(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """r1, r2 (N,): each point's distances to its nearest and second nearest other point, exact, float64.

    points: (N, D) float64 with N >= 3; distinct rows give r1 > 0.
    """
    n = len(points)
    centred = points - points.mean(axis=0)
    sq_norms = np.einsum("nd,nd->n", centred, centred)
    k = min(CANDIDATES, n - 1)
    block = max(1, BLOCK_BYTES // (8 * max(n, k * points.shape[1])))  # distances, then candidate differences
    r1, r2 = np.empty(n), np.empty(n)
    for start in range(0, n, block):
        stop = min(start + block, n)
        sq = sq_norms[start:stop, None] + sq_norms[None, :] - 2.0 * (centred[start:stop] @ centred.T)
        sq[np.arange(stop - start), np.arange(start, stop)] = np.inf  # a point is not its own neighbour
        candidates = np.argpartition(sq, k - 1, axis=1)[:, :k]
        exact = np.linalg.norm(centred[candidates] - centred[start:stop, None, :], axis=2)
        exact.sort(axis=1)
        r1[start:stop], r2[start:stop] = exact[:, 0], exact[:, 1]
    return r1, r2
