"""The statistics of the causal tests, per unit (a pair, or a group of a two-class label set), from NLL changes.

    pref, damage = unit_effects(delta, is_a, unit)         # (..., U) each: the change of the log-odds of A over B
                                                             # and the NLL increase of the unit's own texts
    s, d = sign_parts(e_plus, e_minus)                      # S(alpha) = (E(+) - E(-)) / 2, D(alpha) = (E(+) + E(-)) / 2
    b = slope(alphas, s_per_alpha)                          # least squares through the origin, per unit
    p = sign_flip_p(x, n_flips, rng)                        # one-sided: is the mean of x above 0?
    mde = min_detectable(x, level=0.05, power=0.8)          # the smallest mean the test finds 80 % of the time
    lo, hi = unit_ci(x, n_bootstrap, level, rng)            # percentile interval over units

Conventions (what the report quotes):

- A text's NLL is its summed next-token NLL over its scored tokens (for a pair: the tokens after the shared
  start). ``delta`` = edited - intact, per text.
- pref(unit) = the mean over its class-B texts of NLL minus the mean over its class-A texts (a pair: NLL(B) -
  NLL(A) = log p(A) - log p(B), the log-odds of A's differing part over B's). An effect is pref(edited) -
  pref(intact); positive: the edit moved the model towards A. A unit without one of the classes (a group of one
  class) counts that class's term as 0.
- damage(unit) = the mean over its texts of delta: how much the edit costs the unit's own texts. Removing a
  contrast the model uses takes A-ness out of A's text and B-ness out of B's: both texts' own continuations lose
  probability (damage > 0), while their difference, the preference, has no predicted sign.
- The tests are paired over units: x = the unit's effect less the null directions' mean effect on the same unit;
  p = (1 + #{sign flips s: mean(s * x) >= mean(x)}) / (1 + n_flips), every flip enumerated when 2^U <= n_flips.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import stats

from ...stats import percentile_ci, resample_indices

N_FLIPS = 10_000
"""Random sign flips per p (every one of the 2^U when there are fewer)."""


def unit_codes(units) -> np.ndarray:
    """(n,) int 0..U-1: each text's unit, numbered in order of first appearance."""
    names = [str(u) for u in np.asarray(units).tolist()]
    number = {u: i for i, u in enumerate(dict.fromkeys(names))}
    return np.array([number[u] for u in names], dtype=np.int64)


def class_means(values: np.ndarray, members: np.ndarray, unit: np.ndarray, n_units: int) -> np.ndarray:
    """(..., U) the mean of ``values`` (..., n) over each unit's texts among ``members`` (n,) bool; 0 where a unit
    has none."""
    onehot = (unit[:, None] == np.arange(n_units)[None, :]) & members[:, None]  # (n, U)
    counts = onehot.sum(axis=0)
    sums = values @ onehot.astype(np.float64)
    return np.divide(sums, counts, out=np.zeros_like(sums, dtype=np.float64), where=counts > 0)


def unit_effects(delta: np.ndarray, is_a: np.ndarray, unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``delta`` (..., n) per-text NLL change -> (preference change (..., U), damage (..., U)): see the module
    docstring; units 0..U-1 from ``unit`` (n,)."""
    delta = np.asarray(delta, dtype=np.float64)
    n_units = int(unit.max()) + 1
    pref = class_means(delta, ~is_a, unit, n_units) - class_means(delta, is_a, unit, n_units)
    damage = class_means(delta, np.ones_like(is_a), unit, n_units)
    return pref, damage


def sign_parts(e_plus: np.ndarray, e_minus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, D): the part of a push's effect that reverses with its sign, (E(+) - E(-)) / 2, and the part that does
    not, (E(+) + E(-)) / 2 (damage)."""
    return (e_plus - e_minus) / 2, (e_plus + e_minus) / 2


def slope(alphas, s: np.ndarray) -> np.ndarray:
    """Least-squares slope through the origin of S over alpha: sum(alpha * S) / sum(alpha^2); ``s`` (A, ...)."""
    a = np.asarray(alphas, dtype=np.float64)
    return np.tensordot(a, s, axes=(0, 0)) / float(a @ a)


def sign_flip_p(x: np.ndarray, n_flips: int = N_FLIPS, rng: np.random.Generator | None = None) -> float:
    """One-sided paired sign-flip p that the mean of ``x`` (U,) is above 0 (see the module docstring); NaN for
    fewer than 2 units."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2 or not np.isfinite(x).all():
        return float("nan")
    observed = x.mean()
    if 2 ** len(x) <= n_flips:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(x))))
        return float(np.mean(signs @ x / len(x) >= observed - 1e-12 * max(1.0, abs(observed))))
    rng = rng or np.random.default_rng(0)
    signs = rng.choice((-1.0, 1.0), size=(n_flips, len(x)))
    hits = np.sum(signs @ x / len(x) >= observed - 1e-12 * max(1.0, abs(observed)))
    return float((1 + hits) / (1 + n_flips))


def min_detectable(x: np.ndarray, level: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean of ``x`` (U,) a one-sided paired test at ``level`` finds with probability ``power``,
    from the spread of ``x``: (t_{1-level} + t_{power}) * sd / sqrt(U) on U - 1 degrees of freedom (the t-test's
    approximation of the sign-flip test)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < 2:
        return float("nan")
    df = n - 1
    return float((stats.t.ppf(1 - level, df) + stats.t.ppf(power, df)) * np.std(x, ddof=1) / np.sqrt(n))


def unit_ci(x: np.ndarray, n_bootstrap: int, level: float, rng: np.random.Generator) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x`` (U,) over resampled units."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2:
        return float("nan"), float("nan")
    return percentile_ci(x[resample_indices(len(x), n_bootstrap, rng)].mean(axis=1), level)


def ratio_ci(num: np.ndarray, den: np.ndarray, n_bootstrap: int, level: float,
             rng: np.random.Generator) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(num) / mean(den) over resampled units (both means per resample)."""
    idx = resample_indices(len(num), n_bootstrap, rng)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = num[idx].mean(axis=1) / den[idx].mean(axis=1)
    r = r[np.isfinite(r)]
    return percentile_ci(r, level) if len(r) else (float("nan"), float("nan"))


def band(values: np.ndarray, level: float) -> tuple[float, float]:
    """The central ``level`` range of the null directions' mean effects (K,): where one more null direction's mean
    effect falls."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.percentile(values, 50 * (1 - level))), float(np.percentile(values, 50 * (1 + level)))
