"""Phases (seed 000): pair-level centroid asymmetry vs preference per layer, with bootstrap
CIs, then early/mid/late phase means and the notebook's pattern label.

    x = centroid_asymmetry(run.a("mean"), run.b("mean"), leave_one_out=True)   # (n_pairs, n_layers + 1)
    profile = tested_profile(x[:, layers], run.pref, Method(n_bootstrap=10_000))  # r, p, p_perm, BCa CI, q
    phases = phase_split(layers);  pattern(early, mid, late)
    summary, rows = analyse_model(run, run.layers, "mean", 10_000, 0.95, 42, None, drop_category="numeric_vs_named")

By default a layer is significant when its q (Benjamini-Hochberg over the tested layers of the
permutation p) is below 1 - level; ``compat="seed"`` keeps the notebook's self-including
centroids, percentile bootstrap and "CI excludes 0".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...geometry import centroid_asymmetry
from ...stats import bca_pearson_ci, bootstrap_pearson, pearson, percentile_ci, resample_indices
from ..controls import add_q, in_subset, length_control, pearson_tests, spearman_tests, subset_name
from ..finite import check_values, defined
from ..inputs import PairRun
from ..result import layer_row

PATTERNS = {
    "PYTHIA_PATTERN": "positive early, negative late",
    "LATE_INVERSION": "negative in late layers",
    "DECOUPLED": "weak correlations throughout",
    "OTHER": "none of the notebook's patterns",
    "UNDETERMINED": "a phase has no layer with a defined r to average (fewer than 3 tested layers, or r undefined)",
}
VERDICT_METRICS = ("phase_mean",)
"""Table metrics that must be finite: the phase means (a row with n = 0 averages no layer: no mean, by design).
An r may be undefined (NaN) where the centroid asymmetry is the same for every pair; the phase means and verdicts
leave such layers out, and :func:`analyse_subset` checks the inputs of every r, asymmetry and preference."""


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


def late_inversion(final_r: float | None, final_significant: bool) -> str:
    if final_r is None:
        return "UNDETERMINED: the final-layer r is undefined"
    if final_r < -0.1 and final_significant:
        return "LATE-LAYER INVERSION CONFIRMED"
    if final_r < 0:
        return "Negative trend in late layer"
    return "NO late-layer inversion"


@dataclass(frozen=True)
class Method:
    """How each layer's r is tested: ``Method(compat="seed")`` is the notebook's way."""

    n_bootstrap: int = 10_000
    level: float = 0.95
    seed: int = 42
    compat: str | None = None
    centroids: str = "loo"
    """'loo' (the centroids of the other pairs) or 'self' (of all pairs, the notebooks')."""
    n_permutations: int = 10_000

    @property
    def seed_compat(self) -> bool:
        return self.compat == "seed"


def layer_profile(x: np.ndarray, y: np.ndarray, n_bootstrap: int, level: float,
                  rng: np.random.RandomState) -> list[dict]:
    """Seed compat: per column of ``x`` (n, n_tested), Pearson r with ``y`` (``value``), its p and a percentile
    bootstrap CI; significant when the CI excludes 0.

    Fresh resamples per layer in order, exactly as the notebook's loop consumes its global seed.
    """
    out = []
    for column in x.T:
        r, p = pearson(column, y)
        lo, hi = percentile_ci(bootstrap_pearson(column, y, resample_indices(len(y), n_bootstrap, rng)), level)
        out.append({"value": r, "p": p, "ci_lo": lo, "ci_hi": hi, "significant": bool(not (lo <= 0 <= hi))})
    return out


def tested_profile(x: np.ndarray, y: np.ndarray, method: Method) -> list[dict]:
    """Per column of ``x`` (n, n_tested): Pearson r with ``y`` (``value``), p, permutation ``p_perm``, BCa
    bootstrap ``ci_lo``, ``ci_hi`` (pairs resampled together, seeded from ``method.seed``), ``q`` over the
    columns and ``significant`` (q < 1 - level)."""
    tests = pearson_tests(x, y, method.n_permutations, method.seed)
    lo, hi = bca_pearson_ci(x, y, method.n_bootstrap, method.level, np.random.default_rng(method.seed))
    for test, ci_lo, ci_hi in zip(tests, lo, hi):
        test["ci_lo"], test["ci_hi"] = float(ci_lo), float(ci_hi)
    return add_q(tests, "p_perm", method.level)


def analyse_model(run: PairRun, layers: list[int], pooling: str, n_bootstrap: int, level: float,
                  seed: int, compat: str | None, centroids: str | None = None, n_permutations: int = 10_000,
                  drop_category: str | None = None) -> tuple[dict, list[dict]]:
    """Summary and rows of one model: the analysis on all pairs (``subset`` "all") and, with
    ``drop_category``, again without that category (``subset`` "without NAME"). ``centroids`` defaults
    to 'self' in seed compat, else 'loo'."""
    method = Method(n_bootstrap=n_bootstrap, level=level, seed=seed, compat=compat, n_permutations=n_permutations,
                    centroids=centroids or ("self" if compat == "seed" else "loo"))
    summary, rows = analyse_subset(run, layers, pooling, method)
    rows = in_subset(rows, subset_name(None))
    if not method.seed_compat:
        summary["length_control"] = length_control(run)
    if drop_category is not None:
        without, without_rows = analyse_subset(run.without(drop_category), layers, pooling, method)
        rows += in_subset(without_rows, subset_name(drop_category))
        summary["without_category"] = {"category": drop_category, **{key: without[key] for key in (
            "n_pairs", "phases", "pattern", "final_r", "final_significant", "late_inversion", "significant_layers")}}
    return summary, rows


def analyse_subset(run: PairRun, layers: list[int], pooling: str, method: Method) -> tuple[dict, list[dict]]:
    """Summary and rows of one model on the pairs of ``run``: the profile, phases and verdicts, and by
    default the controls (rho, summed preference, the other centroid variant)."""
    info, n_pairs = run.info, len(run.pref)
    x = centroid_asymmetry(run.a(pooling), run.b(pooling), leave_one_out=method.centroids == "loo")[:, layers]
    check_values("phases", info.name, "output preference NLL(B) - NLL(A)", run.pref)  # the inputs of every r
    for column, layer in enumerate(layers):
        check_values("phases", info.name, f"layer {layer} centroid asymmetry ({pooling} pooling)", x[:, column])
    profile = (layer_profile(x, run.pref, method.n_bootstrap, method.level, np.random.RandomState(method.seed))
               if method.seed_compat else tested_profile(x, run.pref, method))
    by_layer = dict(zip(layers, profile))
    rows = [layer_row(info.name, layer, info.n_layers, "r_centroid_pref", pooling=pooling, n=n_pairs,
                      centroids=method.centroids, **s) for layer, s in by_layer.items()]
    phases = {}
    for phase, members in phase_split(layers).items():
        rs = [by_layer[layer]["value"] for layer in members if np.isfinite(by_layer[layer]["value"])]
        mean = float(np.mean(rs)) if rs else None  # None: no layer in this third, or r undefined at all of them
        phases[phase] = {"layers": members, "mean": mean}
        rows.append({"model": info.name, "pooling": pooling, "metric": "phase_mean", "value": mean,
                     "n": len(rs), "phase": phase})
    means = [p["mean"] for p in phases.values()]
    label = "UNDETERMINED" if None in means else pattern(*means)
    final = by_layer[layers[-1]]
    summary = {
        "n_layers": info.n_layers,
        "layers": layers,
        "pooling": pooling,
        "n_pairs": n_pairs,
        "n_bootstrap": method.n_bootstrap,
        "ci_level": method.level,
        "centroids": method.centroids,
        "significance": "ci" if method.seed_compat else "q",
        "phases": phases,
        "pattern": label,
        "pattern_text": PATTERNS[label],
        "final_layer": layers[-1],
        "final_r": defined(final["value"]),
        "final_significant": final["significant"],
        "late_inversion": late_inversion(defined(final["value"]), final["significant"]),
        "significant_layers": [layer for layer, s in by_layer.items() if s["significant"]],
    }
    if not method.seed_compat:
        summary["final_q"] = defined(final["q"])
        other_rows, summary["loo_vs_self"] = centroid_comparison(run, layers, pooling, method, profile)
        rows += control_rows(run, x, layers, pooling, method) + other_rows
    return summary, rows


def control_rows(run: PairRun, x: np.ndarray, layers: list[int], pooling: str, method: Method) -> list[dict]:
    """Spearman rho of ``x`` (n_pairs, len(layers)) with the preference (``rho_centroid_pref``) and r with the
    summed preference (``r_centroid_pref_sum``), each with q over the layers."""
    rho = add_q(spearman_tests(x, run.pref), "p", method.level)
    summed = add_q(pearson_tests(x, run.pref_sum, method.n_permutations, method.seed), "p_perm", method.level)
    return [layer_row(run.info.name, layer, run.info.n_layers, metric, pooling=pooling, n=len(run.pref),
                      centroids=method.centroids, **test)
            for metric, tests in (("rho_centroid_pref", rho), ("r_centroid_pref_sum", summed))
            for layer, test in zip(layers, tests)]


def centroid_comparison(run: PairRun, layers: list[int], pooling: str, method: Method,
                        profile: list[dict]) -> tuple[list[dict], dict]:
    """Rows ``r_centroid_pref_<other>`` with the other centroid variant than ``method.centroids`` (whose
    ``profile`` is given), and the layer where r(leave-one-out) - r(self-including) is largest in size."""
    other = "self" if method.centroids == "loo" else "loo"
    x_other = centroid_asymmetry(run.a(pooling), run.b(pooling), leave_one_out=other == "loo")[:, layers]
    tests = add_q(pearson_tests(x_other, run.pref, method.n_permutations, method.seed), "p_perm", method.level)
    rows = [layer_row(run.info.name, layer, run.info.n_layers, f"r_centroid_pref_{other}", pooling=pooling,
                      n=len(run.pref), centroids=other, **test) for layer, test in zip(layers, tests)]
    r = {method.centroids: [s["value"] for s in profile], other: [s["value"] for s in tests]}
    diff = np.asarray(r["loo"], dtype=np.float64) - np.asarray(r["self"], dtype=np.float64)
    i = int(np.nanargmax(np.abs(diff))) if np.isfinite(diff).any() else 0
    return rows, {"layer": layers[i], "r_loo": defined(r["loo"][i]), "r_self": defined(r["self"][i]),
                  "difference": defined(diff[i])}
