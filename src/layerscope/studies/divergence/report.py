"""Divergence report: the notebook's printed tables and verdicts, as markdown. By default the verdict at the last
tested layer comes first, then the sensitivity checks that can take it away (and the length control), the pooling
comparison, each category's influence, the layer profile with permutation p, CI, q and Spearman rho, the
leave-one-category-out r at every tested layer, the divergence points and the run without a dropped category.

    text = report(result)
"""

from __future__ import annotations

import pandas as pd

from ...engine.forward.pooling import POOLINGS
from ...modes import NOTEBOOKS
from ...report.markdown import md_table, md_text, method_line, number, signed
from ...study.result import StudyResult
from ...study.sensitivity import flip_p_text
from ..shared.caveats import legend_lines, warning_lines
from ..shared.length import length_paragraph
from ..shared.subsets import on_subset
from .analysis import fisher_z_note, interval_text, layer_span
from .summary import DivergenceModel, DivergenceSummary, PoolingVerdict, SignChange, headline_entry


def report(result: StudyResult) -> str:
    """``report(result)``: the whole markdown report of a divergence result."""
    level = result.config.get("ci_level", 0.95)
    summary: DivergenceSummary = result.summary
    out = ["# Divergence: where does r(UA, output preference) change sign?", "",
           "Per category, UA = uniformity (mean pairwise cosine) of the A statements minus that of the B "
           "statements; preference = mean NLL(B) - NLL(A) (> 0: the model prefers A). r is Pearson's "
           "correlation over categories, per layer and pooling.", "", method_line(result.config), "",
           *warning_lines(summary), *legend_lines(result.config, "categories", "Fisher-z"),
           *verdict_legend(result.config)]
    table = on_subset(result.table)
    for model, s in summary["models"].items():
        rows = table[table["model"] == model]
        out += [f"## {md_text(model)} ({s['n_layers']} layers, {s['n_categories']} categories)", ""]
        if "checks" in s:
            out += verdict_section(s, level) + checks_section(s, level)
            out += [f"### Pooling comparison at the last tested layer ({s['headline_layer']})", ""]
            out += [comparison_table(s["pooling_comparison"], level), "", md_text(s["pooling_effect"]), ""]
            out += [f"- **{md_text(p)}**: {md_text(why)}." for p, why in s["not_applicable"].items()]
            out += ["", *influence_section(rows, s)]
        else:
            out += [f"### Pooling comparison at the final layer ({s['n_layers']})", ""]
            out += [seed_table(s["pooling_comparison"]), "", md_text(s["pooling_effect"]), ""]
        out += ["### Layer by layer", "", profile_table(rows, s)]
        if "checks" in s:
            out += ["", f"Layers with q < {1 - level:.2g}: "
                    + "; ".join(f"{p}: {', '.join(map(str, layers)) or 'none'}"
                                for p, layers in s["significant_layers"].items()) + ".", ""]
            out += ["### Mean pooling, tested", ""] + tests_table(rows, s, level)
            out += ["", *leave_one_out_section(result.table, model, s)]
        out += ["", "### Divergence points", ""]
        for pooling in POOLINGS:
            out += point_lines(pooling, s["divergence_points"][pooling], s["sign_throughout"][pooling],
                               s.get("sign_flips_within_noise", {}).get(pooling), s.get("not_applicable", {}))
        out += ["", f"Caution: each r is computed over {s['n_categories']} category means; with so few "
                "points a single category can flip its sign.", ""]
        if "without_category" in s:
            out += without_section(s)
        if "length_control" in s and "checks" not in s:
            out += ["### Length control", "", length_paragraph(s["length_control"], "r_ua_pref_sum"), ""]
    return "\n".join(out)


def verdict_legend(config: dict) -> list[str]:
    """What the default verdicts mean (none in notebooks mode)."""
    if config.get("compat") == NOTEBOOKS:
        return []
    level = config.get("ci_level", 0.95)
    return [f"- label (ALIGNED, INVERSE, ...): the notebook's thresholds on r, printed only where q < {1 - level:.2g}; "
            "otherwise the verdict says not significant, with n, p_perm, q and the interval.",
            "- leverage: a category whose Cook's distance exceeds the median of F(2, n - 2) (Cook's reference), or "
            "whose removal flips the sign of r; then the "
            "headline interval is the range of the leave-one-category-out r and the Fisher-z interval is not valid.",
            "- divergence point: a sign change between consecutive tested layers whose two r differ significantly "
            f"(Williams' t, Benjamini-Hochberg over the candidate flips, q < {1 - level:.2g}); other sign changes "
            "are sign flips within noise.",
            "- The final layer is taken before the model's final norm (the last block's output); after it, see the "
            "sensitivity checks. Only tested layers are reported.", ""]


def verdict_section(s: DivergenceModel, level: float) -> list[str]:
    """The headline verdict: mean pooling at the last tested layer, its interval, divergence points, robustness."""
    head, final = headline_entry(s), s["n_layers"]
    stage = (f" Layer {final} is the last block's output before the model's final norm; after it, see the "
             "sensitivity checks." if head.get("stage") == "pre_norm" else "")
    points = s["divergence_points"]["mean"]
    where = (", ".join(f"L{p['layer_before']}-L{p['layer_after']} ({flip_p_text(p)})" for p in points)
             if points else "none")
    noise = len(s["sign_flips_within_noise"]["mean"])
    return ["### Verdict", "",
            f"Tested layers: {layer_span(s['layers'])}. At the last tested layer ({head['layer']}), mean pooling: "
            f"r(UA, pref) = {signed(head['r'])}, **{head['label']}**; {md_text(interval_text(head, level))}."
            f"{stage}", "",
            f"Divergence points (mean pooling): {where}" + (f"; {noise} sign flip(s) within noise" if noise else "")
            + ".", "", f"Robustness: {md_text(s['robustness'] or 'no checks')}.", ""]


def checks_section(s: DivergenceModel, level: float) -> list[str]:
    """The headline recomputed under each sensitivity check, then the length control."""
    rows = [[md_text(c["check"]), signed(c["value"]), number(c["p_perm"]), number(c["q"]),
             md_text(interval_text(c, level)), c["label"], "yes" if c["flips"] else "no"] for c in s["checks"]]
    return ["### Sensitivity checks", "",
            f"The verdict at layer {s['headline_layer']} (mean pooling) recomputed under each check; it flips when "
            "significance or the sign of r changes.", "",
            md_table(["check", "r", "p_perm", "q", "interval", "label", "flips?"], rows), "",
            "### Length control", "", length_paragraph(s["length_control"], "r_ua_pref_sum"), ""]


def comparison_table(comparison: list[PoolingVerdict], level: float) -> str:
    """Per pooling at the headline layer: r, its Fisher-z CI (or why it is not valid), the leave-one-out range,
    p, p_perm, q and the verdict."""
    def fisher(c: PoolingVerdict) -> str:
        if c["interval"] == "leave-one-out range":
            return md_text(fisher_z_note(c))
        return f"[{signed(c['fisher_z'][0])}, {signed(c['fisher_z'][1])}]"

    return md_table(["pooling", "r(UA, output)", f"{level:.0%} CI (Fisher-z)", "leave-one-out r", "p", "p_perm", "q",
                     "verdict"],
                    [[c["pooling"], signed(c["r"]), fisher(c), f"[{signed(c['loo_range'][0])}, "
                      f"{signed(c['loo_range'][1])}]", number(c["p"]), number(c["p_perm"]), number(c["q"]),
                      c["label"]]
                     for c in comparison])


def seed_table(comparison: list[PoolingVerdict]) -> str:
    return md_table(["pooling", "r(UA, output)", "p", "interpretation (the notebook's rule)"],
                    [[c["pooling"], signed(c["r"]), number(c["p"]), c["label"]] for c in comparison])


def influence_section(rows: pd.DataFrame, s: DivergenceModel) -> list[str]:
    """Per category at the headline layer (mean pooling): preference, UA, r without it, Cook's distance."""
    spread, layer = s["influence"], s["headline_layer"]
    pref = rows[rows["metric"] == "pref"].set_index("category")["value"]
    ua = rows[(rows["metric"] == "ua") & (rows["pooling"] == "mean") & (rows["layer"] == layer)]
    ua = ua.set_index("category")["value"]
    table = [[md_text(name), signed(pref.get(name)), signed(ua.get(name)), signed(spread["loo_r"][name]),
              number(spread["cooks"][name]), "yes" if name in spread["flagged"] else ""] for name in s["categories"]]
    return [f"### Influence of each category at layer {layer} (mean pooling)", "",
            f"r = {signed(spread['r'])} on all categories; leave-one-out range [{signed(spread['range'][0])}, "
            f"{signed(spread['range'][1])}]. Leverage: Cook's distance > {number(spread.get('cutoff'), 2)} "
            "(median of F(2, n - 2); the larger of the two regressions) or a sign flip without it.", "",
            md_table(["category", "pref", "UA", "r without it", "Cook's D", "leverage"], table), ""]


def profile_table(rows: pd.DataFrame, s: DivergenceModel) -> str:
    """r per tested layer and pooling; the final layer marked pre-norm where it is."""
    r = rows[rows["metric"] == "r_ua_pref"]
    wide = r.pivot_table(index="layer", columns="pooling", values="value", dropna=False)
    staged = set(r[r["stage"] == "pre_norm"]["layer"]) if "stage" in r else set()
    return md_table(["layer", "depth", "r mean", "r last", "r first"],
                    [[f"{int(layer)} (pre-norm)" if layer in staged else int(layer), f"{layer / s['n_layers']:.0%}",
                      *(signed(wide.loc[layer].get(p)) for p in POOLINGS)] for layer in wide.index])


def tests_table(rows: pd.DataFrame, s: DivergenceModel, level: float) -> list[str]:
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


def leave_one_out_section(table: pd.DataFrame, model: str, s: DivergenceModel) -> list[str]:
    """r (mean pooling) at every tested layer on all categories and without each one (subset "without CAT")."""
    rows = table[(table["model"] == model) & (table["metric"] == "r_ua_pref") & (table["pooling"] == "mean")]
    columns = ["all", *(f"without {name}" for name in s["categories"])]
    wide = rows[rows["subset"].isin(columns)].pivot_table(index="layer", columns="subset", values="value",
                                                          dropna=False)
    body = [[int(layer), *(signed(wide.loc[layer].get(c)) for c in columns)] for layer in s["layers"]
            if layer in wide.index]
    return ["### Leave-one-category-out r (mean pooling)", "",
            "r over the other categories with each one left out, at every tested layer.", "",
            md_table(["layer", *map(md_text, columns)], body), ""]


def point_lines(pooling: str, points: list[SignChange], sign: str | None, noise: list[SignChange] | None = None,
                not_applicable: dict[str, str] | None = None) -> list[str]:
    """The sign changes of one pooling; by default (``noise`` given) the divergence points (significant flips,
    with q), then the sign flips within noise, or why the pooling is not applicable."""
    if not_applicable and pooling in not_applicable:
        return [f"- **{pooling}**: n/a: {md_text(not_applicable[pooling])}."]
    kind = "divergence point" if noise is not None else "sign change"
    lines = [f"- **{pooling}**: {kind} between layer {p['layer_before']} (r = {signed(p['r_before'])}) and layer "
             f"{p['layer_after']} (r = {signed(p['r_after'])})" + (f", {flip_p_text(p)}" if "p" in p else "")
             for p in points]
    if noise:
        lines.append(f"- **{pooling}**: sign flips within noise: " + "; ".join(
            f"L{p['layer_before']} ({signed(p['r_before'])}) to L{p['layer_after']} ({signed(p['r_after'])}), "
            f"{flip_p_text(p)}" for p in noise))
    if lines:
        return lines
    text = (f"no sign change: r is {sign.upper()} across all tested layers" if sign not in ("unclear", None)
            else "pattern unclear: r is zero or undefined at some layer")
    return [f"- **{pooling}**: {text}"]


def without_section(s: DivergenceModel) -> list[str]:
    """r at the headline layer per pooling and the mean-pooling sign changes, with and without the dropped
    category."""
    w = s["without_category"]
    full = {c["pooling"]: c["r"] for c in s["pooling_comparison"]}
    where = f"r at layer {s['headline_layer']}" if "headline_layer" in s else "final r"
    dropped = md_text(w["category"])
    out = [f"### Without {dropped} ({w['n_categories']} categories)", "",
           md_table(["pooling", f"{where}, all", f"{where}, without {dropped}", "change"],
                    [[p, signed(full[p]), signed(w["final_r"][p]), _change(full[p], w["final_r"][p])]
                     for p in POOLINGS]), "", "Mean pooling without it:", ""]
    return out + point_lines("mean", w["divergence_points"], w["sign_throughout"],
                             w.get("sign_flips_within_noise")) + [""]


def _change(before: float | None, after: float | None) -> str:
    if before is None or after is None or pd.isna(before) or pd.isna(after):
        return "n/a"
    return signed(after - before) + (" (sign flips)" if before * after < 0 else "")
