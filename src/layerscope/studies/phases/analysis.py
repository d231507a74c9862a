"""Phases (seed 000): pair-level centroid asymmetry vs preference per layer, then early/mid/late phase means
with bootstrap intervals over pairs, the pattern those intervals support, the late-layer verdict and the
sensitivity checks.

    summary, rows = analyse_run(run, config)    # what Phases.run computes per model; default: pre-norm, checks
    summary, rows = analyse_model(run, run.layers, "mean", 10_000, 0.95, 42, None)   # the same, settings by hand
    x = pair_asymmetry(run.a("mean"), run.b("mean"), True, layers)   # (n_pairs, k), one layer read at a time
    profile = tested_profile(x, run.pref, Method(n_bootstrap=10_000))   # per layer r, p_perm, BCa CI, q
    samples = phase_bootstrap(x, run.pref, {"early": [0, 1], "late": [4, 5]}, index_batches(n, 10_000, 42, k))
    label, text = interval_pattern({"early": (lo, hi), "mid": ..., "late": ..., "late - early": ...})

By default the final layer (hidden state ``n_layers``) is the last block's output before the final norm, a layer
is significant when its q (Benjamini-Hochberg over the tested layers of the permutation p) is below 1 - level,
and a pattern is named only when the phase intervals clear its thresholds. ``compat="notebooks"`` keeps the
notebook's post-norm last layer, self-including centroids, percentile bootstrap, "CI excludes 0" and its rule
on the bare phase means (:func:`pattern`, :func:`late_inversion`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...measures.changepoints import thirds as phase_split  # tested layers in thirds, as the notebook
from ...measures.geometry import centroid_asymmetry
from ...modes import NOTEBOOKS
from ...progress import steps
from ...report.markdown import number, signed
from ...stats import bca_pearson_ci, bootstrap_pearson, pearson, percentile_ci, resample_indices
from ...study.finite import check_values, defined
from ...study.result import layer_row
from ...study.sensitivity import check_entry, not_significant, robustness
from ..shared.correlation import add_q, pearson_tests, spearman_tests
from ..shared.inputs import NORM_CHECK, TOKEN_CHECKS, PairRun, check_runs
from ..shared.length import length_control
from ..shared.subsets import in_subset, subset_name
from .bootstrap import index_batches, interval, phase_bootstrap
from .summary import CentroidComparison, PhaseDifference, PhaseMeans, PhasesCheck, PhasesModel

if TYPE_CHECKING:
    from ...study.config import StudyConfig

PATTERNS = {
    "PYTHIA_PATTERN": "positive early, negative late",
    "LATE_INVERSION": "negative in late layers",
    "DECOUPLED": "weak correlations throughout",
    "OTHER": "none of the notebook's patterns",
    "UNDETERMINED": "a phase has no layer with a defined r to average (fewer than 3 tested layers, or r undefined)",
    "NO_PATTERN": "no pattern (intervals cross the thresholds)",
    "NOT_ASSESSABLE": "not assessable",
}
"""Labels: the first five are the notebook's rule (notebooks mode), the last two the default mode's."""
EARLY_ABOVE, LATE_BELOW, DECOUPLED_WITHIN, MIN_PHASE_LAYERS = 0.1, -0.1, 0.15, 2
THRESHOLDS = {"early": (EARLY_ABOVE, -DECOUPLED_WITHIN, DECOUPLED_WITHIN), "mid": (-DECOUPLED_WITHIN, DECOUPLED_WITHIN),
              "late": (LATE_BELOW, -DECOUPLED_WITHIN, DECOUPLED_WITHIN), "late - early": (0.0,)}
"""The values each interval is judged against (a pattern needs its intervals entirely on one side)."""
CONFIRMED = "LATE-LAYER INVERSION CONFIRMED"
VERDICT_METRICS = ("phase_mean", "phase_difference")
"""Table metrics that must be finite: the phase means and late - early (a row with n = 0 averages no layer: no
value, by design). An r may be undefined (NaN) where the centroid asymmetry is the same for every pair; the phase
means and verdicts leave such layers out, and :func:`verdicts` checks the inputs of every r."""


def pattern(early: float, mid: float, late: float) -> str:
    """The notebook's rule (notebooks mode), on the bare means: PYTHIA_PATTERN: early > 0.1 and late < -0.1;
    LATE_INVERSION: late < -0.1; DECOUPLED: all three |mean| < 0.15; else OTHER."""
    if early > 0.1 and late < -0.1:
        return "PYTHIA_PATTERN"
    if late < -0.1:
        return "LATE_INVERSION"
    if abs(early) < 0.15 and abs(mid) < 0.15 and abs(late) < 0.15:
        return "DECOUPLED"
    return "OTHER"


def late_inversion(final_r: float | None, final_significant: bool) -> str:
    """The notebook's rule (notebooks mode) on the last tested layer's r and its "CI excludes 0"."""
    if final_r is None:
        return "UNDETERMINED: the final-layer r is undefined"
    if final_r < -0.1 and final_significant:
        return CONFIRMED
    if final_r < 0:
        return "Negative trend in late layer"
    return "NO late-layer inversion"


def interval_pattern(intervals: dict[str, tuple[float | None, float | None]], level: float = 0.95
                     ) -> tuple[str, str]:
    """``label, text = interval_pattern({"early": (lo, hi), "mid": ..., "late": ..., "late - early": ...})``.

    PYTHIA_PATTERN: early interval above +0.1 and late below -0.1; LATE_INVERSION: late below -0.1 and late -
    early below 0; DECOUPLED: early, mid and late within (-0.15, +0.15); else NO_PATTERN, naming the intervals that
    contain a threshold. Call it only with every phase assessable (see :func:`phase_summary`).
    """
    (e_lo, e_hi), (m_lo, m_hi), (l_lo, l_hi), (_, d_hi) = (
        (np.nan if v is None else v for v in intervals[k]) for k in ("early", "mid", "late", "late - early"))
    if e_lo > EARLY_ABOVE and l_hi < LATE_BELOW:
        return "PYTHIA_PATTERN", PATTERNS["PYTHIA_PATTERN"]
    if l_hi < LATE_BELOW and d_hi < 0:
        return "LATE_INVERSION", PATTERNS["LATE_INVERSION"] + ", and less negative early"
    if all(-DECOUPLED_WITHIN < v < DECOUPLED_WITHIN for v in (e_lo, e_hi, m_lo, m_hi, l_lo, l_hi)):
        return "DECOUPLED", PATTERNS["DECOUPLED"]
    crossed = []
    for name, (lo, hi) in intervals.items():
        inside = [signed(t, 2) for t in sorted(THRESHOLDS[name]) if lo is not None and hi is not None and lo <= t <= hi]
        if inside:
            crossed.append(f"{name} {level:.0%} CI [{signed(lo, 2)}, {signed(hi, 2)}] contains {listed(inside)}")
    if crossed:
        return "NO_PATTERN", f"no pattern (intervals cross the thresholds: {'; '.join(crossed)})"
    return "NO_PATTERN", "no pattern (the intervals clear the thresholds but match none of the patterns)"


def listed(items: list[str]) -> str:
    """``"a, b and c"``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def late_verdict(test: dict, n: int, level: float) -> tuple[str, str]:
    """``key, text = late_verdict(final, n_pairs, 0.95)`` (``final``: the last tested layer's test): CONFIRMED only
    when its r < -0.1 with q < 1 - level; else "not significant (n, p_perm, q, CI)" or "NO late-layer inversion (r,
    q)"."""
    r, q = defined(test["value"]), defined(test.get("q"))
    if r is None:
        return "NOT_ASSESSABLE", "not assessable: r is undefined (the centroid asymmetry is the same for every pair)"
    if q is None or q >= 1 - level:
        return "NOT_SIGNIFICANT", not_significant(n, p=defined(test.get("p_perm")), q=q, level=level,
                                                  ci=(defined(test.get("ci_lo")), defined(test.get("ci_hi"))))
    if r < LATE_BELOW:
        return "CONFIRMED", CONFIRMED
    return "NO_INVERSION", (f"NO late-layer inversion (r = {signed(r)} is not below {signed(LATE_BELOW, 1)}, "
                            f"q = {number(q)})")


def phase_summary(layers: list[int], profile: list[dict], x: np.ndarray, y: np.ndarray,
                  method: Method) -> tuple[PhaseMeans, PhaseDifference | None]:
    """Per phase: its tested ``layers``, ``n`` (those with a defined r), ``mean`` of r and, by default, its
    percentile bootstrap ``ci_lo``, ``ci_hi`` (:func:`phase_bootstrap`, ``method.n_bootstrap`` resamples from
    ``method.seed``); and (default only, else None) the ``late - early`` difference with its interval."""
    phases, groups = {}, {}
    column = {layer: c for c, layer in enumerate(layers)}  # the column of x (and entry of profile) of each layer
    for phase, members in phase_split(layers).items():
        columns = [column[layer] for layer in members if np.isfinite(profile[column[layer]]["value"])]
        rs = [profile[c]["value"] for c in columns]
        phases[phase] = {"layers": members, "mean": float(np.mean(rs)) if rs else None}
        if not method.seed_compat:
            phases[phase]["n"] = len(rs)
            if rs:
                groups[phase] = columns
    if method.seed_compat:
        return phases, None
    samples = phase_bootstrap(x, y, groups, index_batches(len(y), method.n_bootstrap, method.seed, x.shape[1]))
    for phase in groups:
        phases[phase]["ci_lo"], phases[phase]["ci_hi"] = interval(samples[phase], method.level)
    difference: PhaseDifference = {"value": None, "ci_lo": None, "ci_hi": None}
    if "late - early" in samples:
        lo, hi = interval(samples["late - early"], method.level)
        difference = {"value": phases["late"]["mean"] - phases["early"]["mean"], "ci_lo": lo, "ci_hi": hi}
    return phases, difference


@dataclass(frozen=True)
class Method:
    """How each layer's r is tested: ``Method(compat="notebooks")`` is the notebook's way."""

    n_bootstrap: int = 10_000
    level: float = 0.95
    seed: int = 42
    compat: str | None = None
    centroids: str = "loo"
    """'loo' (the centroids of the other pairs) or 'self' (of all pairs, the notebooks')."""
    n_permutations: int = 10_000

    @classmethod
    def from_config(cls, config: StudyConfig) -> Method:
        """The phases settings of ``config``: n_bootstrap, ci_level, seed, compat, centroids, n_permutations."""
        return cls(n_bootstrap=config.n_bootstrap, level=config.ci_level, seed=config.seed, compat=config.compat,
                   centroids=config.centroid_mode, n_permutations=config.n_permutations)

    @property
    def seed_compat(self) -> bool:
        return self.compat == NOTEBOOKS


def layer_profile(x: np.ndarray, y: np.ndarray, n_bootstrap: int, level: float,
                  rng: np.random.RandomState) -> list[dict]:
    """Notebooks mode: per column of ``x`` (n, n_tested), Pearson r with ``y`` (``value``), its p and a percentile
    bootstrap CI; significant when the CI excludes 0.

    Fresh resamples per layer in order, exactly as the notebook's loop consumes its global seed.
    """
    out = []
    for column in steps(x.T, "phases: bootstrap per layer", "layer"):
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
    for test, ci_lo, ci_hi in zip(tests, lo, hi, strict=False):
        test["ci_lo"], test["ci_hi"] = float(ci_lo), float(ci_hi)
    return add_q(tests, "p_perm", method.level)


def analyse_run(run: PairRun, config: StudyConfig) -> tuple[PhasesModel, list[dict]]:
    """``summary, rows = analyse_run(run, config)``: :func:`analyse` on the run's tested layers, with the pooling,
    :class:`Method` (:meth:`Method.from_config`) and drop_category of ``config`` (what ``Phases.run`` computes)."""
    return analyse(run, run.layers, config.pooling, Method.from_config(config), config.drop_category)


def analyse_model(run: PairRun, layers: list[int], pooling: str, n_bootstrap: int, level: float,
                  seed: int, compat: str | None, centroids: str | None = None, n_permutations: int = 10_000,
                  drop_category: str | None = None) -> tuple[PhasesModel, list[dict]]:
    """:func:`analyse` with each setting of the :class:`Method` by hand; ``centroids`` defaults to 'self' in seed
    compat, else 'loo'."""
    method = Method(n_bootstrap=n_bootstrap, level=level, seed=seed, compat=compat, n_permutations=n_permutations,
                    centroids=centroids or ("self" if compat == NOTEBOOKS else "loo"))
    return analyse(run, layers, pooling, method, drop_category)


def analyse(run: PairRun, layers: list[int], pooling: str, method: Method, drop_category: str | None = None
            ) -> tuple[PhasesModel, list[dict]]:
    """Summary and rows of one model: the analysis on all pairs (``subset`` "all"), with ``drop_category`` again
    without that category (``subset`` "without NAME"), and by default the sensitivity checks
    (``summary["checks"]``, ``summary["robustness"]``; their rows with ``subset`` the check's name).

    By default the final layer is taken before the final norm (``run.at_stage("pre_norm")``, rows at layer
    ``n_layers`` with ``stage`` "pre_norm") when the activations hold pre-norm states.
    """
    if not method.seed_compat:
        run = slim(run, pooling)
        run = run.at_stage("pre_norm") if run.acts.pre_norm else run
    summary, rows = analyse_subset(run, layers, pooling, method)
    rows = in_subset(rows, subset_name(None))
    if not method.seed_compat:
        summary["stage"] = run.stage
        summary["length_control"] = length_control(run)
    without = None
    if drop_category is not None:
        without, without_rows = analyse_subset(run.without(drop_category), layers, pooling, method)
        rows += in_subset(without_rows, subset_name(drop_category))
        summary["without_category"] = {"category": drop_category, **{key: without[key] for key in (
            "n_pairs", "phases", "pattern", "final_r", "final_significant", "late_inversion", "significant_layers")}}
    if not method.seed_compat:
        reuse = {subset_name(drop_category): without} if without is not None else {}
        summary["checks"], check_rows = sensitivity_checks(run, layers, pooling, method, summary, reuse)
        summary["robustness"] = robustness(summary["checks"])
        rows += check_rows
    return summary, rows


def pair_asymmetry(a, b, leave_one_out: bool, layers: list[int]) -> np.ndarray:
    """``pair_asymmetry(run.a("mean"), run.b("mean"), True, layers)``: centroid asymmetry per pair at each of
    ``layers`` (n_pairs, len(layers)), reading one layer of ``a`` and ``b`` (each (n_pairs, n_layers + 1, d)) at a
    time."""
    return np.stack([centroid_asymmetry(a[:, layer], b[:, layer], leave_one_out) for layer in layers], axis=1)


def slim(run: PairRun, pooling: str) -> PairRun:
    """``run`` holding only the poolings the analysis and its checks read (each check copies what it holds)."""
    keep = {pooling, *TOKEN_CHECKS.values()} if pooling == "mean" else {pooling}
    acts = dataclasses.replace(run.acts, pooled={p: x for p, x in run.acts.pooled.items() if p in keep},
                               pre_norm={p: run.acts.pre_norm[p] for p in run.acts.pre_norm if p in keep})
    return dataclasses.replace(run, acts=acts)


def sensitivity_checks(run: PairRun, layers: list[int], pooling: str, method: Method, summary: PhasesModel,
                       reuse: dict[str, PhasesModel]) -> tuple[list[PhasesCheck], list[dict]]:
    """The pattern and the late-layer verdict recomputed under each of :func:`check_runs` (the final layer after
    the final norm only when it is tested): ``check_entry`` dicts and their rows (``subset`` = the check's name;
    for "after the final norm" only the layer ``n_layers`` rows, ``stage`` "post_norm"). ``reuse``: analyses
    already made (the ``--drop-category`` one), whose rows are in the table already."""
    checks, rows = [], []
    for name, check_run in steps(check_runs(run, pooling), "phases: sensitivity checks", "check"):
        if name == NORM_CHECK and run.info.n_layers not in layers:
            continue
        if name in reuse:
            s = reuse[name]
        else:
            s, check_rows = verdicts(check_run, layers, pooling, method)
            if name == NORM_CHECK:
                check_rows = [{**r, "stage": "post_norm"} for r in check_rows if r.get("layer") == run.info.n_layers]
            rows += in_subset(check_rows, name)
        flips = {"pattern": s["pattern"] != summary["pattern"], "late": s["late_label"] != summary["late_label"]}
        checks.append(check_entry(name, s["final_r"], f"{s['pattern']}; last tested layer: {s['late_label']}",
                                  flips["pattern"] or flips["late"], n_pairs=s["n_pairs"], pattern=s["pattern"],
                                  pattern_flips=flips["pattern"], late=s["late_inversion"], late_flips=flips["late"],
                                  phases={p: v["mean"] for p, v in s["phases"].items()}))
    return checks, rows


def analyse_subset(run: PairRun, layers: list[int], pooling: str, method: Method
                   ) -> tuple[PhasesModel, list[dict]]:
    """Summary and rows of one model on the pairs of ``run``: :func:`verdicts` and, by default, the controls (rho,
    summed preference, the other centroid variant)."""
    x = pair_asymmetry(run.a(pooling), run.b(pooling), method.centroids == "loo", layers)
    summary, rows = verdicts(run, layers, pooling, method, x)
    if not method.seed_compat:
        profile = [r for r in rows if r["metric"] == "r_centroid_pref"]
        other_rows, summary["loo_vs_self"] = centroid_comparison(run, layers, pooling, method, profile)
        rows += control_rows(run, x, layers, pooling, method) + other_rows
    return summary, rows


def verdicts(run: PairRun, layers: list[int], pooling: str, method: Method, x: np.ndarray | None = None
             ) -> tuple[PhasesModel, list[dict]]:
    """Summary (profile, phases, pattern, late-layer verdict) and rows (``r_centroid_pref`` per tested layer,
    ``phase_mean`` per phase, by default ``phase_difference``) of ``run``; the inputs of every r checked finite.
    ``x``: its :func:`pair_asymmetry` (n_pairs, len(layers)) when already computed."""
    info, n_pairs = run.info, len(run.pref)
    if x is None:
        x = pair_asymmetry(run.a(pooling), run.b(pooling), method.centroids == "loo", layers)
    check_values("phases", info.name, "output preference NLL(B) - NLL(A)", run.pref)  # the inputs of every r
    for column, layer in enumerate(layers):
        check_values("phases", info.name, f"layer {layer} centroid asymmetry ({pooling} pooling)", x[:, column])
    profile = (layer_profile(x, run.pref, method.n_bootstrap, method.level, np.random.RandomState(method.seed))
               if method.seed_compat else tested_profile(x, run.pref, method))
    stage = {} if method.seed_compat or run.stage != "pre_norm" else {"stage": "pre_norm"}
    rows = [layer_row(info.name, layer, info.n_layers, "r_centroid_pref", pooling=pooling, n=n_pairs,
                      centroids=method.centroids, **s, **(stage if layer == info.n_layers else {}))
            for layer, s in zip(layers, profile, strict=False)]
    phases, difference = phase_summary(layers, profile, x, run.pref, method)
    by_layer = dict(zip(layers, profile, strict=True))  # each tested layer's test
    for phase, p in phases.items():
        n = sum(np.isfinite(by_layer[layer]["value"]) for layer in p["layers"])
        rows.append({"model": info.name, "pooling": pooling, "metric": "phase_mean", "value": p["mean"], "n": int(n),
                     "phase": phase, **{k: p[k] for k in ("ci_lo", "ci_hi") if k in p}})
    final_layer = layers[-1]  # the last tested layer: the late-layer verdict's
    final = by_layer[final_layer]
    summary: PhasesModel = {"n_layers": info.n_layers, "layers": layers, "pooling": pooling, "n_pairs": n_pairs,
               "n_bootstrap": method.n_bootstrap, "ci_level": method.level, "centroids": method.centroids,
               "significance": "ci" if method.seed_compat else "q", "phases": phases,
               "final_layer": final_layer, "final_r": defined(final["value"]),
               "final_significant": final["significant"],
               "significant_layers": [layer for layer, s in zip(layers, profile, strict=False) if s["significant"]]}
    if method.seed_compat:
        means = [p["mean"] for p in phases.values()]
        label = "UNDETERMINED" if None in means else pattern(*means)
        summary.update(pattern=label, pattern_text=PATTERNS[label],
                       late_inversion=late_inversion(summary["final_r"], final["significant"]))
        return summary, rows
    rows.append({"model": info.name, "pooling": pooling, "metric": "phase_difference", "phase": "late - early",
                 "n": phases["early"]["n"] + phases["late"]["n"] if difference["value"] is not None else 0,
                 **difference})
    summary["phase_difference"] = difference
    summary["pattern"], summary["pattern_text"] = assess_pattern(phases, difference, method.level)
    summary["late_label"], summary["late_inversion"] = late_verdict(final, n_pairs, method.level)
    summary.update(final_q=defined(final["q"]), final_p_perm=defined(final["p_perm"]),
                   final_ci=[defined(final["ci_lo"]), defined(final["ci_hi"])],
                   final_stage="pre_norm" if stage and final_layer == info.n_layers else None)
    return summary, rows


def assess_pattern(phases: PhaseMeans, difference: PhaseDifference, level: float) -> tuple[str, str]:
    """NOT_ASSESSABLE when a phase has fewer than 2 tested layers with a defined r, else :func:`interval_pattern`."""
    short = {phase: p for phase, p in phases.items() if p["n"] < MIN_PHASE_LAYERS}
    if short:
        counts = "; ".join(f"{phase} has {p['n']} ({', '.join(map(str, p['layers'])) or 'none tested'})"
                           for phase, p in short.items())
        return "NOT_ASSESSABLE", (f"not assessable: each phase needs at least {MIN_PHASE_LAYERS} tested layers with a "
                                  f"defined r ({counts})")
    intervals = {phase: (p["ci_lo"], p["ci_hi"]) for phase, p in phases.items()}
    return interval_pattern({**intervals, "late - early": (difference["ci_lo"], difference["ci_hi"])}, level)


def control_rows(run: PairRun, x: np.ndarray, layers: list[int], pooling: str, method: Method) -> list[dict]:
    """Spearman rho of ``x`` (n_pairs, len(layers)) with the preference (``rho_centroid_pref``) and r with the
    summed preference (``r_centroid_pref_sum``), each with q over the layers."""
    rho = add_q(spearman_tests(x, run.pref), "p", method.level)
    summed = add_q(pearson_tests(x, run.pref_sum, method.n_permutations, method.seed), "p_perm", method.level)
    return [layer_row(run.info.name, layer, run.info.n_layers, metric, pooling=pooling, n=len(run.pref),
                      centroids=method.centroids, **test)
            for metric, tests in (("rho_centroid_pref", rho), ("r_centroid_pref_sum", summed))
            for layer, test in zip(layers, tests, strict=False)]


def centroid_comparison(run: PairRun, layers: list[int], pooling: str, method: Method,
                        profile: list[dict]) -> tuple[list[dict], CentroidComparison]:
    """Rows ``r_centroid_pref_<other>`` with the other centroid variant than ``method.centroids`` (whose
    ``profile`` is given), and the layer where r(leave-one-out) - r(self-including) is largest in size."""
    other = "self" if method.centroids == "loo" else "loo"
    x_other = pair_asymmetry(run.a(pooling), run.b(pooling), other == "loo", layers)
    tests = add_q(pearson_tests(x_other, run.pref, method.n_permutations, method.seed), "p_perm", method.level)
    rows = [layer_row(run.info.name, layer, run.info.n_layers, f"r_centroid_pref_{other}", pooling=pooling,
                      n=len(run.pref), centroids=other, **test) for layer, test in zip(layers, tests, strict=False)]
    r = {method.centroids: [s["value"] for s in profile], other: [s["value"] for s in tests]}
    diff = np.asarray(r["loo"], dtype=np.float64) - np.asarray(r["self"], dtype=np.float64)
    i = int(np.nanargmax(np.abs(diff))) if np.isfinite(diff).any() else 0
    return rows, {"layer": layers[i], "r_loo": defined(r["loo"][i]), "r_self": defined(r["self"][i]),
                  "difference": defined(diff[i])}
