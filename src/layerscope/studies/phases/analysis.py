"""Phases (seed 000): pair-level centroid asymmetry vs preference per layer, with bootstrap
CIs, then early/mid/late phase means and the notebook's pattern label.

    x = centroid_asymmetry(run.a("mean"), run.b("mean"))        # (n_pairs, n_layers + 1)
    profile = layer_profile(x[:, layers], run.pref, 10_000, 0.95, rng)
    phases = phase_split(layers);  pattern(early, mid, late)
"""

from __future__ import annotations

import numpy as np

from ...geometry import centroid_asymmetry
from ...stats import bootstrap_pearson, pearson, percentile_ci, resample_indices
from ..inputs import PairRun
from ..result import layer_row

PATTERNS = {
    "PYTHIA_PATTERN": "positive early, negative late",
    "LATE_INVERSION": "negative in late layers",
    "DECOUPLED": "weak correlations throughout",
    "OTHER": "none of the notebook's patterns",
}


def phase_split(layers: list[int]) -> dict[str, list[int]]:
    """Tested layers in thirds, as the notebook splits them (n // 3 and 2n // 3)."""
    n = len(layers)
    return {"early": layers[: n // 3], "mid": layers[n // 3 : 2 * n // 3], "late": layers[2 * n // 3 :]}


def pattern(early: float, mid: float, late: float) -> str:
    """PYTHIA_PATTERN: early > 0.1 and late < -0.1; LATE_INVERSION: late < -0.1;
    DECOUPLED: all three |mean| < 0.15; else OTHER."""
    if early > 0.1 and late < -0.1:
        return "PYTHIA_PATTERN"
    if late < -0.1:
        return "LATE_INVERSION"
    if abs(early) < 0.15 and abs(mid) < 0.15 and abs(late) < 0.15:
        return "DECOUPLED"
    return "OTHER"


def late_inversion(final_r: float, final_significant: bool) -> str:
    if final_r < -0.1 and final_significant:
        return "LATE-LAYER INVERSION CONFIRMED"
    if final_r < 0:
        return "Negative trend in late layer"
    return "NO late-layer inversion"


def layer_profile(x: np.ndarray, y: np.ndarray, n_bootstrap: int, level: float,
                  rng: np.random.Generator | np.random.RandomState) -> list[dict]:
    """Per column of ``x`` (n, n_tested): Pearson r with ``y``, its p, and a percentile bootstrap CI.

    A ``Generator`` draws one set of resamples shared by every layer; a ``RandomState``
    draws fresh resamples per layer in order, exactly as the notebook's loop consumes its
    global seed.
    """
    n = len(y)
    shared = None if isinstance(rng, np.random.RandomState) else resample_indices(n, n_bootstrap, rng)
    out = []
    for column in x.T:
        idx = shared if shared is not None else resample_indices(n, n_bootstrap, rng)
        r, p = pearson(column, y)
        lo, hi = percentile_ci(bootstrap_pearson(column, y, idx), level)
        out.append({"r": r, "p": p, "ci_lo": lo, "ci_hi": hi, "significant": bool(not (lo <= 0 <= hi))})
    return out


def analyse_model(run: PairRun, layers: list[int], pooling: str, n_bootstrap: int, level: float,
                  seed: int, compat: str | None) -> tuple[dict, list[dict]]:
    info = run.info
    x = centroid_asymmetry(run.a(pooling), run.b(pooling))[:, layers]
    rng = np.random.RandomState(seed) if compat == "seed" else np.random.default_rng(seed)
    profile = layer_profile(x, run.pref, n_bootstrap, level, rng)
    by_layer = dict(zip(layers, profile))
    rows = [layer_row(info.name, layer, info.n_layers, "r_centroid_pref", s["r"], pooling=pooling, p=s["p"],
                      ci_lo=s["ci_lo"], ci_hi=s["ci_hi"], n=len(run.pref), significant=s["significant"])
            for layer, s in by_layer.items()]
    phases = {}
    for phase, members in phase_split(layers).items():
        mean = float(np.mean([by_layer[layer]["r"] for layer in members])) if members else float("nan")
        phases[phase] = {"layers": members, "mean": mean}
        rows.append({"model": info.name, "pooling": pooling, "metric": "phase_mean", "value": mean,
                     "n": len(members), "phase": phase})
    label = pattern(phases["early"]["mean"], phases["mid"]["mean"], phases["late"]["mean"])
    final = by_layer[layers[-1]]
    summary = {
        "n_layers": info.n_layers,
        "layers": layers,
        "pooling": pooling,
        "n_pairs": len(run.pref),
        "n_bootstrap": n_bootstrap,
        "ci_level": level,
        "phases": phases,
        "pattern": label,
        "pattern_text": PATTERNS[label],
        "final_layer": layers[-1],
        "final_r": final["r"],
        "final_significant": final["significant"],
        "late_inversion": late_inversion(final["r"], final["significant"]),
        "significant_layers": [layer for layer, s in by_layer.items() if s["significant"]],
    }
    return summary, rows
