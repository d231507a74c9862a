"""How a verdict earns its label, and the checks that can take it away.

    text = not_significant(n=6, p=0.10, q=0.21, ci=(-0.17, 0.95))
    # "not significant (n = 6, p_perm = 0.1, q = 0.21, 95% CI [-0.170, +0.950])"
    checks = [check_entry("without position 0", 0.81, "ALIGNED", flips=False),
              check_entry("after the final norm", -0.2, "not significant", flips=True)]
    robustness(checks)        # "not robust: flips after the final norm" (or "robust to all 2 sensitivity checks")
    influence(ua, pref, names)    # leave-one-out r per category, Cook's distance, flagged names
    significant, noise = sign_flips(layers, ua, pref, level=0.95)

A check is a dict ``{"check", "value", "label", "flips", ...}``: the headline number and label recomputed under
one change of the data (a category left out, position 0 or the massive-activation tokens left out of the mean, the
final layer after the final norm), and whether the label differs from the headline's.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats

from ..report.markdown import number, signed
from ..stats import cooks_distance, dependent_r_test, leave_one_out_r, pearson


def cook_cutoff(n: int) -> float:
    """Cook's distance above which a point is influential: the median of F(2, n - 2), Cook's own reference
    (about 0.69 for n = 6 to 0.71 for n = 40). The looser 4/n rule flags a point in most clean samples."""
    return float(stats.f.ppf(0.5, 2, n - 2)) if n > 2 else float("nan")


def not_significant(n: int, p: float | None = None, q: float | None = None,
                    ci: tuple[float | None, float | None] | None = None, level: float = 0.95,
                    p_name: str = "p_perm", what: str = "not significant") -> str:
    """``"not significant (n = 6, p_perm = 0.1, q = 0.21, 95% CI [-0.170, +0.950])"``; absent parts left out."""
    parts = [f"n = {n}"]
    if p is not None:
        parts.append(f"{p_name} = {number(p)}")
    if q is not None:
        parts.append(f"q = {number(q)}")
    if ci is not None and None not in ci:
        parts.append(f"{level:.0%} CI [{signed(ci[0])}, {signed(ci[1])}]")
    return f"{what} ({', '.join(parts)})"


def check_entry(name: str, value: float | None, label: str, flips: bool, **extra) -> dict:
    """One sensitivity check of a verdict: its ``name`` ("without position 0"), the headline ``value`` and
    ``label`` under it, and whether the label ``flips`` against the headline's."""
    return {"check": name, "value": value, "label": label, "flips": bool(flips), **extra}


def robustness(checks: list[dict]) -> str:
    """``"not robust: flips without X, after the final norm"`` when any check flips the label,
    ``"robust to all 9 sensitivity checks"`` when none does, ``""`` without checks."""
    if not checks:
        return ""
    flipped = [c["check"] for c in checks if c["flips"]]
    if flipped:
        return "not robust: flips " + ", ".join(flipped)
    return f"robust to all {len(checks)} sensitivity checks"


def influence(x, y, names: list[str]) -> dict:
    """Leave-one-out influence of each point on r(x, y) (points: e.g. categories named ``names``).

    Returns ``{"r": full r, "loo_r": {name: r without it}, "cooks": {name: max Cook's distance of the two
    regressions, y on x and x on y}, "cutoff": :func:`cook_cutoff`, "flagged": [names whose Cook's distance > cutoff
    or whose removal flips the
    sign of r], "range": [min, max] of the leave-one-out r}``; None for undefined numbers.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = len(x)
    r = pearson(x, y)[0]
    loo = leave_one_out_r(x, y)
    cooks = np.fmax(cooks_distance(x, y), cooks_distance(y, x))
    flagged = [name for name, d, rl in zip(names, cooks, loo, strict=False)
               if (np.isfinite(d) and d > cook_cutoff(n)) or (np.isfinite(rl) and np.isfinite(r) and rl * r < 0)]
    finite = loo[np.isfinite(loo)]
    return {"r": _defined(r), "loo_r": {name: _defined(v) for name, v in zip(names, loo, strict=False)},
            "cooks": {name: _defined(d) for name, d in zip(names, cooks, strict=False)},
            "cutoff": _defined(cook_cutoff(n)),
            "flagged": flagged,
            "range": [float(finite.min()), float(finite.max())] if finite.size else [None, None]}


SIGN_FLIP_PERMUTATIONS = 2000
"""Permutations of y behind :func:`sign_flips`' family-wise p (its smallest possible value is 1/2001)."""


def sign_flips(layers: list[int], x, y, level: float = 0.95, n_permutations: int = SIGN_FLIP_PERMUTATIONS,
               seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Sign changes of r(x[:, i], y) between consecutive tested layers whose r is defined, split into those
    where the two r differ beyond what chance gives anywhere in the profile and the flips within noise.

    Each candidate flip gets Williams' t for two correlations sharing y, and a family-wise p from the max-T
    permutation test (Westfall & Young 1993): y is permuted ``n_permutations`` times, each permutation's largest
    |t| over its own candidate flips (0 when it has none) is one draw of the null, and ``p_fwer`` of a flip is
    ``(1 + #{draws >= |t|}) / (1 + n_permutations)`` (a draw within 1e-6 of |t|, relative, counts as equal:
    with few categories the observed order recurs among the permutations). A flip is significant when
    ``p_fwer < 1 - level``, so a profile with no association anywhere shows a significant flip at most
    ``1 - level`` of the time, however many times it crosses zero (Benjamini-Hochberg over the flips that were
    picked because they cross zero did not hold this on shuffled preferences: docs/validation.md).

    x: (n, len(layers)), y: (n,). Each flip is ``{"layer_before", "layer_after", "r_before", "r_after", "t", "p",
    "p_fwer"}``. With n! <= ``n_permutations`` every ordering of y is a draw and p_fwer = #{draws >= |t|} / n!.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rs = [pearson(column, y)[0] for column in x.T]
    kept = [i for i, r in enumerate(rs) if np.isfinite(r)]
    flips = []
    for i, j in itertools.pairwise(kept):
        if rs[i] * rs[j] < 0:
            t, p = dependent_r_test(rs[j], rs[i], pearson(x[:, i], x[:, j])[0], len(y))
            flips.append({"layer_before": layers[i], "layer_after": layers[j], "r_before": float(rs[i]),
                          "r_after": float(rs[j]), "t": _defined(t), "p": _defined(p)})
    for flip in flips:
        flip["p_fwer"] = None  # n <= 3: Williams' t is undefined, so no flip can be tested
    if flips and len(y) > 3:
        exact, draws = max_flip_t(x[:, kept], y, n_permutations, seed)
        for flip in flips:
            t = flip["t"]
            reached = None if t is None else np.count_nonzero(draws >= abs(t) * (1 - 1e-6))
            flip["p_fwer"] = (None if t is None else float(reached / len(draws)) if exact
                              else float((1 + reached) / (1 + len(draws))))
    significant = [f for f in flips if f.get("p_fwer") is not None and f["p_fwer"] < 1 - level]
    return significant, [f for f in flips if f not in significant]


def flip_p_text(flip: dict) -> str:
    """``"p_fwer = 0.012"`` of a sign flip, or ``"q = 0.012"`` for a flip recorded before 0.13 (Benjamini-Hochberg
    over the candidate flips), so that older results still render."""
    return f"p_fwer = {number(flip['p_fwer'])}" if "p_fwer" in flip else f"q = {number(flip.get('q'))}"


def max_flip_t(x: np.ndarray, y: np.ndarray, n_permutations: int, seed: int) -> tuple[bool, np.ndarray]:
    """``(exact, draws)``: the largest |Williams' t| over the sign flips of r(x[:, i], y_perm) between consecutive
    columns (0 for an ordering with no flip), for every ordering of y when n! <= ``n_permutations`` (``exact``)
    or for that many seeded random ones (``scipy.stats.permutation_test``); x: (n, m) with every r defined."""
    n, m = x.shape
    centred = x - x.mean(axis=0)
    xz = centred / np.linalg.norm(centred, axis=0)  # (n, m) unit columns: r = y_z @ xz
    r_xz = np.einsum("ni,ni->i", xz[:, :-1], xz[:, 1:])  # (m - 1,) r of consecutive columns

    def largest_t(y_perm: np.ndarray, axis: int = -1) -> np.ndarray:
        yc = y_perm - y_perm.mean(axis=-1, keepdims=True)
        r = (yc / np.linalg.norm(yc, axis=-1, keepdims=True)) @ xz  # (..., m)
        before, after = r[..., :-1], r[..., 1:]
        det = np.maximum(1 - before**2 - after**2 - r_xz**2 + 2 * before * after * r_xz, 0.0)
        denominator = 2 * (n - 1) / (n - 3) * det + ((before + after) / 2) ** 2 * (1 - r_xz) ** 3
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(after - before) * np.sqrt((n - 1) * (1 + r_xz) / denominator)
        return np.where((before * after < 0) & (denominator > 0) & np.isfinite(t), t, 0.0).max(axis=-1)

    result = stats.permutation_test((y,), largest_t, permutation_type="pairings", vectorized=True,
                                    n_resamples=n_permutations, alternative="greater",
                                    batch=max(1, 2_000_000 // (n * m)), rng=np.random.default_rng(seed))
    return math.factorial(n) <= n_permutations, result.null_distribution


def _defined(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None
