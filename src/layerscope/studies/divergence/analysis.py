"""Divergence (seed 002): per layer and pooling, does the uniformity asymmetry of a category's
A vs B statements track the model's preference between them?

    ua = category_ua(run.a("mean"), run.b("mean"), cats, n_cat)   # (n_cat, n_layers + 1)
    pref = category_pref(run.pref, cats, n_cat)                    # (n_cat,)
    r, p = pearson(ua[:, layer], pref)                             # metric r_ua_pref
    summary, rows = analyse_model(run, run.layers, drop_category="numeric_vs_named")

By default every r also gets a permutation p, a Fisher-z interval, a Benjamini-Hochberg q over the
tested layers, a Spearman rho beside it and an r with the summed-NLL preference (length control);
``compat="seed"`` writes r and p only, as the notebook does.
"""

from __future__ import annotations

import numpy as np

from ...geometry import uniformity
from ...stats import pearson, sign_changes
from ..controls import add_q, in_subset, length_control, pearson_tests, spearman_tests, subset_name
from ..finite import check_rows, check_values, defined
from ..inputs import PairRun
from ..result import layer_row

POOLINGS = ("mean", "last", "first")
VERDICT_METRICS = ("pref", "ua")
"""Table metrics every r, and so every verdict, is computed from. An r itself may be undefined (NaN in the table,
None in the summary, n/a in the report) where UA is the same in every category, e.g. at layer 0 with last-token
pooling when every statement ends in the same token; the verdicts skip such layers."""
LABELS = [(-0.5, "INVERSE (strong negative)"), (-0.2, "Weak negative"), (0.2, "DECOUPLED (near zero)"),
          (0.5, "Weak positive")]


def interpret(r: float | None) -> str:
    """The notebook's label for a correlation: thresholds -0.5, -0.2, 0.2, 0.5; "undefined" for None or NaN."""
    if r is None or np.isnan(r):
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
    """Every sign change between consecutive tested layers, or which sign holds throughout; layers where r is
    undefined (NaN) are left out, so a change across one is between the defined layers either side."""
    kept = [i for i, r in enumerate(rs) if np.isfinite(r)]
    layers, rs = [layers[i] for i in kept], [rs[i] for i in kept]
    if not rs:
        return [], "undefined"
    points = [{"layer_before": layers[i], "layer_after": layers[i + 1], "r_before": rs[i], "r_after": rs[i + 1]}
              for i in sign_changes(rs)]
    if points:
        return points, None
    if all(r < 0 for r in rs):
        return points, "negative"
    if all(r > 0 for r in rs):
        return points, "positive"
    return points, "unclear"


def pooling_effect(r_mean: float | None, r_last: float | None) -> str:
    if r_mean is None or r_last is None:
        return "Undefined: the final-layer r of mean or last pooling is undefined."
    if r_last > r_mean + 0.2:
        return "Last-token embeddings correlate MORE with output than mean-pooled."
    if r_last < r_mean - 0.2:
        return "Last-token embeddings correlate LESS with output than mean-pooled."
    return "Pooling strategy has minimal effect on correlation."


def category_tests(ua: np.ndarray, pref: np.ndarray, compat: str | None, level: float, seed: int,
                   n_permutations: int) -> list[dict]:
    """Per column of ``ua`` (n_cat, k): r with ``pref`` (n_cat,) as ``value`` and its ``p``; by default also
    ``p_perm`` and the Fisher-z ``ci_lo``, ``ci_hi`` (q is added per family, over the tested layers)."""
    if compat == "seed":
        return [dict(zip(("value", "p"), pearson(column, pref))) for column in ua.T]
    return pearson_tests(ua, pref, n_permutations, seed, level)


def analyse_model(run: PairRun, layers: list[int], compat: str | None = None, level: float = 0.95, seed: int = 42,
                  n_permutations: int = 10_000, drop_category: str | None = None) -> tuple[dict, list[dict]]:
    """Summary and rows of one model: the analysis on all pairs (``subset`` "all") and, with
    ``drop_category``, again without that category (``subset`` "without NAME")."""
    summary, rows = analyse_subset(run, layers, compat, level, seed, n_permutations)
    rows = in_subset(rows, subset_name(None))
    if compat != "seed":
        summary["length_control"] = length_control(run)
    if drop_category is not None:
        without, without_rows = analyse_subset(run.without(drop_category), layers, compat, level, seed,
                                               n_permutations)
        rows += in_subset(without_rows, subset_name(drop_category))
        summary["without_category"] = {
            "category": drop_category, "n_categories": without["n_categories"],
            "final_r": {c["pooling"]: c["r"] for c in without["pooling_comparison"]},
            "divergence_points": without["divergence_points"]["mean"],
            "sign_throughout": without["sign_throughout"]["mean"]}
    return summary, rows


def analyse_subset(run: PairRun, layers: list[int], compat: str | None, level: float, seed: int,
                   n_permutations: int) -> tuple[dict, list[dict]]:
    """Summary and rows of one model on the pairs of ``run``: per pooling the r profile, its sign changes and the
    final-layer comparison, and by default the controls (rho, summed preference)."""
    info, pairs = run.info, run.pairs
    cats, n_cat = pairs.pair_categories(), len(pairs.categories)
    pref = category_pref(run.pref, cats, n_cat)
    final = info.n_layers
    columns = sorted({*layers, final})
    rows = [{"model": info.name, "metric": "pref", "value": pref[c], "n": int((cats == c).sum()),
             "category": cat.name} for c, cat in enumerate(pairs.categories)]
    profiles, comparison, points, throughout, significant = {}, [], {}, {}, {}
    for pooling in POOLINGS:
        ua = category_ua(run.a(pooling), run.b(pooling), cats, n_cat)
        stats = dict(zip(columns, category_tests(ua[:, columns], pref, compat, level, seed, n_permutations)))
        if compat != "seed":
            add_q([stats[layer] for layer in layers], "p_perm", level)
        for layer in layers:
            rows.append(layer_row(info.name, layer, final, "r_ua_pref", pooling=pooling, n=n_cat, **stats[layer]))
            rows += [layer_row(info.name, layer, final, "ua", ua[c, layer], pooling=pooling,
                               n=int((cats == c).sum()), category=cat.name)
                     for c, cat in enumerate(pairs.categories)]
        check_rows("divergence", rows, VERDICT_METRICS)  # the inputs of every r, before any verdict
        check_values("divergence", info.name, f"layer {final} category UA ({pooling} pooling)", ua[:, final])
        profiles[pooling] = [stats[layer]["value"] for layer in layers]
        points[pooling], throughout[pooling] = sign_summary(layers, profiles[pooling])
        comparison.append({"pooling": pooling, "layer": final, "r": defined(stats[final]["value"]),
                           "p": defined(stats[final]["p"]), "label": interpret(stats[final]["value"]),
                           **{k: defined(stats[final][k]) for k in ("p_perm", "ci_lo", "ci_hi") if k in stats[final]}})
        if compat != "seed":
            rows += control_rows(run, ua[:, layers], layers, pooling, level, seed, n_permutations)
            significant[pooling] = [layer for layer in layers if stats[layer]["significant"]]
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
    if compat != "seed":
        summary["significant_layers"] = significant
    return summary, rows


def control_rows(run: PairRun, ua: np.ndarray, layers: list[int], pooling: str, level: float, seed: int,
                 n_permutations: int) -> list[dict]:
    """Spearman rho of UA with the preference (``rho_ua_pref``) and r with the category mean of the summed
    preference (``r_ua_pref_sum``) at the tested layers; ua: (n_cat, len(layers))."""
    cats, n_cat = run.pairs.pair_categories(), len(run.pairs.categories)
    rho = add_q(spearman_tests(ua, category_pref(run.pref, cats, n_cat)), "p", level)
    pref_sum = category_pref(run.pref_sum, cats, n_cat)
    summed = add_q(pearson_tests(ua, pref_sum, n_permutations, seed, level), "p_perm", level)
    return [layer_row(run.info.name, layer, run.info.n_layers, metric, pooling=pooling, n=n_cat, **test)
            for metric, tests in (("rho_ua_pref", rho), ("r_ua_pref_sum", summed))
            for layer, test in zip(layers, tests)]
