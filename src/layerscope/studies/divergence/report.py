"""Divergence report: the notebook's printed tables and verdicts, as markdown."""

from __future__ import annotations

from ...report.markdown import md_table, method_line, number, signed
from ..result import StudyResult


def report(result: StudyResult) -> str:
    out = ["# Divergence: where does r(UA, output preference) change sign?", "",
           "Per category, UA = uniformity (mean pairwise cosine) of the A statements minus that of the B "
           "statements; preference = mean NLL(B) - NLL(A) (> 0: the model prefers A). r is Pearson's "
           "correlation over categories, per layer and pooling.", "", method_line(result.config), ""]
    table = result.table
    for model, s in result.summary["models"].items():
        out += [f"## {model} ({s['n_layers']} layers, {s['n_categories']} categories)", ""]
        out += [f"### Pooling comparison at the final layer ({s['n_layers']})", ""]
        out.append(md_table(["pooling", "r(UA, output)", "p", "interpretation"],
                            [[c["pooling"], signed(c["r"]), number(c["p"]), c["label"]]
                             for c in s["pooling_comparison"]]))
        out += ["", s["pooling_effect"], "", "### Layer by layer", ""]
        rows = table[(table["model"] == model) & (table["metric"] == "r_ua_pref")]
        wide = rows.pivot_table(index="layer", columns="pooling", values="value", dropna=False)
        out.append(md_table(["layer", "depth", "r mean", "r last", "r first"],
                            [[int(layer), f"{layer / s['n_layers']:.0%}",
                              *(signed(wide.loc[layer].get(p)) for p in ("mean", "last", "first"))]
                             for layer in wide.index]))
        out += ["", "### Divergence points", ""]
        for pooling, points in s["divergence_points"].items():
            if points:
                out += [f"- **{pooling}**: sign change between layer {p['layer_before']} "
                        f"(r = {signed(p['r_before'])}) and layer {p['layer_after']} (r = {signed(p['r_after'])})"
                        for p in points]
            else:
                sign = s["sign_throughout"][pooling]
                text = (f"no sign change: r is {sign.upper()} across all tested layers" if sign != "unclear"
                        else "pattern unclear: r is zero or undefined at some layer")
                out.append(f"- **{pooling}**: {text}")
        out += ["", f"Caution: each r is computed over {s['n_categories']} category means; with so few "
                "points a single category can flip its sign.", ""]
    return "\n".join(out)
