"""Anisotropy figures: the 2 x 2 profile panel with L* marked, and the eigenvalue spectrum at
key layers."""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ...report.plotting import figure
from ..result import StudyResult

PANELS = [("top1_ratio", "λ1 / Σλ (top-1 share)", "Variance concentration in the first PC", "b", "o"),
          ("effective_rank", "Effective rank", "Effective rank (lower = more anisotropic)", "g", "s"),
          ("cos_to_mean", "Mean cosine to the mean state", "Directional anisotropy", "m", "^"),
          ("eigenvalue_variance", "Var(λ) (log scale)", "Eigenvalue variance", "r", "d")]


def figures(result: StudyResult) -> dict[str, Figure]:
    out = {}
    table = result.table
    for model, s in result.summary["models"].items():
        suffix = "" if len(result.summary["models"]) == 1 else "_" + _slug(model)
        rows = table[table["model"] == model]
        primary, star = s["primary"], s["l_star"]
        fig, axes = figure(2, 2, size=(14, 10))
        for ax, (metric, ylabel, title, color, marker) in zip(axes.flat, PANELS):
            for tokens, style in ((primary, "-"), *(((t, "--") for t in s["token_sets"] if t != primary))):
                series = rows[(rows["metric"] == metric) & (rows["tokens"] == tokens)].sort_values("layer")
                plot = ax.semilogy if metric == "eigenvalue_variance" else ax.plot
                plot(series["layer"], series["value"], style, color=color, marker=marker, markersize=4,
                     linewidth=2 if tokens == primary else 1, alpha=1 if tokens == primary else 0.6,
                     label=_label(tokens))
                if metric == "top1_ratio" and tokens == primary:
                    ax.fill_between(series["layer"], series["value"], alpha=0.2, color=color)
            ax.axvline(star, color="red", linestyle="--", linewidth=2, label=f"L* = {star}")
            ax.set_xlabel("Layer")
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=9)
        fig.suptitle(f"{model}: anisotropy profile (bell curve predicted, max at L*)", fontsize=15, fontweight="bold")
        out[f"anisotropy_profile{suffix}"] = fig

        fig, axes = figure(1, 1, size=(12, 6))
        ax = axes[0, 0]
        layers = s["token_sets"][primary]["key_layers"]
        colors = colormaps["viridis"](np.linspace(0, 1, len(layers)))
        spectrum = rows[(rows["metric"] == "eigenvalue_share") & (rows["tokens"] == primary)]
        for color, layer in zip(colors, layers):
            series = spectrum[spectrum["layer"] == layer].sort_values("rank")
            ax.semilogy(series["rank"] - 1, series["value"], color=color, linewidth=2, label=f"Layer {layer}")
        ax.set_xlabel("Eigenvalue index")
        ax.set_ylabel("Normalised eigenvalue (log scale)")
        ax.set_title(f"{model}: eigenvalue spectrum at key layers (L* = {star}, {_label(primary)})")
        ax.grid(True, alpha=0.3)
        ax.legend()
        out[f"eigenvalue_spectrum{suffix}"] = fig
    return out


def _label(tokens: str) -> str:
    return "all tokens" if tokens == "all" else "without position 0"


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")
