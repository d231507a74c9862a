"""Anisotropy figures: the 2 x 2 profile panel with L* marked, and the eigenvalue spectrum at
key layers.

    figs = figures(result)   # {"anisotropy_profile": Figure, "eigenvalue_spectrum": Figure} (one model)

Default mode: the profile's final point is the pre-norm state (a star), the post-norm state a hollow marker beside
it, and the title states the bell verdict as computed. Notebooks mode: the notebook's figure and title.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ...report.plotting import COLORS, after_norm_marker, figure, figure_slug, split_stage
from ...study.result import StudyResult
from .analysis import TOKEN_SETS
from .drivers import bell_label
from .summary import AnisotropyModel, AnisotropySummary, headline_set

PANELS = [("top1_ratio", "λ1 / Σλ (top-1 share)", "Variance concentration in the first PC", COLORS[0], "o"),
          ("effective_rank", "Effective rank", "Effective rank (lower = more anisotropic)", COLORS[2], "s"),
          ("cos_to_mean", "Mean cosine to the mean state", "Directional anisotropy", COLORS[4], "^"),
          ("eigenvalue_variance", "Var(λ) (log scale)", "Eigenvalue variance", COLORS[3], "d")]


def figures(result: StudyResult) -> dict[str, Figure]:
    """The profile panel and the spectrum figure of each model (suffixed with the model's name when there are
    several)."""
    out = {}
    table = result.table
    summary: AnisotropySummary = result.summary
    for model, s in summary["models"].items():
        suffix = "" if len(summary["models"]) == 1 else "_" + figure_slug(model)
        rows = table[table["model"] == model]
        primary, star = s["primary"], s["l_star"]
        fig, axes = figure(2, 2, size=(14, 10))
        for ax, (metric, ylabel, title, color, marker) in zip(axes.flat, PANELS, strict=False):
            others = [t for t in s["token_sets"] if t != primary]
            for tokens, style in ((primary, "-"), *zip(others, ("--", ":", "-."), strict=False)):
                series, after = split_stage(rows[(rows["metric"] == metric) & (rows["tokens"] == tokens)])
                series = series.sort_values("layer")
                plot = ax.semilogy if metric == "eigenvalue_variance" else ax.plot
                plot(series["layer"], series["value"], style, color=color, marker=marker, markersize=4,
                     linewidth=2 if tokens == primary else 1, alpha=1 if tokens == primary else 0.6,
                     label=_label(tokens))
                if metric == "top1_ratio" and tokens == primary:
                    ax.fill_between(series["layer"], series["value"], alpha=0.2, color=color)
                if tokens == primary and len(after):
                    final = series[series["layer"] == s["n_layers"]]
                    ax.scatter(final["layer"], final["value"], s=160, marker="*", color=color, zorder=6,
                               label=f"layer {s['n_layers']} before the final norm (used)")
                    after_norm_marker(ax, after["layer"], after["value"], color)
            ax.axvline(star, color=COLORS[7], linestyle="--", linewidth=2, label=f"L* = {star}")
            ax.set_xlabel("Layer")
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
        fig.suptitle(_title(model, s), fontweight="bold")
        out[f"anisotropy_profile{suffix}"] = fig

        fig, axes = figure(1, 1, size=(12, 6))
        ax = axes[0, 0]
        layers = headline_set(s)["key_layers"]
        colors = colormaps["viridis"](np.linspace(0, 1, len(layers)))
        spectrum, _post_norm = split_stage(rows[(rows["metric"] == "eigenvalue_share") & (rows["tokens"] == primary)])
        for color, layer in zip(colors, layers, strict=False):
            series = spectrum[spectrum["layer"] == layer].sort_values("rank")
            ax.semilogy(series["rank"] - 1, series["value"], color=color, linewidth=2, label=f"Layer {layer}")
        ax.set_xlabel("Eigenvalue index")
        ax.set_ylabel("Normalised eigenvalue (log scale)")
        ax.set_title(f"{model}: eigenvalue spectrum at key layers (L* = {star}, {_label(primary)})")
        ax.grid(True, alpha=0.3)
        ax.legend()
        out[f"eigenvalue_spectrum{suffix}"] = fig
    return out


def _title(model: str, s: AnisotropyModel) -> str:
    """The notebook's title in notebooks mode; else the verdict as computed, L* and its driver."""
    if "bell_verdict" not in s:
        return f"{model}: anisotropy profile (bell curve predicted, max at L*)"
    t = headline_set(s)
    driver = f", driver: {s['driver']['label'].split(' (')[0]}" if s["driver"] else ""
    return f"{model}: anisotropy profile, {bell_label(t['bell'])} (L* = {s['l_star']}{driver}; final layer pre-norm)"


def _label(tokens: str) -> str:
    return TOKEN_SETS[tokens]
