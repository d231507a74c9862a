"""Scaling figure: each model's r(UA, preference) profile by absolute layer and by % depth."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...report.plotting import COLORS, MARKERS, figure, zero_line
from ..result import StudyResult


def figures(result: StudyResult) -> dict[str, Figure]:
    fig, axes = figure(1, 2, size=(16, 6))
    absolute, relative = axes[0]
    table = result.table[result.table["metric"] == "r_ua_pref"]
    for m, model in enumerate(result.summary["models"]):
        rows = table[table["model"] == model].sort_values("layer")
        style = {"marker": MARKERS[m % len(MARKERS)], "color": COLORS[m % len(COLORS)], "linewidth": 2,
                 "markersize": 7, "alpha": 0.85, "label": model}
        absolute.plot(rows["layer"], rows["value"], **style)
        relative.plot(rows["depth"] * 100, rows["value"], **style)
    for ax, xlabel, title in ((absolute, "Layer", "Absolute layer"),
                              (relative, "Layer position (% of depth)", "Normalised depth")):
        zero_line(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("r(UA, output preference)")
        ax.set_title(f"Layer correlation by model size ({title})", fontweight="bold")
        ax.legend(loc="lower left")
    return {"scaling": fig}
