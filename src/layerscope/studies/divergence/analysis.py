"""Divergence (seed 002): per layer and pooling, does the uniformity asymmetry of a category's
A vs B statements track the model's preference between them?

    ua = category_ua(run.a("mean"), run.b("mean"), cats, n_cat)   # (n_cat, n_layers + 1)
    pref = category_pref(run.pref, cats, n_cat)                    # (n_cat,)
    r, p = pearson(ua[:, layer], pref)                             # metric r_ua_pref
"""

from __future__ import annotations

import numpy as np

from ...geometry import uniformity
from ...stats import pearson, sign_changes
from ..inputs import PairRun
from ..result import layer_row

POOLINGS = ("mean", "last", "first")
LABELS = [(-0.5, "INVERSE (strong negative)"), (-0.2, "Weak negative"), (0.2, "DECOUPLED (near zero)"),
          (0.5, "Weak positive")]


def interpret(r: float) -> str:
    """The notebook's label for a correlation: thresholds -0.5, -0.2, 0.2, 0.5."""
    if np.isnan(r):
        return "undefined"
    return next((label for upper, label in LABELS if r < upper), "ALIGNED (strong positive)")


def category_ua(a: np.ndarray, b: np.ndarray, cats: np.ndarray, n_cat: int) -> np.ndarray:
    """UA per category and layer: uniformity of its A statements minus that of its B statements.

    a, b: (n_pairs, n_layers + 1, d); cats: (n_pairs,) category index -> (n_cat, n_layers + 1).
    """
    return np.stack([uniformity(a[cats == c]) - uniformity(b[cats == c]) for c in range(n_cat)])


def category_pref(pref: np.ndarray, cats: np.ndarray, n_cat: int) -> np.ndarray:
    """Mean output preference NLL(B) - NLL(A) per category."""
    return np.array([pref[cats == c].mean() for c in range(n_cat)])


def sign_summary(layers: list[int], rs: list[float]) -> tuple[list[dict], str | None]:
    """Every sign change between consecutive tested layers, or which sign holds throughout."""
    points = [{"layer_before": layers[i], "layer_after": layers[i + 1], "r_before": rs[i], "r_after": rs[i + 1]}
              for i in sign_changes(rs)]
    if points:
        return points, None
    if all(r < 0 for r in rs):
        return points, "negative"
    if all(r > 0 for r in rs):
        return points, "positive"
    return points, "unclear"


def pooling_effect(r_mean: float, r_last: float) -> str:
    if r_last > r_mean + 0.2:
        return "Last-token embeddings correlate MORE with output than mean-pooled."
    if r_last < r_mean - 0.2:
        return "Last-token embeddings correlate LESS with output than mean-pooled."
    return "Pooling strategy has minimal effect on correlation."


def analyse_model(run: PairRun, layers: list[int]) -> tuple[dict, list[dict]]:
    info, pairs = run.info, run.pairs
    cats, n_cat = pairs.pair_categories(), len(pairs.categories)
    pref = category_pref(run.pref, cats, n_cat)
    final = info.n_layers
    rows = [{"model": info.name, "metric": "pref", "value": pref[c], "n": int((cats == c).sum()),
             "category": cat.name} for c, cat in enumerate(pairs.categories)]
    profiles, comparison, points, throughout = {}, [], {}, {}
    for pooling in POOLINGS:
        ua = category_ua(run.a(pooling), run.b(pooling), cats, n_cat)
        stats = {layer: pearson(ua[:, layer], pref) for layer in sorted({*layers, final})}
        for layer in layers:
            r, p = stats[layer]
            rows.append(layer_row(info.name, layer, final, "r_ua_pref", r, pooling=pooling, p=p, n=n_cat))
            rows += [layer_row(info.name, layer, final, "ua", ua[c, layer], pooling=pooling,
                               n=int((cats == c).sum()), category=cat.name)
                     for c, cat in enumerate(pairs.categories)]
        profiles[pooling] = [stats[layer][0] for layer in layers]
        points[pooling], throughout[pooling] = sign_summary(layers, profiles[pooling])
        r, p = stats[final]
        comparison.append({"pooling": pooling, "layer": final, "r": r, "p": p, "label": interpret(r)})
    summary = {
        "n_layers": final,
        "layers": layers,
        "n_categories": n_cat,
        "categories": [c.name for c in pairs.categories],
        "pooling_comparison": comparison,
        "divergence_points": points,
        "sign_throughout": throughout,
        "pooling_effect": pooling_effect(comparison[0]["r"], comparison[1]["r"]),
    }
    return summary, rows
