"""Scaling (seed 001): the r(UA, preference) layer profile of several models on a common
depth axis, and whether its peak moves with model size.

    summary, rows = analyse_model(run, run.layers, "mean")   # one model (a ScalingModel): profile, peak, checks
    summary, rows = analyse_run(run, config)                 # the same with the settings of a StudyConfig
    stability = peak_verdict(summaries)                      # STABLE / SHIFTS / not assessable, with the reason
    r_tests, rho_tests = profile(run, layers, "mean")        # per tested layer: r ("value"), p, p_perm, CI, q
    peak_stability([s["max_pos_pct"] for s in ...])          # the notebooks' rule (notebooks mode, sweeps)

By default the final layer is the last block's output before the final norm (``run.at_stage("pre_norm")``), the
peak search leaves out the embedding layer, a peak counts only when its r is positive and significant (BH q over
the tested layers < 1 - level), and the stability verdict needs :data:`MIN_FAMILY` such peaks in one architecture.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from ...errors import LayerscopeError
from ...modes import NOTEBOOKS
from ...report.markdown import number, signed
from ...stats import sign_changes
from ...study.finite import check_values, defined
from ...study.result import layer_row
from ...study.sensitivity import check_entry, not_significant, robustness, sign_flips
from ..shared.categories import category_pref, category_tests, category_ua
from ..shared.correlation import Significance, add_q, spearman_tests
from ..shared.inputs import NORM_CHECK, PairRun, check_runs
from ..shared.subsets import in_subset, subset_name
from .summary import Family, PeakCheck, PeakVerdict, ScalingModel, SeedStability, SignChange

if TYPE_CHECKING:
    from ...study.config import StudyConfig

STABLE_STD_PCT = 10.0
"""The notebooks' rule (:func:`peak_stability`): stable when the population std of the peak depths is below this."""
STABLE_RANGE_PCT = 10.0
"""Default rule: one family's peak depths are stable when they span (max - min) less than this many points of depth;
a check also moves the peak when it shifts it by at least this much."""
MIN_FAMILY = 3
"""Models with a significant peak that one architecture needs before its peak depths are compared."""
EMBEDDING_LAYER = 0
RULE = (f"peak depth = layer / number of layers, over the tested layers except the embedding layer (layer "
        f"{EMBEDDING_LAYER}); a peak counts when its r is positive with q < 1 - level; STABLE when the peak depths of "
        f">= {MIN_FAMILY} models of one architecture span (max - min) less than {STABLE_RANGE_PCT:.0f} points, SHIFTS "
        "otherwise; the sample standard deviation (n - 1) is shown beside the range")
VERDICT_METRICS = ()
"""Table metrics that must be finite: none, since the table holds only r and rho, which are undefined (NaN) where
UA is the same in every category; :func:`profile` checks their inputs, UA and the preference, instead."""


def category_inputs(run: PairRun, layers: list[int], pooling: str) -> tuple[np.ndarray, np.ndarray]:
    """``ua, pref = category_inputs(run, layers, "mean")``: category UA (n_cat, len(layers)) and category preference
    (n_cat,), each checked finite (``NonFiniteError`` naming the layer) before any r is computed from them."""
    cats, n_cat = run.pairs.pair_categories(), len(run.pairs.categories)
    ua = category_ua(run.a(pooling), run.b(pooling), cats, n_cat, layers)
    pref = category_pref(run.pref, cats, n_cat)
    check_values("scaling", run.info.name, "category preference NLL(B) - NLL(A)", pref)  # before any r
    for column, layer in enumerate(layers):
        check_values("scaling", run.info.name, f"layer {layer} category UA ({pooling} pooling)", ua[:, column])
    return ua, pref


def profile(run: PairRun, layers: list[int], pooling: str, sig: Significance | None = None
            ) -> tuple[list[dict], list[dict]]:
    """Category UA vs category preference at each tested layer: (r tests, rho tests), one dict per layer.

    r tests hold r as ``value`` and its ``p``; by default also ``p_perm``, the Fisher-z ``ci_lo``, ``ci_hi``,
    ``q`` (BH over the layers) and ``significant``. rho tests (none in notebooks mode) hold rho, p, q, significant.
    """
    ua, pref = category_inputs(run, layers, pooling)
    return profile_tests(ua, pref, sig or Significance())


def profile_tests(ua: np.ndarray, pref: np.ndarray, sig: Significance) -> tuple[list[dict], list[dict]]:
    """:func:`profile` on given ``ua`` (n_cat, k) and ``pref`` (n_cat,)."""
    r_tests = category_tests(ua, pref, sig)
    if sig.compat == NOTEBOOKS:
        return r_tests, []
    return add_q(r_tests, "p_perm", sig.level), add_q(spearman_tests(ua, pref), "p", sig.level)


def analyse_run(run: PairRun, config: StudyConfig) -> tuple[ScalingModel, list[dict]]:
    """``summary, rows = analyse_run(run, config)``: :func:`analyse_model` on the run's tested layers with the
    pooling, compat, ci_level, seed and n_permutations of ``config`` (what ``Scaling.run`` computes per model;
    :mod:`layerscope.validation.nulls` calls it on relabelled runs)."""
    return analyse_model(run, run.layers, config.pooling, compat=config.compat, level=config.ci_level,
                         seed=config.seed, n_permutations=config.n_permutations)


def analyse_model(run: PairRun, layers: list[int], pooling: str, compat: str | None = None, level: float = 0.95,
                  seed: int = 42, n_permutations: int = 10_000) -> tuple[ScalingModel, list[dict]]:
    """``summary, rows = analyse_model(run, run.layers, "mean")``: one model's profile, peak and checks.

    By default the profile is of ``run.at_stage("pre_norm")`` (rows at layer n_layers get ``stage``), the summary
    holds the peak's q, interval and significance, the family, the significant sign changes and the flips within
    noise, and ``checks`` / ``robustness``: the peak recomputed under each of :func:`check_runs` (rows with
    ``subset`` = the check's name; the after-the-final-norm check writes only its layer n_layers rows).
    ``compat="notebooks"``: the notebook's profile of the post-norm run, r and p only. ``compat``, ``level``, ``seed``
    and ``n_permutations``: how each r is tested (:class:`~..correlation.Significance`).
    """
    if compat == NOTEBOOKS:
        return seed_model(run, layers, pooling)
    run = run.at_stage("pre_norm")
    sig = Significance(compat, level, seed, n_permutations)
    summary, rows = model_profile(run, layers, pooling, sig)
    rows = in_subset(rows, subset_name(None))
    checks = []
    for name, other in check_runs(run, pooling):
        changed, other_rows = model_profile(other, layers, pooling, sig, controls=False)
        if name == NORM_CHECK:
            other_rows = [row for row in other_rows if row["layer"] == run.info.n_layers]
        rows += in_subset(other_rows, name)
        checks.append(peak_check(name, summary, changed))
    summary["checks"], summary["robustness"] = checks, robustness(checks)
    return summary, rows


def seed_model(run: PairRun, layers: list[int], pooling: str) -> tuple[ScalingModel, list[dict]]:
    """The notebook's analysis of one model: r and p per tested layer, the landmarks of the profile."""
    info, n_cat = run.info, len(run.pairs.categories)
    r_tests, _ = profile(run, layers, pooling, Significance(compat=NOTEBOOKS))
    rows = [layer_row(info.name, layer, info.n_layers, "r_ua_pref", pooling=pooling, n=n_cat, **test)
            for layer, test in zip(layers, r_tests, strict=False)]
    return profile_summary(layers, [test["value"] for test in r_tests], info.n_layers), rows


def model_profile(run: PairRun, layers: list[int], pooling: str, sig: Significance, controls: bool = True
                  ) -> tuple[ScalingModel, list[dict]]:
    """Default-mode profile of ``run``: summary (peak over the tested layers but the embedding layer, with its q,
    interval and significance; sign changes split by Williams' test) and rows (r, and with ``controls`` rho)."""
    info, n_cat = run.info, len(run.pairs.categories)
    ua, pref = category_inputs(run, layers, pooling)
    r_tests, rho_tests = profile_tests(ua, pref, sig)
    families = (("r_ua_pref", r_tests), ("rho_ua_pref", rho_tests)) if controls else (("r_ua_pref", r_tests),)
    rows = [layer_row(info.name, layer, info.n_layers, metric, pooling=pooling, n=n_cat, **test,
                      **({"stage": run.stage} if layer == info.n_layers else {}))
            for metric, tests in families for layer, test in zip(layers, tests, strict=False)]
    summary = profile_summary(layers, [test["value"] for test in r_tests], info.n_layers, exclude=(EMBEDDING_LAYER,))
    peak_layers = [layer for layer in layers if layer != EMBEDDING_LAYER]
    at = layers.index(summary["max_pos_layer"])
    peak = r_tests[at]
    summary.update({
        "family": info.architecture, "stage": run.stage, "n_categories": n_cat, "layers": list(layers),
        "peak_layers": peak_layers, "final_layer": layers[-1],
        "depth_step_pct": depth_step(peak_layers, info.n_layers),
        "significant_layers": [layer for layer, test in zip(layers, r_tests, strict=False) if test["significant"]],
        "max_pos_p_perm": defined(peak["p_perm"]), "max_pos_q": defined(peak["q"]),
        "max_pos_ci": [defined(peak["ci_lo"]), defined(peak["ci_hi"])],
        "max_pos_significant": bool(peak["significant"] and peak["value"] > 0)})
    if controls:
        summary["max_pos_rho"] = defined(rho_tests[at]["value"])
    significant, noise = sign_flips(layers, ua, pref, sig.level, sig.n_permutations, sig.seed)
    summary["sign_changes"] = [_with_midpoint(flip, info.n_layers) for flip in significant]
    summary["sign_flips_within_noise"] = [_with_midpoint(flip, info.n_layers) for flip in noise]
    summary["peak"] = peak_label(summary, sig.level)
    return summary, rows


def depth_step(layers: list[int], n_layers: int) -> float | None:
    """The largest gap between consecutive ``layers`` in points of depth (None for one layer): how finely a
    peak depth is resolved."""
    gaps = np.diff(layers)
    return float(gaps.max() / n_layers * 100) if gaps.size else None


def _with_midpoint(flip: dict, n_layers: int) -> SignChange:
    return {**flip, "midpoint_pct": (flip["layer_before"] + flip["layer_after"]) / 2 / n_layers * 100}


def peak_label(m: ScalingModel, level: float = 0.95) -> str:
    """``"L12 (40% depth), r = +0.812, q = 0.021"`` for a significant positive peak, else why it does not count."""
    where = f"L{m['max_pos_layer']} ({m['max_pos_pct']:.0f}% depth)"
    if m["max_pos_r"] <= 0:
        return f"no positive peak (largest r = {signed(m['max_pos_r'])} at {where})"
    if m["max_pos_significant"]:
        return f"{where}, r = {signed(m['max_pos_r'])}, q = {number(m['max_pos_q'])}"
    return not_significant(m["n_categories"], p=m["max_pos_p_perm"], q=m["max_pos_q"], ci=tuple(m["max_pos_ci"]),
                           level=level, what=f"{where}, r = {signed(m['max_pos_r'])}, not significant")


def peak_check(name: str, main: ScalingModel, changed: ScalingModel) -> PeakCheck:
    """The peak recomputed under check ``name``: it flips when its significance changes, or when both are
    significant and the peak moves by at least :data:`STABLE_RANGE_PCT` points of depth."""
    significant = changed["max_pos_significant"]
    shift = abs(changed["max_pos_pct"] - main["max_pos_pct"])
    moved = significant and main["max_pos_significant"] and shift >= STABLE_RANGE_PCT
    label = (f"peak L{changed['max_pos_layer']} ({changed['max_pos_pct']:.0f}%)" if significant
             else "no significant peak")
    return check_entry(name, changed["max_pos_pct"], label, significant != main["max_pos_significant"] or moved,
                       layer=changed["max_pos_layer"], r=changed["max_pos_r"], q=changed["max_pos_q"],
                       significant=significant, n_categories=changed["n_categories"])


def profile_summary(layers: list[int], rs: list[float], n_layers: int, exclude: tuple[int, ...] = ()
                    ) -> ScalingModel:
    """Largest r and its layer and % depth, the most negative r, the final r (None where undefined), sign changes;
    layers where r is undefined (NaN: UA the same in every category) are left out of all but the final r, and the
    layers in ``exclude`` (e.g. the embedding layer 0) out of the largest and most negative r."""
    kept = [i for i, x in enumerate(rs) if np.isfinite(x)]
    search = [i for i in kept if layers[i] not in exclude]
    if not search:
        left_out = f" besides layer {', '.join(map(str, exclude))}, which the peak search leaves out" if exclude else ""
        raise LayerscopeError(f"scaling: r(UA, preference) is undefined at every tested layer ({layers}){left_out}: "
                              "there is no profile to find a peak in; test more layers (--layers all) or another "
                              "pooling")
    final_r = defined(rs[-1])
    r = np.asarray([rs[i] for i in search], dtype=np.float64)
    hi, lo = search[int(np.argmax(r))], search[int(np.argmin(r))]
    defined_layers, defined_r = [layers[i] for i in kept], [rs[i] for i in kept]
    return {
        "n_layers": n_layers,
        "max_pos_r": float(rs[hi]), "max_pos_layer": layers[hi], "max_pos_pct": layers[hi] / n_layers * 100,
        "max_neg_r": float(rs[lo]), "max_neg_layer": layers[lo], "max_neg_pct": layers[lo] / n_layers * 100,
        "final_r": final_r,
        "sign_changes": [{"layer_before": defined_layers[i], "layer_after": defined_layers[i + 1],
                          "midpoint_pct": (defined_layers[i] + defined_layers[i + 1]) / 2 / n_layers * 100}
                         for i in sign_changes(defined_r)],
    }


def peak_stability(peak_pcts: list[float]) -> SeedStability:
    """The notebooks' rule (notebooks mode, sweeps): mean and population std of the peak depths; stable when
    std < 10 points."""
    if len(peak_pcts) < 2:
        return {"mean_peak_pct": float(np.mean(peak_pcts)), "std_peak_pct": None, "peaks_stable": None,
                "answer": "Needs at least two models to say whether the peak shifts with size."}
    mean, std = float(np.mean(peak_pcts)), float(np.std(peak_pcts))
    stable = std < STABLE_STD_PCT
    answer = (f"The peak position is STABLE across scales (~{mean:.0f}% depth)." if stable
              else "The peak position SHIFTS with model size.")
    return {"mean_peak_pct": mean, "std_peak_pct": std, "peaks_stable": stable, "answer": answer}


def peak_verdict(models: dict[str, ScalingModel]) -> PeakVerdict:
    """``peak_verdict(summaries)``: :func:`assess` of the models' peaks, with its ``checks`` (the verdict from the
    peaks each model's check found, for every check all models share) and ``robustness``."""
    verdict = assess(models)
    names = [c["check"] for c in next(iter(models.values()), {}).get("checks", [])]
    shared = [name for name in names if all(any(c["check"] == name for c in m["checks"]) for m in models.values())]
    checks = []
    for name in shared:
        under = assess({model: {**m, **_peak_of(next(c for c in m["checks"] if c["check"] == name))}
                        for model, m in models.items()})
        checks.append(check_entry(name, under["range_peak_pct"], under["verdict"],
                                  under["verdict"] != verdict["verdict"], reason=under["reason"]))
    return {**verdict, "checks": checks, "robustness": robustness(checks)}


def _peak_of(check: PeakCheck) -> dict:
    """A check entry of :func:`peak_check` as the summary fields :func:`assess` reads."""
    return {"max_pos_pct": check["value"], "max_pos_layer": check["layer"], "max_pos_r": check["r"],
            "max_pos_q": check["q"], "max_pos_significant": check["significant"]}


def assess(models: dict[str, ScalingModel]) -> dict:
    """Whether the peak depth shifts with size, from each model's ``family``, ``max_pos_pct``, ``max_pos_q`` and
    ``max_pos_significant``: per architecture with >= :data:`MIN_FAMILY` significant peaks, STABLE when their
    depths span less than :data:`STABLE_RANGE_PCT` points, else SHIFTS; overall STABLE when every such family is,
    SHIFTS when one is not, "not assessable" (with ``reason``) when no family has enough significant peaks."""
    by_family: dict[str, list[str]] = defaultdict(list)
    for model, m in models.items():
        by_family[m["family"]].append(model)
    families = [family_entry(family, {model: models[model] for model in names}) for family, names in by_family.items()]
    assessed = [f for f in families if f["verdict"] != "not assessable"]
    coarse = [f"{model} {m['depth_step_pct']:.0f}" for model, m in models.items()
              if (m.get("depth_step_pct") or 0) > STABLE_RANGE_PCT]
    caveats = [f"tested layers coarser than the {STABLE_RANGE_PCT:.0f}-point rule (largest gap in points of depth: "
               f"{', '.join(coarse)})"] if coarse else []
    out = {"rule": RULE, "families": families, "caveats": caveats, "reason": None, "peaks_stable": None,
           "mean_peak_pct": None, "range_peak_pct": None, "sd_peak_pct": None}
    if not assessed:
        reason = not_assessable_reason(models, families)
        return {**out, "verdict": "not assessable", "reason": reason, "answer": f"not assessable ({reason})"}
    stable = all(f["verdict"] == "STABLE" for f in assessed)
    if len(assessed) == 1:  # one family's depths are the answer: show their mean, range and sd
        (only,) = assessed
        out.update({k: only[k] for k in ("mean_peak_pct", "range_peak_pct", "sd_peak_pct")})
    return {**out, "verdict": "STABLE" if stable else "SHIFTS", "peaks_stable": stable,
            "answer": "; ".join(f["answer"] for f in assessed)}


def family_entry(family: str, models: dict[str, ScalingModel]) -> Family:
    """One architecture's models, their significant peak depths and its verdict (see :func:`assess`)."""
    depths = [m["max_pos_pct"] for m in models.values() if m["max_pos_significant"]]
    entry = {"family": family, "models": list(models), "significant": [name for name, m in models.items()
                                                                       if m["max_pos_significant"]],
             "peak_pcts": depths, "mean_peak_pct": None, "range_peak_pct": None, "sd_peak_pct": None}
    if len(depths) < MIN_FAMILY:
        return {**entry, "verdict": "not assessable", "answer": None}
    lo, hi = min(depths), max(depths)
    stable = hi - lo < STABLE_RANGE_PCT
    verdict = "STABLE" if stable else "SHIFTS"
    what = "is stable across scales" if stable else "shifts with model size"
    answer = (f"{verdict}: the peak position {what} in {family} ({len(depths)} models with significant peaks at "
              f"{lo:.0f}-{hi:.0f}% depth: range {hi - lo:.1f} points {'<' if stable else '>='} "
              f"{STABLE_RANGE_PCT:.0f})")
    return {**entry, "verdict": verdict, "answer": answer, "mean_peak_pct": float(np.mean(depths)),
            "range_peak_pct": float(hi - lo), "sd_peak_pct": float(np.std(depths, ddof=1))}


def not_assessable_reason(models: dict[str, ScalingModel], families: list[Family]) -> str:
    """Why no family can be assessed: ``"2 models of 2 families; needs >= 3 of one family; peak of X not
    significant (q = 0.29)"``."""
    largest = max(len(f["models"]) for f in families)
    n_fam = len(families)
    reasons = [f"{len(models)} model{'s' if len(models) != 1 else ''} of {n_fam} famil{'ies' if n_fam != 1 else 'y'}"]
    if largest < MIN_FAMILY:
        reasons.append(f"needs >= {MIN_FAMILY} of one family")
    for model, m in models.items():
        if not m["max_pos_significant"]:
            why = "not positive" if m["max_pos_r"] is not None and m["max_pos_r"] <= 0 else "not significant"
            reasons.append(f"peak of {model} {why} (q = {number(m['max_pos_q'])})")
    if largest >= MIN_FAMILY:
        reasons += [f"{len(f['significant'])} of the {len(f['models'])} {f['family']} peaks significant; needs "
                    f">= {MIN_FAMILY}" for f in families if len(f["models"]) >= MIN_FAMILY]
    return "; ".join(reasons)
