"""Phases figure: r per layer with its bootstrap (BCa) interval as a band (as error bars, the notebook's
figure, in notebooks mode), significant layers starred (q < 1 - level by default, CI excludes 0 in notebooks mode),
and the final layer after the model's final norm as a hollow marker where the table has ``stage`` rows.

    figs = figures(result)     # {"phases": Figure}
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...modes import NOTEBOOKS
from ...report.plotting import COLORS, MARKERS, after_norm_marker, band, figure, interval_label, split_stage, zero_line
from ...study.result import StudyResult
from ..shared.inputs import PROFILE_SUBSETS as SUBSETS
from .summary import PhasesSummary


def figures(result: StudyResult) -> dict[str, Figure]:
    """``figures(result)`` -> ``{"phases": Figure}``."""
    fig, axes = figure(1, 1, size=(10, 6))
    ax = axes[0, 0]
    table = result.table[result.table["metric"] == "r_centroid_pref"]
    summary: PhasesSummary = result.summary
    models = list(summary["models"])
    offsets = np.linspace(-0.15, 0.15, len(models)) if len(models) > 1 else [0.0]
    seed = result.config.get("compat") == NOTEBOOKS
    band_label, norm_label = interval_label(result.config), True
    for m, model in enumerate(models):
        rows, after = split_stage(table[table["model"] == model].sort_values("layer"), SUBSETS)
        layers = rows["layer"].to_numpy(dtype=float) + offsets[m]
        r = rows["value"].to_numpy(dtype=float)
        lo, hi = rows["ci_lo"].to_numpy(dtype=float), rows["ci_hi"].to_numpy(dtype=float)
        color = COLORS[m % len(COLORS)]
        if seed:  # the interval from lo to hi, drawn on its own: a BCa interval need not contain r
            ax.errorbar(layers, (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", capsize=4, capthick=1.5, color=color)
        elif band(ax, layers, lo, hi, color, label=band_label) is not None:
            band_label = None  # one legend entry for all bands
        ax.plot(layers, r, MARKERS[m % len(MARKERS)] + "-", markersize=6, color=color, label=model)
        if after_norm_marker(ax, after["layer"].to_numpy(dtype=float) + offsets[m], after["value"], color,
                             label=norm_label) is not None:
            norm_label = False
        sig = rows["significant"].eq(True).to_numpy()  # a missing value (NaN) is not significant
        ax.scatter(layers[sig], r[sig], color=COLORS[3], s=140, zorder=5, marker="*",
                   label=significance_label(result) if m == 0 else None)
    zero_line(ax)
    ax.set_xlabel("Layer")
    ax.set_ylabel("r(centroid asymmetry, output preference)")
    patterns = "; ".join(f"{model}: {s['pattern']}" for model, s in summary["models"].items())
    ax.set_title(f"Pair-level correlation by layer\nPattern: {patterns}", fontsize="large")
    ax.legend()
    return {"phases": fig}


def significance_label(result: StudyResult) -> str:
    """The legend entry of the stars: ``"q < 0.05"`` by default, ``"CI excludes 0"`` in notebooks mode."""
    if result.config.get("compat") == NOTEBOOKS:
        return "CI excludes 0"
    return f"q < {1 - result.config.get('ci_level', 0.95):.2g}"
