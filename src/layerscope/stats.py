"""Correlations, their intervals and tests, multiple-testing control, and sign changes.

    r, p = pearson(x, y)
    rho, p = spearman(x, y)
    lo, hi = fisher_z_ci(r, n=len(x), level=0.95)    # interval for a Pearson r
    p_perm = permutation_pvalue(x, y, 10_000, np.random.default_rng(42))  # exact when n! <= 10_000
    p_perm = permutation_pvalues(xs, y, 10_000, rng)  # xs: (n, k) -> (k,), the same orderings for every column
    q = bh_qvalues(p_per_layer)                       # Benjamini-Hochberg, NaN kept as NaN
    idx = resample_indices(n, 10_000, rng)            # (10_000, n), one draw per resample
    lo, hi = percentile_ci(bootstrap_pearson(x, y, idx), level=0.95)
    lo, hi = bca_pearson_ci(xs, y, 10_000, 0.95, rng) # BCa intervals, (k,) each
    sign_changes([0.3, 0.1, -0.2])                    # -> [1]: between positions 1 and 2
    t, p = dependent_r_test(r_xy, r_zy, r_xz, n)      # Williams: do r(x, y) and r(z, y) differ?
    loo = leave_one_out_r(x, y);  d = cooks_distance(x, y)   # influence of each point
"""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist

import numpy as np
from scipy import stats

BATCH_VALUES = 2_000_000
"""Resampled values scipy builds at once (a batch of resamples times n times k columns), to bound memory."""


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
    """Two-sided permutation p-value of Pearson r(x, y); see :func:`permutation_pvalues`."""
    return float(permutation_pvalues(np.asarray(x)[:, None], y, n_permutations, rng)[0])


def permutation_pvalues(x, y, n_permutations: int, rng: np.random.Generator) -> np.ndarray:
    """Two-sided permutation p-value of Pearson r for every column of ``x`` (n, k) with ``y`` (n,) -> (k,).

    The statistic is |r| under reorderings of ``y``, the same ones for every column. With n! <=
    ``n_permutations`` every ordering is enumerated and p = #{|r_perm| >= |r|} / n!; otherwise
    ``n_permutations`` random ones give (1 + #{...}) / (1 + n_permutations). NaN where r is undefined.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    xt = x.T  # (k, n): scipy permutes the last axis of y, broadcast to one copy per column

    def abs_r(y_perm: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.abs(pearson_along(xt, y_perm, axis=axis))

    result = stats.permutation_test((np.broadcast_to(y, xt.shape),), abs_r, permutation_type="pairings",
                                    vectorized=True, n_resamples=n_permutations, alternative="greater", axis=-1,
                                    batch=_batch(xt.size), rng=rng)
    return np.where(np.isfinite(pearson_along(xt, y)), result.pvalue, np.nan)


def pearson_along(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Pearson r along ``axis`` of broadcastable arrays, e.g. (k, n) and (B, k, n) -> (B, k); NaN where a side is
    constant."""
    xc = x - x.mean(axis=axis, keepdims=True)
    yc = y - y.mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (xc * yc).sum(axis=axis) / np.sqrt((xc * xc).sum(axis=axis) * (yc * yc).sum(axis=axis))


def bca_pearson_ci(x, y, n_resamples: int, level: float, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
    """BCa bootstrap interval of Pearson r for every column of ``x`` (n, k) with ``y`` (n,): (lo, hi), each (k,).

    ``scipy.stats.bootstrap`` with pairs resampled together, the same resamples for every column.
    NaN, without a warning, where no interval exists (r undefined, or every resample gives the same r).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    xt = x.T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap((xt, np.broadcast_to(y, xt.shape)), pearson_along, n_resamples=n_resamples,
                                 batch=_batch(xt.size), vectorized=True, paired=True, axis=-1,
                                 confidence_level=level, method="BCa", rng=rng)
    return result.confidence_interval.low, result.confidence_interval.high


def _batch(values_per_resample: int) -> int:
    return max(1, BATCH_VALUES // values_per_resample)


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


def dependent_r_test(r_xy: float, r_zy: float, r_xz: float, n: int) -> tuple[float, float]:
    """Williams' t for H0: rho(x, y) = rho(z, y), two correlations on the same n cases that share y
    (Steiger 1980, eq. 7, the test he recommends): ``t, p = dependent_r_test(r_xy, r_zy, r_xz, n)``.

    t = (r_xy - r_zy) sqrt((n - 1)(1 + r_xz) / (2 (n - 1)/(n - 3) |R| + rbar^2 (1 - r_xz)^3)), df = n - 3, where
    |R| = 1 - r_xy^2 - r_zy^2 - r_xz^2 + 2 r_xy r_zy r_xz and rbar = (r_xy + r_zy) / 2; p is two-sided.
    (nan, nan) when n <= 3 or a correlation is not finite.
    """
    rs = np.array([r_xy, r_zy, r_xz], dtype=np.float64)
    if n <= 3 or not np.isfinite(rs).all():
        return float("nan"), float("nan")
    det = max(1 - r_xy**2 - r_zy**2 - r_xz**2 + 2 * r_xy * r_zy * r_xz, 0.0)
    rbar = (r_xy + r_zy) / 2
    denominator = 2 * (n - 1) / (n - 3) * det + rbar**2 * (1 - r_xz) ** 3
    if denominator <= 0:  # x and z identical: the two correlations are the same number
        return 0.0, 1.0
    t = (r_xy - r_zy) * np.sqrt((n - 1) * (1 + r_xz) / denominator)
    return float(t), float(2 * stats.t.sf(abs(t), n - 3))


def leave_one_out_r(x, y) -> np.ndarray:
    """(n,) Pearson r of ``x``, ``y`` without point i, for each i (NaN where a side becomes constant)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = len(x)
    keep = ~np.eye(n, dtype=bool)  # row i keeps every point but i
    return pearson_along(np.broadcast_to(x, (n, n))[keep].reshape(n, n - 1),
                         np.broadcast_to(y, (n, n))[keep].reshape(n, n - 1))


def cooks_distance(x, y) -> np.ndarray:
    """(n,) Cook's distance of each point in the least-squares line of ``y`` on ``x``:
    D_i = e_i^2 / (2 s^2) * h_i / (1 - h_i)^2, h_i = 1/n + (x_i - mean x)^2 / Sxx, s^2 = SSE / (n - 2).
    NaN when n <= 2, x is constant or the fit is exact."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = len(x)
    sxx = ((x - x.mean()) ** 2).sum()
    if n <= 2 or sxx == 0:
        return np.full(n, np.nan)
    fit = stats.linregress(x, y)
    residual = y - (fit.intercept + fit.slope * x)
    s2 = (residual**2).sum() / (n - 2)
    if s2 == 0:
        return np.full(n, np.nan)
    h = 1 / n + (x - x.mean()) ** 2 / sxx
    return residual**2 / (2 * s2) * h / (1 - h) ** 2


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials: with p = k / n and z the (1 + level) / 2 normal
    quantile, (p + z^2 / 2n +- z sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n)."""
    if isinstance(k, bool) or isinstance(n, bool) or int(k) != k or int(n) != n:
        raise ValueError(f"wilson needs whole counts k and n; got k = {k!r}, n = {n!r}")
    k, n = int(k), int(n)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"wilson needs 0 <= k <= n and n >= 1; got k = {k}, n = {n} (count the instances first)")
    if not 0 < level < 1:
        raise ValueError(f"level {level} must lie between 0 and 1, e.g. 0.95")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    lo = 0.0 if k == 0 else max(0.0, centre - half)  # exactly 0 (and 1) at the ends, not a rounding error away
    return lo, 1.0 if k == n else min(1.0, centre + half)
