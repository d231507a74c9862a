"""Correlations, their intervals and tests, multiple-testing control, and sign changes.

    r, p = pearson(x, y)
    rho, p = spearman(x, y)
    lo, hi = fisher_z_ci(r, n=len(x), level=0.95)    # interval for a Pearson r
    p_perm = permutation_pvalue(x, y, 10_000, np.random.default_rng(42))
    q = bh_qvalues(p_per_layer)                       # Benjamini-Hochberg, NaN kept as NaN
    idx = resample_indices(n, 10_000, rng)            # (10_000, n), one draw per resample
    lo, hi = percentile_ci(bootstrap_pearson(x, y, idx), level=0.95)
    sign_changes([0.3, 0.1, -0.2])                    # -> [1]: between positions 1 and 2
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def pearson(x, y) -> tuple[float, float]:
    """Pearson r and its two-sided p-value; (nan, nan) when either side is constant."""
    return _correlation(stats.pearsonr, x, y)


def spearman(x, y) -> tuple[float, float]:
    """Spearman rho and its two-sided p-value; (nan, nan) when either side is constant."""
    return _correlation(stats.spearmanr, x, y)


def _correlation(test, x, y) -> tuple[float, float]:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan")
    result = test(x, y)
    return float(result.statistic), float(result.pvalue)


def fisher_z_ci(r: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Confidence interval for a Pearson r from n pairs: tanh(atanh(r) -+ z / sqrt(n - 3)).
    (nan, nan) when n <= 3 or r is not finite."""
    if n <= 3 or not np.isfinite(r):
        return float("nan"), float("nan")
    z = np.arctanh(np.clip(r, -1 + 1e-15, 1 - 1e-15))
    half = stats.norm.ppf(0.5 + level / 2) / np.sqrt(n - 3)
    return float(np.tanh(z - half)), float(np.tanh(z + half))


def permutation_pvalue(x, y, n_permutations: int, rng: np.random.Generator) -> float:
    """Two-sided permutation p-value of Pearson r: (1 + #{|r_perm| >= |r|}) / (1 + n_permutations),
    with every permutation of y drawn at once."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    r, _ = pearson(x, y)
    if not np.isfinite(r):
        return float("nan")
    permuted = rng.permuted(np.broadcast_to(y, (n_permutations, len(y))), axis=1)
    xc, yc = x - x.mean(), permuted - y.mean()
    r_perm = yc @ xc / np.sqrt((xc @ xc) * np.einsum("ij,ij->i", yc, yc))
    hits = np.count_nonzero(np.abs(r_perm) >= abs(r) - 1e-12)  # ties count, whatever the rounding
    return float((1 + hits) / (1 + n_permutations))


def bh_qvalues(p) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q) over the finite entries of ``p``; NaN stays NaN."""
    p = np.asarray(p, dtype=np.float64)
    q = np.full_like(p, np.nan)
    finite = np.isfinite(p)
    if finite.any():
        q[finite] = stats.false_discovery_control(p[finite], method="bh")
    return q


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
