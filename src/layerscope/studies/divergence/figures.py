"""Divergence figures: the r(UA, preference) layer curve per pooling with its interval band (where the table
has ``ci_lo``, ``ci_hi``: none in notebooks mode) and its sign changes, the final layer after the model's final
norm as a hollow marker (where the table has ``stage`` rows), and the pooling comparison at the final layer.

    figs = figures(result)     # {"divergence": Figure}
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...report.plotting import (
    MARKERS,
    POOLING_COLORS,
    after_norm_marker,
    figure,
    interval_band,
    interval_label,
    split_stage,
    zero_line,
)
from ...study.result import StudyResult
from ..shared.inputs import PROFILE_SUBSETS as SUBSETS
from .summary import DivergenceSummary


def figures(result: StudyResult) -> dict[str, Figure]:
    """``figures(result)`` -> ``{"divergence": Figure}``: the layer curves (left) and the pooling bars (right)."""
    fig, axes = figure(1, 2, size=(14, 5))
    curve, bars = axes[0]
    _curves(curve, result)
    _bars(bars, result)
    return {"divergence": fig}


def _curves(ax, result: StudyResult) -> None:
    """Per model and pooling: r over the tested layers, its band, its divergence points (dotted) and the
    post-norm final value."""
    table = result.table[result.table["metric"] == "r_ua_pref"]
    summaries: DivergenceSummary = result.summary
    models = list(summaries["models"])
    band_label, norm_label = interval_label(result.config), True
    for m, model in enumerate(models):
        summary = summaries["models"][model]
        for pooling, color in POOLING_COLORS.items():
            rows = table[(table["model"] == model) & (table["pooling"] == pooling)].sort_values("layer")
            profile, after = split_stage(rows, SUBSETS)
            label = pooling if len(models) == 1 else f"{model} · {pooling}"
            ax.plot(profile["layer"], profile["value"], marker=MARKERS[m % len(MARKERS)], color=color,
                    linewidth=2 if pooling == "mean" else 1.2, alpha=1 if pooling == "mean" else 0.7, label=label)
            if interval_band(ax, profile["layer"], profile, color, label=band_label) is not None:
                band_label = None  # one legend entry for all bands
            if after_norm_marker(ax, after["layer"], after["value"], color, label=norm_label) is not None:
                norm_label = False
            for point in summary["divergence_points"][pooling]:
                ax.axvline((point["layer_before"] + point["layer_after"]) / 2, color=color, linestyle=":",
                           linewidth=1.5)
    zero_line(ax)
    ax.set_xlabel("Layer")
    ax.set_ylabel("r(UA, output preference)")
    ax.set_title("Correlation by layer: points of divergence (dotted)", fontweight="bold")
    ax.legend(fontsize="small")


def _bars(ax, result: StudyResult) -> None:
    """Per model: the final-layer r of each pooling as a bar, with its interval as a line where the summary
    has one."""
    summaries: DivergenceSummary = result.summary
    models = list(summaries["models"])
    width = 0.8 / len(models)
    poolings, has_ci = list(POOLING_COLORS), False
    for m, model in enumerate(models):
        comparison = {c["pooling"]: c for c in summaries["models"][model]["pooling_comparison"]}
        values = [_value(comparison[p].get("r")) for p in poolings]
        x = np.arange(len(poolings)) + (m - (len(models) - 1) / 2) * width
        drawn = ax.bar(x, values, width=width, color=[POOLING_COLORS[p] for p in poolings], edgecolor="black",
                       alpha=1 - 0.25 * m, label=model)
        ax.bar_label(drawn, labels=[f"{v:+.3f}" for v in values], fontsize="small")
        lo = [_value(comparison[p].get("ci_lo")) for p in poolings]
        hi = [_value(comparison[p].get("ci_hi")) for p in poolings]
        if np.isfinite(lo).any():  # the interval on its own line: it need not contain r
            ax.vlines(x, lo, hi, color="black", linewidth=1.5,
                      label=None if has_ci else interval_label(result.config))
            has_ci = True
    ax.set_xticks(np.arange(len(poolings)), [f"{p} pooling" for p in poolings])
    zero_line(ax)
    ax.set_xlabel("Pooling strategy")
    ax.set_ylabel("r(UA, output preference)")
    ax.set_title("Correlation by pooling strategy (final layer)", fontweight="bold")
    if len(models) > 1 or has_ci:
        ax.legend(fontsize="small")


def _value(x) -> float:
    return np.nan if x is None else float(x)
