"""Divergence figures: the r(UA, preference) layer curve with its sign changes, and the
pooling comparison at the final layer."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...report.plotting import MARKERS, POOLING_COLORS, figure, zero_line
from ..controls import on_subset
from ..result import StudyResult


def figures(result: StudyResult) -> dict[str, Figure]:
    fig, axes = figure(1, 2, size=(14, 5))
    curve, bars = axes[0]
    table = on_subset(result.table[result.table["metric"] == "r_ua_pref"])
    models = list(result.summary["models"])
    for m, model in enumerate(models):
        summary = result.summary["models"][model]
        for pooling, color in POOLING_COLORS.items():
            rows = table[(table["model"] == model) & (table["pooling"] == pooling)].sort_values("layer")
            label = pooling if len(models) == 1 else f"{model} · {pooling}"
            curve.plot(rows["layer"], rows["value"], marker=MARKERS[m % len(MARKERS)], color=color,
                       linewidth=2 if pooling == "mean" else 1.2, alpha=1 if pooling == "mean" else 0.7,
                       label=label)
            for point in summary["divergence_points"][pooling]:
                curve.axvline((point["layer_before"] + point["layer_after"]) / 2, color=color, linestyle=":",
                              linewidth=1.5)
    zero_line(curve)
    curve.set_xlabel("Layer")
    curve.set_ylabel("r(UA, output preference)")
    curve.set_title("Correlation by layer: points of divergence (dotted)", fontweight="bold")
    curve.legend(fontsize=8)

    width = 0.8 / len(models)
    poolings = list(POOLING_COLORS)
    for m, model in enumerate(models):
        comparison = {c["pooling"]: c["r"] for c in result.summary["models"][model]["pooling_comparison"]}
        values = [comparison[p] if comparison[p] is not None else np.nan for p in poolings]
        x = np.arange(len(poolings)) + (m - (len(models) - 1) / 2) * width
        drawn = bars.bar(x, values, width=width, color=[POOLING_COLORS[p] for p in poolings], edgecolor="black",
                         alpha=1 - 0.25 * m, label=model)
        bars.bar_label(drawn, labels=[f"{v:+.3f}" for v in values], fontsize=9)
    bars.set_xticks(np.arange(len(poolings)), [f"{p} pooling" for p in poolings])
    zero_line(bars)
    bars.set_ylabel("r(UA, output preference)")
    bars.set_title("Correlation by pooling strategy (final layer)", fontweight="bold")
    if len(models) > 1:
        bars.legend(fontsize=8)
    return {"divergence": fig}
