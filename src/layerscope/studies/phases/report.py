"""Phases report: pair-level table, phase structure, pattern, cross-model comparison; by default
also the leave-one-out vs self-including centroids, the run without a dropped category and the
length control."""

from __future__ import annotations

import pandas as pd

from ...report.markdown import md_table, method_line, number, signed
from ..controls import legend_lines, length_paragraph, on_subset, warning_lines
from ..result import StudyResult

CENTROIDS = {"loo": "the centroids of the other pairs (leave-one-out)",
             "self": "the centroids of all pairs, the pair itself included"}


def report(result: StudyResult) -> str:
    seed = result.config.get("compat") == "seed"
    rule = ("with a percentile bootstrap confidence interval. A layer is significant when its interval excludes 0."
            if seed else "with a BCa bootstrap confidence interval (pairs resampled together). A layer is "
            "significant when its q is below 1 - confidence level.")
    out = ["# Phases: pair-level centroid asymmetry vs output preference", "",
           "Per pair, centroid asymmetry = cos(a, centroid of A) - cos(b, centroid of B); r is Pearson's "
           f"correlation with the pair's preference NLL(B) - NLL(A) over pairs, {rule}", "",
           method_line(result.config), "", *warning_lines(result.summary),
           *legend_lines(result.config, "pairs", "BCa bootstrap")]
    table = on_subset(result.table)
    for model, s in result.summary["models"].items():
        level = f"{s['ci_level']:.0%}"
        rows = table[table["model"] == model]
        out += [f"## {model}: {s['n_pairs']} pairs, {s['pooling']} pooling, {s['n_bootstrap']:,} resamples", ""]
        if "centroids" in s:
            out += [f"Centroids: {CENTROIDS[s['centroids']]}.", ""]
        out += layer_table(rows, level, seed) + ["", "### Phase structure", ""]
        out.append(md_table(["phase", "layers", "mean r"],
                            [[phase, ", ".join(map(str, p["layers"])), signed(p["mean"])]
                             for phase, p in s["phases"].items()]))
        out += ["", f"**Pattern: {s['pattern']}** ({s['pattern_text']}).", "",
                f"Final layer ({s['final_layer']}): r = {signed(s['final_r'])}"
                + (f", q = {number(s['final_q'])}" if "final_q" in s else "") + f" -> **{s['late_inversion']}**.", ""]
        if "loo_vs_self" in s:
            out += centroid_section(rows, s["loo_vs_self"])
        if "without_category" in s:
            out += without_section(s)
        if "length_control" in s:
            out += ["### Length control", "", length_paragraph(s["length_control"], "r_centroid_pref_sum"), ""]
    out += ["## Cross-model comparison (phase means)", ""]
    out.append(md_table(["model", "early", "mid", "late", "source"],
                        [[row["model"], signed(row["early"], 2), signed(row["mid"], 2), signed(row["late"], 2),
                          row["source"]] for row in result.summary["comparison"]]))
    out += ["", "Rows marked *published* are figures quoted in the phases notebook, not recomputed here.", ""]
    return "\n".join(out)


def layer_table(rows: pd.DataFrame, level: str, seed: bool) -> list[str]:
    """Per tested layer: r, its CI and p; by default also p_perm, q and Spearman rho."""
    r = rows[rows["metric"] == "r_centroid_pref"].sort_values("layer")
    if seed:
        return [md_table(["layer", "depth", "r", f"{level} CI", "p", "significant"],
                         [[int(t.layer), f"{t.depth:.0%}", signed(t.value), f"[{signed(t.ci_lo)}, {signed(t.ci_hi)}]",
                           number(t.p), "***" if t.significant else ""] for t in r.itertuples()])]
    rho = rows[rows["metric"] == "rho_centroid_pref"].set_index("layer")["value"]
    return [md_table(["layer", "depth", "r", f"{level} CI", "p", "p_perm", "q", "rho", "significant"],
                     [[int(t.layer), f"{t.depth:.0%}", signed(t.value), f"[{signed(t.ci_lo)}, {signed(t.ci_hi)}]",
                       number(t.p), number(t.p_perm), number(t.q), signed(rho.get(t.layer)),
                       "***" if t.significant else ""] for t in r.itertuples()])]


def centroid_section(rows: pd.DataFrame, largest: dict) -> list[str]:
    """r per layer with leave-one-out and with self-including centroids, and the largest difference."""
    variants = rows[rows["metric"].isin(["r_centroid_pref", "r_centroid_pref_loo", "r_centroid_pref_self"])]
    by = {c: variants[variants["centroids"] == c].set_index("layer")["value"] for c in ("loo", "self")}
    table = md_table(["layer", "r loo", "r self", "difference"],
                     [[int(layer), signed(by["loo"][layer]), signed(by["self"][layer]),
                       signed(by["loo"][layer] - by["self"][layer], 4)] for layer in by["loo"].index])
    return ["### Leave-one-out vs self-including centroids", "", table, "",
            f"The largest difference is at layer {largest['layer']}: r = {signed(largest['r_loo'])} with "
            f"leave-one-out centroids vs {signed(largest['r_self'])} with self-including ones "
            f"({signed(largest['difference'], 4)}).", ""]


def without_section(s: dict) -> list[str]:
    """Phase means, pattern and late-inversion verdict with and without the dropped category."""
    w = s["without_category"]
    phases = md_table(["", *s["phases"], "pattern", "final r", "late layer"],
                      [["all pairs", *(signed(p["mean"]) for p in s["phases"].values()), s["pattern"],
                        signed(s["final_r"]), s["late_inversion"]],
                       [f"without {w['category']}", *(signed(p["mean"]) for p in w["phases"].values()), w["pattern"],
                        signed(w["final_r"]), w["late_inversion"]]])
    return [f"### Without {w['category']} ({w['n_pairs']} pairs)", "", phases, ""]
