"""Anisotropy report: L*, the bell-curve test, the reference match, and the outlier check."""

from __future__ import annotations

from ...report.markdown import md_table, method_line, number
from ..controls import warning_lines
from ..result import StudyResult
from .analysis import METRICS


def report(result: StudyResult) -> str:
    out = ["# Anisotropy: how concentrated are token representations, layer by layer?", "",
           "Per layer, over every token state of every prompt: eigenvalues of the covariance (from the "
           "N x N Gram matrix; zero eigenvalues clipped at 1e-10 as in the notebook), their variance, "
           "the top-1 share λ1/Σλ, the effective rank exp(H), the mean cosine to the mean state, and the "
           "variance in the top 10 and 50 components. L* = argmax of λ1/Σλ.", "", method_line(result.config), "",
           *warning_lines(result.summary)]
    table = result.table
    for model, s in result.summary["models"].items():
        out += [f"## {model} ({s['n_layers']} layers, d = {s['hidden_dim']})", ""]
        for tokens, t in s["token_sets"].items():
            label = "all tokens" if tokens == "all" else "without position 0"
            primary = " (headline)" if tokens == s["primary"] else ""
            bell = t["bell"]
            out += [f"### {label}{primary}: {t['n_tokens']} token states", "",
                    f"**L* = {t['l_star']}** (λ1/Σλ = {bell['max_value']:.3f}).", "",
                    f"Bell-curve test: before L* slope {bell['phase1_slope']:+.6f} (r = {bell['phase1_r']:+.3f}, "
                    f"p = {number(bell['phase1_p'])}); from L* on slope {bell['phase2_slope']:+.6f} "
                    f"(r = {bell['phase2_r']:+.3f}, p = {number(bell['phase2_p'])}) -> "
                    + ("**bell curve: rising, then falling.**" if bell["is_bell_curve"]
                       else "**not a bell curve.**"), ""]
            if t["reference"]:
                ref = t["reference"]
                out += [f"Reference L* = {ref['reference_l_star']}: {ref['distance']} layer(s) away -> "
                        f"**{ref['verdict']}**.", ""]
            rows = table[(table["model"] == model) & (table["tokens"] == tokens)]
            wide = rows[rows["metric"].isin(METRICS + ("n_outlier_dims",))].pivot_table(
                index="layer", columns="metric", values="value")
            out.append(md_table(["layer", *METRICS, "outlier dims"],
                                [[int(layer), *(number(row[m], 4) for m in METRICS), int(row["n_outlier_dims"])]
                                 for layer, row in wide.iterrows()]))
            out.append("")
        if s["outlier_verdict"]:
            out += ["### Is the top-1 share an outlier-dimension effect?", "", s["outlier_verdict"], ""]
    return "\n".join(out)
