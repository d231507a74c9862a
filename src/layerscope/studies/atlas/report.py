"""Atlas report: where the independent measures put the phase boundaries, whether they agree with the phases
study's thirds and the anisotropy L*, the landmarks of each measure, and the cross-model CKA.

    text = report(result)
    headline_line("smollm2-135m", result.summary["models"]["smollm2-135m"])
"""

from __future__ import annotations

import pandas as pd

from ...report.markdown import md_table, number
from ..result import StudyResult
from .analysis import BOUNDARY_METRICS
from .summary import AtlasModel, AtlasSummary

NAMES = {"lens_kl": "logit-lens KL", "lens_top1_agree": "logit-lens top-1 agreement",
         "block_influence": "block influence", "angular_distance": "angular distance",
         "cka_next": "CKA with the next layer", "twonn_id": "TwoNN dimension", "prompt_entropy": "prompt entropy",
         "dataset_entropy": "dataset entropy", "massive_ratio": "massive ratio (log)", "norm": "norm (log)",
         "top1_ratio": "covariance top-1 share"}

LANDMARKS = ["lens_ce", "lens_kl", "lens_top1_agree", "block_influence", "angular_distance", "twonn_id",
             "prompt_entropy_normalised", "dataset_entropy_normalised", "massive_ratio", "norm", "top1_ratio"]


def headline_line(model: str, s: AtlasModel) -> str:
    b = s["boundaries"]
    if b["consensus"] is None:
        return f"{model}: {b['verdict']}"
    return (f"{model} ({s['n_layers']} layers): change points at layers {b['consensus'][0]} and {b['consensus'][1]} "
            f"(thirds: {b['thirds'][0]}, {b['thirds'][1]}; within {b['tolerance']}: "
            f"{'yes' if b['agree'][0] else 'no'}, {'yes' if b['agree'][1] else 'no'}); anisotropy L* = {s['l_star']}"
            f" ({'near' if b['l_star_near'] else 'not near'} a change point)")


def report(result: StudyResult) -> str:
    summary: AtlasSummary = result.summary
    out = ["# Layer atlas: the field's per-layer measures, and where they put the phase boundaries", "",
           "One streamed pass per model measures, per layer: the logit lens (nostalgebraist 2020), block influence "
           "(Men et al. 2024, ShortGPT), angular distance (Gromov et al. 2024), linear CKA (Kornblith et al. 2019), "
           "TwoNN intrinsic dimension (Facco et al. 2017), prompt and dataset matrix entropy (Skean et al. 2025), "
           "massive activations (Sun et al. 2024), the residual norm and the covariance top-1 share (the anisotropy "
           "study's measure). Layer n_layers is the last block's output before the final norm for every measure "
           "but the lens, whose last layer is the model's own prediction. Change points: a least-squares "
           "piecewise-linear fit with 2 breaks of each profile; their median is the consensus. This comparison is "
           "descriptive: no p-value is claimed.", ""]
    for model, s in summary["models"].items():
        out += model_section(result.table, model, s)
    if summary["cross_model"]:
        out += cross_section(result.table)
    seconds = result.manifest.get("timings", {})
    out += ["## Timings", "", ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()), ""]
    return "\n".join(out)


def model_section(table: pd.DataFrame, model: str, s: AtlasModel) -> list[str]:
    b = s["boundaries"]
    out = [f"## {model} ({s['n_layers']} layers; {s['n_texts']} texts, {s['n_tokens']} tokens, "
           f"{s['n_scored']} scored)", "", f"**Phase boundaries.** {b['verdict'][0].upper()}{b['verdict'][1:]}.", ""]
    rows = [[NAMES[m], *(b["per_metric"][m] if m in b["per_metric"] else ["-", "-"]),
             b["skipped"].get(m, "")] for m in BOUNDARY_METRICS if m in b["per_metric"] or m in b["skipped"]]
    out += [md_table(["measure", "1st change point", "2nd change point", "note"], rows), ""]
    no_massive = s["boundaries_no_massive"].get("block_influence")
    if no_massive:
        out += [f"Without the {s['massive_tokens']} massive-activation tokens, block influence changes course at "
                f"layers {no_massive[0]} and {no_massive[1]} (with them: "
                f"{', '.join(map(str, b['per_metric'].get('block_influence', ['-', '-'])))}).", ""]
    onset = s["massive_onset_layer"]
    out += [f"**Landmarks.** The logit lens's KL to the final layer falls below half its layer-0 value at layer "
            f"{s['lens_kl_half_layer']}; the TwoNN dimension peaks at layer {s['twonn_peak_layer']}; the most "
            f"influential blocks are {', '.join(map(str, s['most_influential']))}; massive activations (median "
            f"top/median ratio > 100) " + (f"start at layer {onset}" if onset is not None else "never appear") + ".",
            ""]
    rows = table[(table["model"] == model) & table["metric"].isin(LANDMARKS)]
    if "tokens" in rows:
        rows = rows[rows["tokens"].isna() | (rows["tokens"] == "all")]
    wide = rows.pivot_table(index="layer", columns="metric", values="value", aggfunc="first")
    wide = wide.reindex(columns=[m for m in LANDMARKS if m in wide.columns])
    out += [md_table(["layer", *wide.columns], [[layer, *(number(v) for v in values)]
                                                for layer, values in zip(wide.index, wide.to_numpy(), strict=True)]),
            ""]
    return out


def cross_section(table: pd.DataFrame) -> list[str]:
    """For each pair of models: each layer of the first and the layer of the second it is most similar to."""
    out = ["## Across models (linear CKA on the same texts)", ""]
    cross = table[(table["metric"] == "cka") & table["model_b"].notna()]
    for (a, b), rows in cross.groupby(["model", "model_b"], sort=False):
        best = rows.loc[rows.groupby("layer")["value"].idxmax()]
        out += [f"### {a} vs {b}", "", md_table([f"{a} layer", f"most similar {b} layer", "CKA"],
                                                [[int(r.layer), int(r.layer_b), number(r.value)]
                                                 for r in best.itertuples()]), ""]
    return out
