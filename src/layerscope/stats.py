"""Correlations, bootstrap confidence intervals and sign changes.

    r, p = pearson(x, y)
    idx = resample_indices(n, 10_000, rng)            # (10_000, n), one draw per resample
    lo, hi = percentile_ci(bootstrap_pearson(x, y, idx), level=0.95)
    sign_changes([0.3, 0.1, -0.2])                    # -> [1]: between positions 1 and 2
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def pearson(x, y) -> tuple[float, float]:
    """Pearson r and its two-sided p-value; (nan, nan) when either side is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan")
    result = stats.pearsonr(x, y)
    return float(result.statistic), float(result.pvalue)


def resample_indices(n: int, n_resamples: int, rng: np.random.Generator | np.random.RandomState) -> np.ndarray:
    """(n_resamples, n) indices drawn with replacement.

    With ``np.random.RandomState`` this draws exactly what ``n_resamples`` calls of
    ``rng.choice(n, size=n, replace=True)`` would, so a seeded notebook loop reproduces.
    """
    if isinstance(rng, np.random.RandomState):
        return rng.randint(0, n, size=(n_resamples, n))
    return rng.integers(0, n, size=(n_resamples, n))


def bootstrap_pearson(x, y, idx: np.ndarray) -> np.ndarray:
    """Pearson r of every resample ``x[idx[k]], y[idx[k]]``, vectorised over resamples.

    Resamples where either side is constant are left out, as the notebooks skip them.
    """
    xb = _centered(np.asarray(x, dtype=np.float64)[idx])
    yb = _centered(np.asarray(y, dtype=np.float64)[idx])
    sxx, syy = np.einsum("ij,ij->i", xb, xb), np.einsum("ij,ij->i", yb, yb)
    keep = (sxx > 0) & (syy > 0)
    return np.einsum("ij,ij->i", xb[keep], yb[keep]) / np.sqrt(sxx[keep] * syy[keep])


def _centered(a: np.ndarray) -> np.ndarray:
    return a - a.mean(axis=1, keepdims=True)


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The equal-tailed percentile interval of bootstrap ``samples`` (numpy's linear rule)."""
    alpha = 1.0 - level
    samples = np.asarray(samples)
    if samples.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.percentile(samples, [alpha / 2 * 100, (1 - alpha / 2) * 100])
    return float(lo), float(hi)


def sign_changes(values) -> list[int]:
    """Positions i where ``values[i]`` and ``values[i + 1]`` have strictly opposite signs."""
    v = np.asarray(values, dtype=np.float64)
    return [int(i) for i in np.flatnonzero(v[:-1] * v[1:] < 0)]
