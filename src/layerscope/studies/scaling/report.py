"""Scaling report: each model's profile landmarks, its peak with q and the sensitivity checks, and the answer to
"does the peak shift?" with the reason when it cannot be assessed.

    text = report(result)     # markdown; notebooks mode (and results written before verdicts) as the notebooks
"""

from __future__ import annotations

from ...report.markdown import md_table, md_text, method_line, number, signed
from ...study.result import StudyResult
from ...study.sensitivity import flip_p_text
from ..shared.caveats import legend_lines, warning_lines
from .summary import PeakCheck, PeakVerdict, ScalingModel, ScalingSummary, SignChange


def report(result: StudyResult) -> str:
    """``report(result)`` -> markdown: the default-mode report, or :func:`seed_report` for the notebooks' rule."""
    s: ScalingSummary = result.summary
    if "verdict" not in s["peak_stability"]:
        return seed_report(result)
    level = result.config.get("ci_level", 0.95)
    out = ["# Scaling: does the layer-correlation peak shift with model size?", "",
           "For each model, r(UA, output preference) per layer as in the divergence study "
           f"({s['pooling']} pooling), on a common depth axis (layer / number of layers). The final layer is taken "
           "before the final norm; after it, see checks. The peak search leaves out the embedding layer (layer 0); "
           f"a peak counts only when its r is positive and significant (q < {1 - level:.2g}).", "",
           method_line(result.config), "", *warning_lines(s), *legend_lines(result.config, "categories", "Fisher-z"),
           "## Per model", ""]
    out.append(md_table(
        ["model", "family", "layers", "tested", "peak r", "peak @", "q", f"{level:.0%} CI", "counts",
         "most negative r", "at", "last tested layer r", "sign changes (% depth)", "sign flips within noise"],
        [[md_text(model), md_text(m["family"]), m["n_layers"], layer_list(m["layers"]), signed(m["max_pos_r"]),
          at(m, "max_pos"),
          number(m["max_pos_q"]), interval(m["max_pos_ci"]), "yes" if m["max_pos_significant"] else "no",
          signed(m["max_neg_r"]), at(m, "max_neg"), f"L{m['final_layer']}: {signed(m['final_r'])}",
          flips(m["sign_changes"]), flips(m["sign_flips_within_noise"])]
         for model, m in s["models"].items()]))
    out += ["", "Sign changes count only where the two layers' r differ significantly (Williams' t, "
            "Benjamini-Hochberg over the candidate flips); the others are sign flips within noise.",
            "", "### Tests", "", *tests_table(s["models"], level)]
    out += ["", "## Sensitivity checks", "",
            "Each check recomputes the profile and its peak on changed data: the mean without position 0 and "
            "without the massive-activation tokens (mean pooling), the final layer after the final norm, each "
            "category left out. A check flips the peak when its significance changes or when it moves by at least "
            "10 points of depth.", ""]
    for model, m in s["models"].items():
        out += [f"### {md_text(model)}", "", f"Peak: {m['peak']}.", "",
                f"Checks: {md_text(m['robustness'] or 'none')}.", "",
                check_table(m["checks"]), ""]
    return "\n".join(out + answer_lines(s["peak_stability"]))


def answer_lines(stability: PeakVerdict) -> list[str]:
    """The verdict, its rule, the families table, the reason or caveats, and the verdict under each check."""
    out = ["## Answer", "", f"Rule: {stability['rule']}.", ""]
    out.append(md_table(["family", "models", "significant peaks", "peak depths", "mean", "range (points)",
                         "sd, n - 1 (points)", "verdict"],
                        [[md_text(f["family"]), md_text(", ".join(f["models"])),
                          md_text(", ".join(f["significant"]) or "none"),
                          ", ".join(f"{p:.0f}%" for p in f["peak_pcts"]) or "none", pct(f["mean_peak_pct"]),
                          pct(f["range_peak_pct"]), pct(f["sd_peak_pct"]), f["verdict"]]
                         for f in stability["families"]]))
    out += ["", f"**{md_text(stability['answer'])}**", ""]
    if stability["caveats"]:
        out += [f"Caveat: {md_text(caveat)}." for caveat in stability["caveats"]] + [""]
    if stability["checks"]:
        out += ["The verdict under each check (the peaks each model's check found):", "",
                md_table(["check", "verdict", "range (points)", "flips", "reason"],
                         [[md_text(c["check"]), c["label"], pct(c["value"]), "yes" if c["flips"] else "no",
                           md_text(c["reason"] or "")] for c in stability["checks"]]), "",
                f"Verdict: {md_text(stability['robustness'])}.", ""]
    return out


def check_table(checks: list[PeakCheck]) -> str:
    """One row per sensitivity check of a model's peak."""
    return md_table(["check", "categories", "peak", "r", "q", "flips"],
                    [[md_text(c["check"]), c["n_categories"], c["label"], signed(c["r"]), number(c["q"]),
                      "yes" if c["flips"] else "no"] for c in checks])


def tests_table(models: dict[str, ScalingModel], level: float) -> list[str]:
    """Per model: the peak r's interval and q, Spearman rho at that layer, and the layers whose r has q < 1 - level."""
    return [md_table(["model", "peak r", f"{level:.0%} CI", "q", "rho there", f"layers with q < {1 - level:.2g}"],
                     [[md_text(model), signed(m["max_pos_r"]), interval(m["max_pos_ci"]), number(m["max_pos_q"]),
                       signed(m["max_pos_rho"]), ", ".join(map(str, m["significant_layers"])) or "none"]
                      for model, m in models.items()])]


def seed_report(result: StudyResult) -> str:
    """The report of the notebooks' rule (population std of the peak depths < 10 points)."""
    s: ScalingSummary = result.summary
    out = ["# Scaling: does the layer-correlation peak shift with model size?", "",
           "For each model, r(UA, output preference) per layer as in the divergence study "
           f"({s['pooling']} pooling), on a common depth axis (layer / number of layers).", "",
           method_line(result.config), "", *warning_lines(s), *legend_lines(result.config, "categories", "Fisher-z"),
           "## Per model", ""]
    out.append(md_table(
        ["model", "layers", "peak r", "peak @", "most negative r", "at", "final r", "sign changes (% depth)"],
        [[md_text(model), m["n_layers"], signed(m["max_pos_r"]), at(m, "max_pos"), signed(m["max_neg_r"]),
          at(m, "max_neg"),
          signed(m["final_r"]), ", ".join(f"L{c['layer_before']}-L{c['layer_after']} (~{c['midpoint_pct']:.0f}%)"
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
    out += [f"**{md_text(stability['answer'])}**", ""]
    return "\n".join(out)


def at(m: ScalingModel, key: str) -> str:
    """``"L12 (40%)"``: the layer and % depth of ``m[key + "_layer"]``."""
    return f"L{m[key + '_layer']} ({m[key + '_pct']:.0f}%)"


def interval(ci: list) -> str:
    return f"[{signed(ci[0])}, {signed(ci[1])}]"


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def flips(points: list[SignChange]) -> str:
    """``"L11-L12 (~38%, p_fwer = 0.012)"`` per sign change, or "none"."""
    return ", ".join(f"L{c['layer_before']}-L{c['layer_after']} (~{c['midpoint_pct']:.0f}%, {flip_p_text(c)})"
                     for c in points) or "none"


def layer_list(layers: list[int]) -> str:
    """``"0-30"`` for consecutive layers, else ``"0, 4, 8"``."""
    if len(layers) > 2 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}-{layers[-1]}"
    return ", ".join(map(str, layers))
