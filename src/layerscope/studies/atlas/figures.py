"""Atlas figures: the profiles over normalised depth, the CKA heat maps and the massive-activation map.

    figs = figures(result)   # {"atlas_profiles": Figure, "cka_<model>": Figure, "cka_<a>_vs_<b>": Figure,
                             #  "massive_map_<model>": Figure}

The profile panel draws every model on normalised depth (layer / n_layers). In each panel and each model's colour:
that measure's own change points thin, the consensus boundaries thick with their 95 % bootstrap intervals shaded,
the anisotropy L* dotted; the phases study's thirds dashed grey. With a tuned lens, the lens panels draw it dashed
with squares beside the logit lens (circles), and their titles say so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from ...engine.atlas.massive_profile import CLASSES
from ...report.markdown import BITS_PER_NAT
from ...report.plotting import figure, figure_slug
from ...study.result import StudyResult
from .summary import AtlasSummary

BREAKS_OF = {"prompt_entropy_normalised": "prompt_entropy", "dataset_entropy_normalised": "dataset_entropy"}
"""The boundary measure a panel's metric is (the others by the same name; lens_ce and lens_entropy have none)."""

PANELS = [("lens_ce", "Logit lens: cross-entropy", False), ("lens_kl", "Logit lens: KL(final || lens)", True),
          ("lens_top1_agree", "Logit lens: top-1 agreement", False), ("lens_entropy", "Logit lens: entropy", False),
          ("block_influence", "Block influence 1 - cos(h_l, h_l+1)", True),
          ("angular_distance", "Angular distance (last token)", False),
          ("twonn_id", "TwoNN intrinsic dimension", False),
          ("top1_ratio", "Anisotropy: covariance top-1 share", False),
          ("prompt_entropy_normalised", "Prompt entropy (normalised)", False),
          ("dataset_entropy_normalised", "Dataset entropy (normalised)", False),
          ("massive_ratio", "Massive activation: top / median", True), ("norm", "Residual norm", True)]

YLABELS = {"lens_ce": "cross-entropy (bits/token)", "lens_kl": "KL (bits/token)",
           "lens_top1_agree": "agreement (fraction of tokens)", "lens_entropy": "entropy (bits/token)",
           "block_influence": "1 - cosine", "angular_distance": "angular distance (fraction of pi)",
           "twonn_id": "intrinsic dimension", "top1_ratio": "share of variance",
           "prompt_entropy_normalised": "entropy / its maximum", "dataset_entropy_normalised": "entropy / its maximum",
           "massive_ratio": "ratio (top / median |activation|)", "norm": "L2 norm"}
"""Each panel's y-axis label, with its unit."""

IN_NATS = ("lens_ce", "lens_kl", "lens_entropy")
"""Panels whose table values are nats per token (and their ``tuned_`` twins): drawn in bits per token."""


def figures(result: StudyResult) -> dict[str, Figure]:
    summary: AtlasSummary = result.summary
    table = result.table
    colors = dict(zip(summary["models"], colormaps["tab10"](np.arange(len(summary["models"])) % 10), strict=True))
    out = {"atlas_profiles": profiles(table, summary, colors)}
    own = table[(table["metric"] == "cka") & _empty(table, "model_b")]
    for model in summary["models"]:
        out[f"cka_{figure_slug(model)}"] = heatmap(own[own["model"] == model], model, model)
        out[f"massive_map_{figure_slug(model)}"] = massive_map(table[table["model"] == model], model)
    cross = table[(table["metric"] == "cka") & ~_empty(table, "model_b")]
    if len(cross):  # one model: no model_b column at all
        for (a, b), rows in cross.groupby(["model", "model_b"], sort=False):
            out[f"cka_{figure_slug(a)}_vs_{figure_slug(b)}"] = heatmap(rows, a, b)
    return out


def _empty(table: pd.DataFrame, column: str) -> pd.Series:
    return table[column].isna() if column in table else pd.Series(True, index=table.index)


def profiles(table: pd.DataFrame, summary: AtlasSummary, colors: dict) -> Figure:
    fig, axes = figure(3, 4, size=(22, 13))
    for ax, (metric, title, log) in zip(axes.flat, PANELS, strict=True):
        for model, s in summary["models"].items():
            n = s["n_layers"]
            scale = BITS_PER_NAT if metric in IN_NATS else 1.0  # the table's nats, drawn in bits
            rows = table[(table["model"] == model) & (table["metric"] == metric)]
            if "tokens" in rows:
                main = rows[rows["tokens"].isna() | (rows["tokens"] == "all")]
                extra = rows[rows["tokens"] == "excl_massive"]
            else:
                main, extra = rows, rows.iloc[:0]
            main = main.sort_values("layer")
            ax.plot(main["layer"] / n, main["value"] * scale, "-o", markersize=3, color=colors[model], label=model)
            if len(extra):
                extra = extra.sort_values("layer")
                ax.plot(extra["layer"] / n, extra["value"] * scale, "--", color=colors[model], alpha=0.7,
                        label=f"{model}, without massive tokens")
            tuned = table[(table["model"] == model) & (table["metric"] == f"tuned_{metric}")].sort_values("layer")
            if len(tuned):
                ax.plot(tuned["layer"] / n, tuned["value"] * scale, "--s", markersize=3, color=colors[model], alpha=0.8,
                        label=f"{model}, tuned lens")
            marks(ax, s, BREAKS_OF.get(metric, metric), colors[model])
            for b in s["boundaries"]["thirds"]:
                ax.axvline(b / n, color="grey", linestyle="--", linewidth=1)
            ax.axvline(s["l_star"] / n, color=colors[model], linestyle=":", linewidth=1.5)
        if log:
            ax.set_yscale("log")
        tuned_any = metric.startswith("lens_") and (table["metric"] == f"tuned_{metric}").any()
        ax.set_title(title.replace("Logit lens:", "Logit (o) and tuned (s) lens:") if tuned_any else title)
        ax.set_xlabel("Depth (layer / n_layers)")
        ax.set_ylabel(YLABELS[metric])
        ax.grid(True, alpha=0.3)
    axes[0, 0].legend(fontsize="small")
    fig.suptitle("Layer atlas: thick lines and shading, the consensus boundaries and their 95 % intervals; thin, "
                 "the panel's own change points; dashed grey, the phases study's thirds; dotted, the anisotropy L*",
                 fontsize="large", fontweight="bold")
    return fig


def marks(ax, s: dict, measure: str, color) -> None:
    """The measure's own breaks (thin), the consensus (thick) and its intervals (shaded), on depth."""
    n, b = s["n_layers"], s["boundaries"]
    for layer in b["per_metric"].get(measure, []):
        ax.axvline(layer / n, color=color, linewidth=0.8, alpha=0.9)
    for x in b["intervals"]:
        if x["family"] == "consensus":
            ax.axvspan(x["ci_lo"] / n - 0.5 / n, x["ci_hi"] / n + 0.5 / n, color=color, alpha=0.12, linewidth=0)
            ax.axvline(x["value"] / n, color=color, linewidth=2.5, alpha=0.8)


def heatmap(rows: pd.DataFrame, model: str, model_b: str) -> Figure:
    """CKA of ``model``'s layers (rows) against ``model_b``'s (columns)."""
    matrix = rows.pivot_table(index="layer", columns="layer_b", values="value", aggfunc="first")
    fig, axes = figure(1, 1, size=(8, 7))
    ax = axes[0, 0]
    image = ax.imshow(matrix.to_numpy(dtype=float), origin="lower", cmap="magma", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(matrix.columns)), [str(c) for c in matrix.columns], fontsize="x-small", rotation=90)
    ax.set_yticks(range(len(matrix.index)), [str(i) for i in matrix.index], fontsize="x-small")
    ax.set_xlabel(f"{model_b} layer")
    ax.set_ylabel(f"{model} layer")
    same = model == model_b
    ax.set_title(f"Linear CKA between the layers of {model}" if same else f"Linear CKA: {model} vs {model_b}")
    fig.colorbar(image, ax=ax, label="linear CKA (mean-pooled texts)")
    return fig


def massive_map(rows: pd.DataFrame, model: str) -> Figure:
    """log10 of each position class's largest |activation| / the text's median, layer by layer."""
    data = rows[rows["metric"] == "massive_class_ratio"]
    matrix = data.pivot_table(index="layer", columns="position_class", values="value", aggfunc="first")
    matrix = matrix.reindex(columns=list(CLASSES))
    fig, axes = figure(1, 1, size=(6, 9))
    ax = axes[0, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.log10(matrix.to_numpy(dtype=float))
    image = ax.imshow(values, origin="lower", cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(CLASSES)), [c.replace("_", " ") for c in CLASSES])
    ax.set_yticks(range(len(matrix.index)), [str(i) for i in matrix.index], fontsize="x-small")
    ax.set_xlabel("position class")
    ax.set_ylabel("layer")
    ax.set_title(f"{model}: massive activations by position class")
    fig.colorbar(image, ax=ax, label="log10(largest |activation| / text median), mean over texts")
    return fig
