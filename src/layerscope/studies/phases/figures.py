"""Phases figure: r per layer with bootstrap CI error bars, significant layers starred (q < 1 - level by
default, CI excludes 0 in seed compat)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...report.plotting import COLORS, MARKERS, figure, zero_line
from ..controls import on_subset
from ..result import StudyResult


def figures(result: StudyResult) -> dict[str, Figure]:
    fig, axes = figure(1, 1, size=(10, 6))
    ax = axes[0, 0]
    table = on_subset(result.table[result.table["metric"] == "r_centroid_pref"])
    models = list(result.summary["models"])
    offsets = np.linspace(-0.15, 0.15, len(models)) if len(models) > 1 else [0.0]
    for m, model in enumerate(models):
        rows = table[table["model"] == model].sort_values("layer")
        layers = rows["layer"].to_numpy(dtype=float) + offsets[m]
        r = rows["value"].to_numpy(dtype=float)
        lo, hi = rows["ci_lo"].to_numpy(dtype=float), rows["ci_hi"].to_numpy(dtype=float)
        color = COLORS[m % len(COLORS)]
        # the interval from lo to hi, drawn on its own: a BCa interval need not contain r
        ax.errorbar(layers, (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", capsize=4, capthick=1.5, color=color)
        ax.plot(layers, r, MARKERS[m % len(MARKERS)] + "-", markersize=6, color=color, label=model)
        sig = rows["significant"].astype(bool).to_numpy()
        ax.scatter(layers[sig], r[sig], color="red", s=140, zorder=5, marker="*",
                   label=significance_label(result) if m == 0 else None)
    zero_line(ax)
    ax.set_xlabel("Layer")
    ax.set_ylabel("r(centroid asymmetry, output preference)")
    patterns = "; ".join(f"{model}: {s['pattern']}" for model, s in result.summary["models"].items())
    ax.set_title(f"Pair-level correlation by layer\nPattern: {patterns}", fontsize=13)
    ax.legend()
    return {"phases": fig}


def significance_label(result: StudyResult) -> str:
    if result.config.get("compat") == "seed":
        return "CI excludes 0"
    return f"q < {1 - result.config.get('ci_level', 0.95):.2g}"
