"""Scaling report: each model's profile landmarks and the answer to "does the peak shift?"."""

from __future__ import annotations

from ...report.markdown import md_table, method_line, number, signed
from ..controls import legend_lines, warning_lines
from ..result import StudyResult


def report(result: StudyResult) -> str:
    s = result.summary
    out = ["# Scaling: does the layer-correlation peak shift with model size?", "",
           "For each model, r(UA, output preference) per layer as in the divergence study "
           f"({s['pooling']} pooling), on a common depth axis (layer / number of layers).", "",
           method_line(result.config), "", *warning_lines(s), *legend_lines(result.config, "categories", "Fisher-z"),
           "## Per model", ""]
    out.append(md_table(
        ["model", "layers", "peak r", "peak @", "most negative r", "at", "final r", "sign changes (% depth)"],
        [[model, m["n_layers"], signed(m["max_pos_r"]), f"L{m['max_pos_layer']} ({m['max_pos_pct']:.0f}%)",
          signed(m["max_neg_r"]), f"L{m['max_neg_layer']} ({m['max_neg_pct']:.0f}%)", signed(m["final_r"]),
          ", ".join(f"L{c['layer_before']}-L{c['layer_after']} (~{c['midpoint_pct']:.0f}%)"
                    for c in m["sign_changes"]) or "none"]
         for model, m in s["models"].items()]))
    if all("max_pos_q" in m for m in s["models"].values()):
        out += ["", "### Tests", ""] + tests_table(s["models"], result.config.get("ci_level", 0.95))
    stability = s["peak_stability"]
    out += ["", "## Answer", ""]
    if stability["std_peak_pct"] is not None:
        out.append(f"Peak positions: mean {stability['mean_peak_pct']:.1f}% depth, standard deviation "
                   f"{stability['std_peak_pct']:.1f} points (stable below 10).")
        out.append("")
    out += [f"**{stability['answer']}**", ""]
    return "\n".join(out)


def tests_table(models: dict[str, dict], level: float) -> list[str]:
    """Per model: the peak r's interval and q, Spearman rho at that layer, and the layers whose r has q < 1 - level."""
    return [md_table(["model", "peak r", f"{level:.0%} CI", "q", "rho there", f"layers with q < {1 - level:.2g}"],
                     [[model, signed(m["max_pos_r"]), f"[{signed(m['max_pos_ci'][0])}, {signed(m['max_pos_ci'][1])}]",
                       number(m["max_pos_q"]), signed(m["max_pos_rho"]),
                       ", ".join(map(str, m["significant_layers"])) or "none"]
                      for model, m in models.items()])]
