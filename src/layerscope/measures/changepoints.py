"""Where a profile over depth changes course: breakpoints of a piecewise-linear fit.

    fit = piecewise_linear_breaks(y)            # y: (L,) one number per layer -> 2 breaks, 3 segments
    fit.breaks                                  # e.g. (7, 19): the first layer of each new segment
    fit.segments[0].slope, fit.segments[0].intercept    # segment k's line: intercept + slope * layer
    fit.rss                                     # residual sum of squares of the whole fit
    piecewise_linear_breaks(y, n_breaks=3, min_size=4)
    many_breaks(ys, n_breaks=2)                 # ys: (R, L) many profiles at once -> (R, 2) breaks, the same fits

Method: the profile y_0 .. y_{L-1} is cut into n_breaks + 1 consecutive segments of at least min_size layers,
and each segment gets its own least-squares straight line in the layer index (the lines need not meet at the
breaks). Of all ways to place the cuts, the one with the smallest total residual sum of squares is returned;
the search is exact and exhaustive, by dynamic programming over the first layer of each segment (O(L^2)
segment fits, each in closed form, float64). Ties go to the earliest cuts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import LayerscopeError


@dataclass(frozen=True)
class Segment:
    """Layers ``start`` to ``stop - 1`` and their least-squares line: y ~ intercept + slope * layer."""

    start: int
    stop: int
    slope: float
    intercept: float


@dataclass(frozen=True)
class PiecewiseLinearFit:
    """``breaks``: the first layer of each segment after the first (ascending); ``segments``: the n_breaks + 1
    fitted segments in order; ``rss``: the sum of their residual sums of squares."""

    breaks: tuple[int, ...]
    segments: tuple[Segment, ...]
    rss: float


def piecewise_linear_breaks(y: np.ndarray, n_breaks: int = 2, min_size: int = 2) -> PiecewiseLinearFit:
    """The least-squares fit of n_breaks + 1 independent straight-line segments, each at least ``min_size``
    points long, to the profile y (L,), found by exhaustive search (module docstring)."""
    y = _profile(y)
    if n_breaks < 0 or min_size < 2:
        raise ValueError(
            f"n_breaks={n_breaks}, min_size={min_size}; pass n_breaks >= 0 and min_size >= 2 (a line needs 2 points)"
        )
    n_segments = n_breaks + 1
    size = len(y)
    if size < n_segments * min_size:
        raise ValueError(
            f"the profile has {size} points, too few for {n_segments} segments of at least "
            f"{min_size}; pass fewer n_breaks or a smaller min_size"
        )
    cost = _segment_costs(y, min_size)
    # best[s, j]: the smallest RSS of y[:j] cut into s + 1 segments; start[s, j]: where its last segment starts
    best = np.full((n_segments, size + 1), np.inf)
    start = np.zeros((n_segments, size + 1), dtype=int)
    best[0] = cost[0]
    for s in range(1, n_segments):
        for j in range((s + 1) * min_size, size + 1):
            for i in range(s * min_size, j - min_size + 1):
                total = best[s - 1, i] + cost[i, j]
                if total < best[s, j]:
                    best[s, j], start[s, j] = total, i
    cuts = [size]
    for s in range(n_segments - 1, 0, -1):
        cuts.append(start[s, cuts[-1]])
    bounds = [0, *reversed(cuts)]
    segments = tuple(_line(y, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    return PiecewiseLinearFit(tuple(int(b) for b in bounds[1:-1]), segments, float(best[n_breaks, size]))


def many_breaks(ys: np.ndarray, n_breaks: int = 2, min_size: int = 2) -> np.ndarray:
    """(R, n_breaks) int: the breaks of :func:`piecewise_linear_breaks` for each row of ``ys`` (R, L), by the same
    exhaustive search vectorised over rows (for bootstrap resamples of one profile). Every entry must be finite."""
    ys = np.asarray(ys, dtype=np.float64)
    if ys.ndim != 2 or not np.isfinite(ys).all():
        raise ValueError(f"ys has shape {ys.shape}; pass a finite 2-D array, one profile per row")
    n_segments, (rows, size) = n_breaks + 1, ys.shape
    if n_breaks < 0 or min_size < 2 or size < n_segments * min_size:
        raise ValueError(f"{size} points cannot be cut into {n_segments} segments of at least {min_size} "
                         "(min_size >= 2); pass fewer n_breaks or a smaller min_size")
    cost = np.full((size + 1, size + 1, rows), np.inf)
    for i in range(size):
        for j in range(i + min_size, size + 1):
            x = np.arange(i, j, dtype=np.float64)
            xc, yc = x - x.mean(), ys[:, i:j] - ys[:, i:j].mean(axis=1, keepdims=True)
            residuals = yc - (yc @ xc / (xc @ xc))[:, None] * xc
            cost[i, j] = np.einsum("rk,rk->r", residuals, residuals)
    best = np.full((n_segments, size + 1, rows), np.inf)
    start = np.zeros((n_segments, size + 1, rows), dtype=int)
    best[0] = cost[0]
    for s in range(1, n_segments):
        for j in range((s + 1) * min_size, size + 1):
            for i in range(s * min_size, j - min_size + 1):
                total = best[s - 1, i] + cost[i, j]
                better = total < best[s, j]  # strict: ties keep the earliest cut, as the single fit does
                best[s, j] = np.where(better, total, best[s, j])
                start[s, j] = np.where(better, i, start[s, j])
    cuts = [np.full(rows, size)]
    for s in range(n_segments - 1, 0, -1):
        cuts.append(start[s, cuts[-1], np.arange(rows)])
    return np.stack(cuts[:0:-1], axis=1) if n_breaks else np.zeros((rows, 0), dtype=int)


def _profile(y: np.ndarray) -> np.ndarray:
    """y as float64 (L,) with every entry finite."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError(f"y has shape {y.shape}; pass a 1-D profile, one number per layer")
    if not np.isfinite(y).all():
        bad = np.flatnonzero(~np.isfinite(y))
        raise LayerscopeError(
            f"the profile holds NaN or inf at {len(bad)} layer(s) (the first is {bad[0]}); "
            "a breakpoint fit needs a number at every layer, so drop those layers (or fill "
            "them) first"
        )
    return y


def _segment_costs(y: np.ndarray, min_size: int) -> np.ndarray:
    """cost[i, j]: the residual sum of squares of the least-squares line through y[i:j] (inf when shorter than
    min_size), (L + 1, L + 1)."""
    size = len(y)
    cost = np.full((size + 1, size + 1), np.inf)
    for i in range(size):
        for j in range(i + min_size, size + 1):
            cost[i, j] = _rss(np.arange(i, j, dtype=np.float64), y[i:j])
    return cost


def _rss(x: np.ndarray, y: np.ndarray) -> float:
    """Residual sum of squares of the least-squares line y ~ a + b x (x: at least 2 distinct values)."""
    xc, yc = x - x.mean(), y - y.mean()
    residuals = yc - (xc @ yc / (xc @ xc)) * xc
    return float(residuals @ residuals)


def _line(y: np.ndarray, start: int, stop: int) -> Segment:
    x = np.arange(start, stop, dtype=np.float64)
    xc = x - x.mean()
    slope = float(xc @ (y[start:stop] - y[start:stop].mean()) / (xc @ xc))
    return Segment(start, stop, slope, float(y[start:stop].mean() - slope * x.mean()))


def thirds(layers: list[int]) -> dict[str, list[int]]:
    """``thirds([0, 1, ..., 30])``: the layers split into early, mid and late thirds as the notebooks split them
    (cuts at n // 3 and 2n // 3 of the n layers listed); the phases study's split."""
    n = len(layers)
    return {"early": layers[: n // 3], "mid": layers[n // 3 : 2 * n // 3], "late": layers[2 * n // 3 :]}
