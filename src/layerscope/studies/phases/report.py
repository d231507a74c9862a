"""Phases report: pair-level table, phase structure, pattern, cross-model comparison."""

from __future__ import annotations

from ...report.markdown import md_table, method_line, number, signed
from ..result import StudyResult


def report(result: StudyResult) -> str:
    out = ["# Phases: pair-level centroid asymmetry vs output preference", "",
           "Per pair, centroid asymmetry = cos(a, centroid of all A) - cos(b, centroid of all B); r is Pearson's "
           "correlation with the pair's preference NLL(B) - NLL(A) over pairs, with a percentile bootstrap "
           "confidence interval. A layer is significant when its interval excludes 0.", "",
           method_line(result.config), ""]
    table = result.table[result.table["metric"] == "r_centroid_pref"]
    for model, s in result.summary["models"].items():
        level = f"{s['ci_level']:.0%}"
        out += [f"## {model}: {s['n_pairs']} pairs, {s['pooling']} pooling, {s['n_bootstrap']:,} resamples", ""]
        rows = table[table["model"] == model].sort_values("layer")
        out.append(md_table(["layer", "depth", "r", f"{level} CI", "p", "significant"],
                            [[int(r.layer), f"{r.depth:.0%}", signed(r.value), f"[{signed(r.ci_lo)}, {signed(r.ci_hi)}]",
                              number(r.p), "***" if r.significant else ""] for r in rows.itertuples()]))
        out += ["", "### Phase structure", ""]
        out.append(md_table(["phase", "layers", "mean r"],
                            [[phase, ", ".join(map(str, p["layers"])), signed(p["mean"])]
                             for phase, p in s["phases"].items()]))
        out += ["", f"**Pattern: {s['pattern']}** ({s['pattern_text']}).", "",
                f"Final layer ({s['final_layer']}): r = {signed(s['final_r'])} -> **{s['late_inversion']}**.", ""]
    out += ["## Cross-model comparison (phase means)", ""]
    out.append(md_table(["model", "early", "mid", "late", "source"],
                        [[row["model"], signed(row["early"], 2), signed(row["mid"], 2), signed(row["late"], 2),
                          row["source"]] for row in result.summary["comparison"]]))
    out += ["", "Rows marked *published* are figures quoted in the phases notebook, not recomputed here.", ""]
    return "\n".join(out)
