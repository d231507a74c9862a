"""Intrinsic dimension of a cloud of states, by TwoNN.

    d = twonn_dimension(x)                      # x: (n, D) states of one layer -> float
    d, n_used = twonn_dimension(x, return_n=True)   # also how many distinct points it used

TwoNN (Facco et al. 2017, "Estimating the intrinsic dimension of datasets by a minimal neighborhood
information"): for each point, r1 and r2 are the distances to its first and second nearest neighbours and
mu = r2 / r1. On a locally uniform d-dimensional manifold mu follows the Pareto law P(mu) = d mu^(-d-1), whose
maximum-likelihood estimate over N points is d = N / sum(log mu).

Duplicate rows are removed first (np.unique over rows): a repeated point has r1 = 0. The neighbours are found
exactly by brute force, a block of rows against all points at a time, so no n x n matrix is built when n is
large (a block holds at most about 64 MB of distances). Within a block the squared distances come from
||a||^2 + ||b||^2 - 2 a.b on the centred points (float64); those pick each point's few nearest candidates,
whose distances are then recomputed directly from the differences, so r1 and r2 carry no cancellation error.
"""

from __future__ import annotations

import numpy as np

from ..errors import check_finite_rows

BLOCK_BYTES = 64 * 2**20  # distances held at a time
CANDIDATES = 4  # nearest candidates per point re-measured exactly


def twonn_dimension(x: np.ndarray, return_n: bool = False) -> float | tuple[float, int]:
    """The TwoNN maximum-likelihood intrinsic dimension of the rows of x (n, D), float64.

    With ``return_n`` also the number of distinct rows used (N in the formula). Raises ValueError when fewer
    than 3 distinct rows remain, or when every point's two nearest neighbours are equally far (mu = 1
    everywhere, e.g. a regular grid), where the estimate is infinite.
    """
    points = _distinct(x)
    r1, r2 = two_nearest(points)
    total = float(np.sum(np.log(r2 / r1)))
    if total <= 0:
        raise ValueError(
            f"every one of the {len(points)} points has its two nearest neighbours at the same "
            "distance (a regular grid?), so TwoNN's estimate is infinite; use points with some "
            "spread (real states, or add small noise)"
        )
    dimension = len(points) / total
    return (dimension, len(points)) if return_n else dimension


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
