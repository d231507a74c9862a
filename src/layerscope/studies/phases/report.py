"""Phases report: pair-level table, phase structure, pattern, cross-model comparison; by default also the
phase intervals, the sensitivity checks, the leave-one-out vs self-including centroids, the run without a
dropped category and the length control.

    text = report(result)
"""

from __future__ import annotations

import pandas as pd

from ...modes import NOTEBOOKS
from ...report.markdown import md_table, md_text, method_line, number, signed
from ...study.result import StudyResult
from ..shared.caveats import legend_lines, warning_lines
from ..shared.length import length_paragraph
from ..shared.subsets import on_subset
from .analysis import DECOUPLED_WITHIN, EARLY_ABOVE, LATE_BELOW, MIN_PHASE_LAYERS
from .summary import (
    CentroidComparison,
    ComparisonRow,
    PhaseDifference,
    PhaseMean,
    PhasesCheck,
    PhasesModel,
    PhasesSummary,
)

CENTROIDS = {"loo": "the centroids of the other pairs (leave-one-out)",
             "self": "the centroids of all pairs, the pair itself included"}


def report(result: StudyResult) -> str:
    """``text = report(result)``: the markdown report of a phases result."""
    seed = result.config.get("compat") == NOTEBOOKS
    rule = ("with a percentile bootstrap confidence interval. A layer is significant when its interval excludes 0."
            if seed else "with a BCa bootstrap confidence interval (pairs resampled together). A layer is "
            "significant when its q is below 1 - confidence level.")
    out = ["# Phases: pair-level centroid asymmetry vs output preference", "",
           ("Per pair, centroid asymmetry = cos(a, centroid of A) - cos(b, centroid of B); r is Pearson's "
           f"correlation with the pair's preference NLL(B) - NLL(A) over pairs, {rule}"), "",
           method_line(result.config), "", *warning_lines(result.summary),
           *legend_lines(result.config, "pairs", "BCa bootstrap")]
    table = on_subset(result.table)
    summary: PhasesSummary = result.summary
    for model, s in summary["models"].items():
        level = f"{s['ci_level']:.0%}"
        rows = table[table["model"] == model]
        out += [f"## {md_text(model)}: {s['n_pairs']} pairs, {s['pooling']} pooling, {s['n_bootstrap']:,} resamples",
                ""]
        out += stage_lines(s)
        if "centroids" in s:
            out += [f"Centroids: {CENTROIDS[s['centroids']]}.", ""]
        out += layer_table(rows, level, seed) + ["", "### Phase structure", ""]
        out += phase_section(s, level) if "late_label" in s else seed_phase_section(s, seed)
        if "checks" in s:
            out += checks_section(s)
        if "loo_vs_self" in s:
            out += centroid_section(rows, s["loo_vs_self"])
        if "without_category" in s:
            out += without_section(s)
        if "length_control" in s:
            out += ["### Length control", "", length_paragraph(s["length_control"], "r_centroid_pref_sum"), ""]
    return "\n".join(out + comparison_section(summary["comparison"]))


def stage_lines(s: PhasesModel) -> list[str]:
    """Which state the final layer is, by default: before the final norm (after it: the checks)."""
    if "stage" not in s or s["n_layers"] not in s["layers"]:
        return []
    if s["stage"] == "pre_norm":
        return [(f"The final layer ({s['n_layers']}) is taken before the final norm (the last block's output); after "
                "it, see the checks."), ""]
    return [(f"The final layer ({s['n_layers']}) is taken after the final norm: these activations hold no pre-norm "
            "states."), ""]


def seed_phase_section(s: PhasesModel, seed: bool) -> list[str]:
    """Phase means, pattern and final-layer verdict by the notebook's rule (bare means, no interval)."""
    rule = "; the notebook's rule: bare phase means against +-0.1 and 0.15, no interval" if seed else ""
    return [md_table(["phase", "layers", "mean r"], [[phase, ", ".join(map(str, p["layers"])), signed(p["mean"])]
                                                     for phase, p in s["phases"].items()]),
            "", f"**Pattern: {s['pattern']}** ({s['pattern_text']}{rule}).", "",
            f"Final layer ({s['final_layer']}): r = {signed(s['final_r'])}"
            + (f", q = {number(s['final_q'])}" if "final_q" in s else "")
            + f" -> **{s['late_inversion']}**" + (" (the notebook's rule)." if seed else "."), ""]


def phase_section(s: PhasesModel, level: str) -> list[str]:
    """Phase means with their bootstrap intervals, late - early, the pattern they support and the late verdict."""
    rows = [[phase, ", ".join(map(str, p["layers"])) or "none", p["n"], signed(p["mean"]), interval(p)]
            for phase, p in s["phases"].items()]
    d = s["phase_difference"]
    rows.append(["late - early", "", "", signed(d["value"]), interval(d)])
    stage = ", before the final norm" if s.get("final_stage") == "pre_norm" else ""
    return [md_table(["phase", "layers", "n", "mean r", f"{level} CI"], rows), "",
            (f"Each interval is a percentile bootstrap over pairs ({s['n_bootstrap']:,} resamples, pairs resampled "
            "together, r recomputed at every tested layer and averaged per phase). The pattern follows from the "
            f"intervals: PYTHIA_PATTERN when early lies above {signed(EARLY_ABOVE, 1)} and late below "
            f"{signed(LATE_BELOW, 1)}; LATE_INVERSION when late lies below {signed(LATE_BELOW, 1)} and late - early "
            f"below 0; DECOUPLED when all three lie within (-{DECOUPLED_WITHIN}, +{DECOUPLED_WITHIN}); each phase "
            f"needs at least {MIN_PHASE_LAYERS} tested layers with a defined r."), "",
            pattern_line(s), "",
            (f"Last tested layer ({s['final_layer']}{stage}): r = {signed(s['final_r'])}, p_perm = "
            f"{number(s.get('final_p_perm'))}, q = {number(s['final_q'])} -> **{s['late_inversion']}** "
            f"(confirmed only when r < {signed(LATE_BELOW, 1)} with q < {1 - s['ci_level']:.2g})."), ""]


def pattern_line(s: PhasesModel) -> str:
    """``"**Pattern: PYTHIA_PATTERN** (positive early, negative late)."``, or the reason there is none."""
    if s["pattern"] in ("NO_PATTERN", "NOT_ASSESSABLE"):
        return f"**Pattern:** {s['pattern_text']}."
    return f"**Pattern: {s['pattern']}** ({s['pattern_text']})."


def interval(p: PhaseMean | PhaseDifference) -> str:
    """``"[-0.170, +0.950]"``, or n/a."""
    if p.get("ci_lo") is None or p.get("ci_hi") is None:
        return "n/a"
    return f"[{signed(p['ci_lo'])}, {signed(p['ci_hi'])}]"


def checks_section(s: PhasesModel) -> list[str]:
    """The pattern and the late-layer verdict under each sensitivity check, and whether either flips."""
    if not s["checks"]:
        return []
    rows = [[md_text(c["check"]), c["n_pairs"], *(signed(c["phases"][phase], 2) for phase in ("early", "mid", "late")),
             c["pattern"], signed(c["value"]), c["late"], flips(c)] for c in s["checks"]]
    return ["### Sensitivity checks", "",
            ("The same analysis without position 0 or without the massive-activation tokens in the mean, with the "
            "final layer after the final norm, and with each category left out in turn."), "",
            md_table(["check", "pairs", "early", "mid", "late", "pattern", "last-layer r", "last-layer verdict",
                      "flips"], rows), "", f"**Robustness:** {md_text(s['robustness'])}.", ""]


def flips(check: PhasesCheck) -> str:
    """``"pattern, late verdict"``: what a check flips, or "no"."""
    what = [name for name, key in (("pattern", "pattern_flips"), ("late verdict", "late_flips")) if check.get(key)]
    return ", ".join(what) or "no"


def comparison_section(rows: list[ComparisonRow]) -> list[str]:
    """The cross-model table; by default with how each row was computed and whether it compares directly."""
    out = ["## Cross-model comparison (phase means)", ""]
    if rows and all("comparability" in row for row in rows):  # default mode: every row says how it was computed
        out.append(md_table(["model", "early", "mid", "late", "data", "layers", "token rule", "source",
                             "comparability"],
                            [[cell(row["model"]), *(signed(row[p], 2) for p in ("early", "mid", "late")),
                              *(cell(row[f]) for f in ("data", "layers", "token_rule", "source", "comparability"))]
                             for row in rows]))
        return out + ["", ("Rows marked *published* are figures quoted in the phases notebook, not recomputed here. A "
                      "row *not directly comparable* was computed on other data, layers or token rules than this run "
                      "(or does not say how): read it as context, not as a replication."), ""]
    out.append(md_table(["model", "early", "mid", "late", "source"],
                        [[cell(row["model"]), signed(row["early"], 2), signed(row["mid"], 2), signed(row["late"], 2),
                          cell(row["source"])] for row in rows]))
    return out + ["", "Rows marked *published* are figures quoted in the phases notebook, not recomputed here.", ""]


def cell(text) -> str:
    """``cell(row["model"])``: free text from a reference file as a table cell, text and never markup."""
    return md_text(text)


def layer_table(rows: pd.DataFrame, level: str, seed: bool) -> list[str]:
    """Per tested layer: r, its CI and p; by default also p_perm, q and Spearman rho."""
    r = rows[rows["metric"] == "r_centroid_pref"].sort_values("layer")
    if seed:
        return [md_table(["layer", "depth", "r", f"{level} CI", "p", "significant"],
                         [[int(t.layer), f"{t.depth:.0%}", signed(t.value), f"[{signed(t.ci_lo)}, {signed(t.ci_hi)}]",
                           number(t.p), "***" if t.significant else ""] for t in r.itertuples()])]
    rho = rows[rows["metric"] == "rho_centroid_pref"].set_index("layer")["value"]
    return [md_table(["layer", "depth", "r", f"{level} CI", "p", "p_perm", "q", "rho", "significant"],
                     [[layer_cell(t), f"{t.depth:.0%}", signed(t.value), f"[{signed(t.ci_lo)}, {signed(t.ci_hi)}]",
                       number(t.p), number(t.p_perm), number(t.q), signed(rho.get(t.layer)),
                       "***" if t.significant else ""] for t in r.itertuples()])]


def layer_cell(t) -> str:
    """``"30 (before the final norm)"`` for a row whose ``stage`` is pre_norm, else the layer."""
    return f"{int(t.layer)} (before the final norm)" if getattr(t, "stage", None) == "pre_norm" else str(int(t.layer))


def centroid_section(rows: pd.DataFrame, largest: CentroidComparison) -> list[str]:
    """r per layer with leave-one-out and with self-including centroids, and the largest difference."""
    variants = rows[rows["metric"].isin(["r_centroid_pref", "r_centroid_pref_loo", "r_centroid_pref_self"])]
    by = {c: variants[variants["centroids"] == c].set_index("layer")["value"] for c in ("loo", "self")}
    table = md_table(["layer", "r loo", "r self", "difference"],
                     [[int(layer), signed(by["loo"][layer]), signed(by["self"][layer]),
                       signed(by["loo"][layer] - by["self"][layer], 4)] for layer in by["loo"].index])
    return ["### Leave-one-out vs self-including centroids", "", table, "",
            (f"The largest difference is at layer {largest['layer']}: r = {signed(largest['r_loo'])} with "
            f"leave-one-out centroids vs {signed(largest['r_self'])} with self-including ones "
            f"({signed(largest['difference'], 4)})."), ""]


def without_section(s: PhasesModel) -> list[str]:
    """Phase means, pattern and late-inversion verdict with and without the dropped category."""
    w = s["without_category"]
    last = "final r" if "late_label" not in s else f"r at layer {s['final_layer']}"
    dropped = md_text(w["category"])
    phases = md_table(["", *s["phases"], "pattern", last, "late layer"],
                      [["all pairs", *(signed(p["mean"]) for p in s["phases"].values()), s["pattern"],
                        signed(s["final_r"]), s["late_inversion"]],
                       [f"without {dropped}", *(signed(p["mean"]) for p in w["phases"].values()), w["pattern"],
                        signed(w["final_r"]), w["late_inversion"]]])
    return [f"### Without {dropped} ({w['n_pairs']} pairs)", "", phases, ""]
