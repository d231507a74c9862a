"""Scaling (seed 001): the r(UA, preference) layer profile of several models on a common
depth axis, and whether its peak moves with model size.

    tests = profile(run, layers, "mean")                 # per tested layer: r ("value"), p, p_perm, CI, q
    s = profile_summary(layers, rs, n_layers)            # peak, trough, final r, sign changes
    peak_stability([s["max_pos_pct"] for s in ...])      # std < 10 points: stable
"""

from __future__ import annotations

import numpy as np

from ...errors import LayerscopeError
from ...stats import sign_changes
from ..controls import add_q, spearman_tests
from ..divergence.analysis import category_pref, category_tests, category_ua
from ..finite import check_values, defined
from ..inputs import PairRun
from ..result import layer_row

STABLE_STD_PCT = 10.0
VERDICT_METRICS = ()
"""Table metrics that must be finite: none, since the table holds only r and rho, which are undefined (NaN) where
UA is the same in every category; :func:`profile` checks their inputs, UA and the preference, instead."""


def profile(run: PairRun, layers: list[int], pooling: str, compat: str | None = None, level: float = 0.95,
            seed: int = 42, n_permutations: int = 10_000) -> tuple[list[dict], list[dict]]:
    """Category UA vs category preference at each tested layer: (r tests, rho tests), one dict per layer.

    r tests hold r as ``value`` and its ``p``; by default also ``p_perm``, the Fisher-z ``ci_lo``, ``ci_hi``,
    ``q`` (BH over the layers) and ``significant``. rho tests (none in seed compat) hold rho, p, q, significant.
    """
    cats, n_cat = run.pairs.pair_categories(), len(run.pairs.categories)
    ua = category_ua(run.a(pooling), run.b(pooling), cats, n_cat)[:, layers]
    pref = category_pref(run.pref, cats, n_cat)
    check_values("scaling", run.info.name, "category preference NLL(B) - NLL(A)", pref)  # before any r
    for column, layer in enumerate(layers):
        check_values("scaling", run.info.name, f"layer {layer} category UA ({pooling} pooling)", ua[:, column])
    r_tests = category_tests(ua, pref, compat, level, seed, n_permutations)
    if compat == "seed":
        return r_tests, []
    return add_q(r_tests, "p_perm", level), add_q(spearman_tests(ua, pref), "p", level)


def analyse_model(run: PairRun, layers: list[int], pooling: str, compat: str | None = None, level: float = 0.95,
                  seed: int = 42, n_permutations: int = 10_000) -> tuple[dict, list[dict]]:
    info, n_cat = run.info, len(run.pairs.categories)
    r_tests, rho_tests = profile(run, layers, pooling, compat, level, seed, n_permutations)
    rows = [layer_row(info.name, layer, info.n_layers, metric, pooling=pooling, n=n_cat, **test)
            for metric, tests in (("r_ua_pref", r_tests), ("rho_ua_pref", rho_tests))
            for layer, test in zip(layers, tests)]
    summary = profile_summary(layers, [test["value"] for test in r_tests], info.n_layers)
    if compat != "seed":
        summary["significant_layers"] = [layer for layer, test in zip(layers, r_tests) if test["significant"]]
        at = layers.index(summary["max_pos_layer"])
        summary["max_pos_ci"] = [defined(r_tests[at]["ci_lo"]), defined(r_tests[at]["ci_hi"])]
        summary["max_pos_q"], summary["max_pos_rho"] = defined(r_tests[at]["q"]), defined(rho_tests[at]["value"])
    return summary, rows


def profile_summary(layers: list[int], rs: list[float], n_layers: int) -> dict:
    """Largest r and its layer and % depth, the most negative r, the final r (None where undefined), sign changes;
    layers where r is undefined (NaN: UA the same in every category) are left out of all but the final r."""
    kept = [i for i, x in enumerate(rs) if np.isfinite(x)]
    if not kept:
        raise LayerscopeError(f"scaling: r(UA, preference) is undefined at every tested layer ({layers}): UA is the "
                              "same in every category, so there is no profile; test other layers or another pooling")
    final_r = defined(rs[-1])
    layers, r = [layers[i] for i in kept], np.asarray([rs[i] for i in kept], dtype=np.float64)
    hi, lo = int(np.argmax(r)), int(np.argmin(r))
    return {
        "n_layers": n_layers,
        "max_pos_r": float(r[hi]), "max_pos_layer": layers[hi], "max_pos_pct": layers[hi] / n_layers * 100,
        "max_neg_r": float(r[lo]), "max_neg_layer": layers[lo], "max_neg_pct": layers[lo] / n_layers * 100,
        "final_r": final_r,
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
