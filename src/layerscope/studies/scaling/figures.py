"""Scaling figure: each model's r(UA, preference) profile by absolute layer and by % depth, with its interval
band where the table has ``ci_lo``, ``ci_hi`` (none in notebooks mode) and the final layer after the model's final
norm as a hollow marker where the table has ``stage`` rows.

    figs = figures(result)     # {"scaling": Figure}
"""

from __future__ import annotations

from matplotlib.figure import Figure

from ...report.plotting import (
    COLORS,
    MARKERS,
    after_norm_marker,
    figure,
    interval_band,
    interval_label,
    split_stage,
    zero_line,
)
from ...study.result import StudyResult
from ..shared.inputs import PROFILE_SUBSETS as SUBSETS
from .summary import ScalingSummary


def figures(result: StudyResult) -> dict[str, Figure]:
    """``figures(result)`` -> ``{"scaling": Figure}``: absolute layers (left) and % depth (right)."""
    fig, axes = figure(1, 2, size=(16, 6))
    absolute, relative = axes[0]
    table = result.table[result.table["metric"] == "r_ua_pref"]
    band_label, norm_label = interval_label(result.config), True
    summary: ScalingSummary = result.summary
    for m, model in enumerate(summary["models"]):
        profile, after = split_stage(table[table["model"] == model].sort_values("layer"), SUBSETS)
        color = COLORS[m % len(COLORS)]
        style = {"marker": MARKERS[m % len(MARKERS)], "color": color, "linewidth": 2, "markersize": 7,
                 "alpha": 0.85, "label": model}
        for ax, x, x_after in ((absolute, profile["layer"], after["layer"]),
                               (relative, profile["depth"] * 100, after["depth"] * 100)):
            ax.plot(x, profile["value"], **style)
            drawn = interval_band(ax, x, profile, color, label=band_label)
            after_norm_marker(ax, x_after, after["value"], color, label=norm_label)
        band_label = None if drawn is not None else band_label  # one legend entry for all bands
        norm_label = norm_label and after.empty
    for ax, xlabel, title in ((absolute, "Layer", "Absolute layer"),
                              (relative, "Layer position (% of depth)", "Normalised depth")):
        zero_line(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("r(UA, output preference)")
        ax.set_title(f"Layer correlation by model size ({title})", fontweight="bold")
        ax.legend(loc="lower left")
    return {"scaling": fig}
