"""Scaling (seed 001): the r(UA, preference) layer profile of several models on a common
depth axis, and whether its peak moves with model size.

    rs = profile(run, layers, "mean")                    # r per tested layer
    s = profile_summary(layers, rs, n_layers)            # peak, trough, final r, sign changes
    peak_stability([s["max_pos_pct"] for s in ...])      # std < 10 points: stable
"""

from __future__ import annotations

import numpy as np

from ...stats import pearson, sign_changes
from ..divergence.analysis import category_pref, category_ua
from ..inputs import PairRun
from ..result import layer_row

STABLE_STD_PCT = 10.0


def profile(run: PairRun, layers: list[int], pooling: str) -> list[tuple[float, float]]:
    """(r, p) of category UA vs category preference at each tested layer."""
    cats, n_cat = run.pairs.pair_categories(), len(run.pairs.categories)
    ua = category_ua(run.a(pooling), run.b(pooling), cats, n_cat)
    pref = category_pref(run.pref, cats, n_cat)
    return [pearson(ua[:, layer], pref) for layer in layers]


def analyse_model(run: PairRun, layers: list[int], pooling: str) -> tuple[dict, list[dict]]:
    info = run.info
    stats = profile(run, layers, pooling)
    rows = [layer_row(info.name, layer, info.n_layers, "r_ua_pref", r, pooling=pooling, p=p,
                      n=len(run.pairs.categories)) for layer, (r, p) in zip(layers, stats)]
    return profile_summary(layers, [r for r, _ in stats], info.n_layers), rows


def profile_summary(layers: list[int], rs: list[float], n_layers: int) -> dict:
    """Largest r and its layer and % depth, the most negative r, the final r, sign changes."""
    r = np.asarray(rs, dtype=np.float64)
    hi, lo = int(np.nanargmax(r)), int(np.nanargmin(r))
    return {
        "n_layers": n_layers,
        "max_pos_r": float(r[hi]), "max_pos_layer": layers[hi], "max_pos_pct": layers[hi] / n_layers * 100,
        "max_neg_r": float(r[lo]), "max_neg_layer": layers[lo], "max_neg_pct": layers[lo] / n_layers * 100,
        "final_r": float(r[-1]),
        "sign_changes": [{"layer_before": layers[i], "layer_after": layers[i + 1],
                          "midpoint_pct": (layers[i] + layers[i + 1]) / 2 / n_layers * 100}
                         for i in sign_changes(r)],
    }


def peak_stability(peak_pcts: list[float]) -> dict:
    """Mean and (population) standard deviation of peak depths; stable when std < 10 points."""
    if len(peak_pcts) < 2:
        return {"mean_peak_pct": float(np.mean(peak_pcts)), "std_peak_pct": None, "peaks_stable": None,
                "answer": "Needs at least two models to say whether the peak shifts with size."}
    mean, std = float(np.mean(peak_pcts)), float(np.std(peak_pcts))
    stable = std < STABLE_STD_PCT
    answer = (f"The peak position is STABLE across scales (~{mean:.0f}% depth)." if stable
              else "The peak position SHIFTS with model size.")
    return {"mean_peak_pct": mean, "std_peak_pct": std, "peaks_stable": stable, "answer": answer}
