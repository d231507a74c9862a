"""Divergence report: the notebook's printed tables and verdicts, as markdown; by default with the
permutation p, Fisher-z CI, q and Spearman rho of each r, the run without a dropped category and
the length control."""

from __future__ import annotations

import pandas as pd

from ...report.markdown import md_table, method_line, number, signed
from ..controls import legend_lines, length_paragraph, on_subset, warning_lines
from ..result import StudyResult

POOLINGS = ("mean", "last", "first")


def report(result: StudyResult) -> str:
    level = result.config.get("ci_level", 0.95)
    out = ["# Divergence: where does r(UA, output preference) change sign?", "",
           "Per category, UA = uniformity (mean pairwise cosine) of the A statements minus that of the B "
           "statements; preference = mean NLL(B) - NLL(A) (> 0: the model prefers A). r is Pearson's "
           "correlation over categories, per layer and pooling.", "", method_line(result.config), "",
           *warning_lines(result.summary), *legend_lines(result.config, "categories", "Fisher-z")]
    table = on_subset(result.table)
    for model, s in result.summary["models"].items():
        tested = "p_perm" in s["pooling_comparison"][0]
        out += [f"## {model} ({s['n_layers']} layers, {s['n_categories']} categories)", ""]
        out += [f"### Pooling comparison at the final layer ({s['n_layers']})", ""]
        out += comparison_table(s["pooling_comparison"], level, tested)
        out += ["", s["pooling_effect"], "", "### Layer by layer", ""]
        rows = table[(table["model"] == model) & (table["metric"] == "r_ua_pref")]
        wide = rows.pivot_table(index="layer", columns="pooling", values="value", dropna=False)
        out.append(md_table(["layer", "depth", "r mean", "r last", "r first"],
                            [[int(layer), f"{layer / s['n_layers']:.0%}",
                              *(signed(wide.loc[layer].get(p)) for p in POOLINGS)]
                             for layer in wide.index]))
        if tested:
            out += ["", f"Layers with q < {1 - level:.2g}: "
                    + "; ".join(f"{p}: {', '.join(map(str, layers)) or 'none'}"
                                for p, layers in s["significant_layers"].items()) + ".", ""]
            out += ["### Mean pooling, tested", ""] + tests_table(table[table["model"] == model], s, level)
        out += ["", "### Divergence points", ""]
        for pooling, points in s["divergence_points"].items():
            out += point_lines(pooling, points, s["sign_throughout"][pooling])
        out += ["", f"Caution: each r is computed over {s['n_categories']} category means; with so few "
                "points a single category can flip its sign.", ""]
        if "without_category" in s:
            out += without_section(s)
        if "length_control" in s:
            out += ["### Length control", "", length_paragraph(s["length_control"], "r_ua_pref_sum"), ""]
    return "\n".join(out)


def comparison_table(comparison: list[dict], level: float, tested: bool) -> list[str]:
    if not tested:
        return [md_table(["pooling", "r(UA, output)", "p", "interpretation"],
                         [[c["pooling"], signed(c["r"]), number(c["p"]), c["label"]] for c in comparison])]
    return [md_table(["pooling", "r(UA, output)", f"{level:.0%} CI", "p", "p_perm", "interpretation"],
                     [[c["pooling"], signed(c["r"]), f"[{signed(c['ci_lo'])}, {signed(c['ci_hi'])}]", number(c["p"]),
                       number(c["p_perm"]), c["label"]] for c in comparison])]


def tests_table(rows: pd.DataFrame, s: dict, level: float) -> list[str]:
    """Per tested layer, mean pooling: r with its CI, p, p_perm and q, rho with its q, and r with the summed
    preference."""
    mean = rows[rows["pooling"] == "mean"]
    by = {metric: mean[mean["metric"] == metric].set_index("layer") for metric in
          ("r_ua_pref", "rho_ua_pref", "r_ua_pref_sum")}
    r, rho, summed = by["r_ua_pref"], by["rho_ua_pref"], by["r_ua_pref_sum"]
    return [md_table(["layer", "r", f"{level:.0%} CI", "p", "p_perm", "q", "rho", "q(rho)", "r(pref_sum)"],
                     [[layer, signed(r.at[layer, "value"]),
                       f"[{signed(r.at[layer, 'ci_lo'])}, {signed(r.at[layer, 'ci_hi'])}]", number(r.at[layer, "p"]),
                       number(r.at[layer, "p_perm"]), number(r.at[layer, "q"]), signed(rho.at[layer, "value"]),
                       number(rho.at[layer, "q"]), signed(summed.at[layer, "value"])] for layer in s["layers"]])]


def point_lines(pooling: str, points: list[dict], sign: str | None) -> list[str]:
    if points:
        return [f"- **{pooling}**: sign change between layer {p['layer_before']} (r = {signed(p['r_before'])}) "
                f"and layer {p['layer_after']} (r = {signed(p['r_after'])})" for p in points]
    text = (f"no sign change: r is {sign.upper()} across all tested layers" if sign != "unclear"
            else "pattern unclear: r is zero or undefined at some layer")
    return [f"- **{pooling}**: {text}"]


def without_section(s: dict) -> list[str]:
    """The final-layer r per pooling and the mean-pooling sign changes, with and without the dropped category."""
    w = s["without_category"]
    full = {c["pooling"]: c["r"] for c in s["pooling_comparison"]}
    out = [f"### Without {w['category']} ({w['n_categories']} categories)", "",
           md_table(["pooling", "final r, all", f"final r, without {w['category']}", "change"],
                    [[p, signed(full[p]), signed(w["final_r"][p]), _change(full[p], w["final_r"][p])]
                     for p in POOLINGS]), "", "Mean pooling without it:", ""]
    return out + point_lines("mean", w["divergence_points"], w["sign_throughout"]) + [""]


def _change(before: float | None, after: float | None) -> str:
    if before is None or after is None or pd.isna(before) or pd.isna(after):
        return "n/a"
    return signed(after - before) + (" (sign flips)" if before * after < 0 else "")
