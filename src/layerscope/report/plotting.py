"""Figure helpers: figures are built as plain ``matplotlib.figure.Figure`` objects (no pyplot
state), so studies can draw them from any thread, process or notebook.

    fig, axes = figure(1, 2, size=(14, 5))
    band(axes[0, 0], layers, ci_lo, ci_hi, color)          # an interval band, where both bounds exist
    profile, after = split_stage(rows)                      # the final layer before / after the final norm
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

COLORS = ["#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#d62728", "#8c564b", "#e377c2", "#17becf"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
POOLING_COLORS = {"mean": "#1f77b4", "last": "#2ca02c", "first": "#ff7f0e"}
AFTER_NORM = "after final norm"
"""The legend entry of the final layer after the model's final norm (a hollow marker beside the profile)."""


def figure(rows: int = 1, cols: int = 1, size: tuple[float, float] = (10, 6)):
    """``fig, axes = figure(1, 2)``: a constrained-layout Figure and its (rows, cols) array of axes."""
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def zero_line(ax) -> None:
    """``zero_line(ax)``: a dashed line at y = 0 and a light grid."""
    ax.axhline(0, color="gray", linestyle="--", alpha=0.5)
    ax.grid(True, alpha=0.3)


def band(ax, x, lo, hi, color, label: str | None = None, alpha: float = 0.15):
    """``band(ax, layers, rows["ci_lo"], rows["ci_hi"], color)``: shade the interval from ``lo`` to ``hi`` (n,)
    over ``x`` (n,), leaving out the points where a bound is missing (NaN); the PolyCollection, or None when
    no point has both bounds."""
    x, lo, hi = (np.asarray(v, dtype=np.float64) for v in (x, lo, hi))
    ok = np.isfinite(x) & np.isfinite(lo) & np.isfinite(hi)
    if not ok.any():
        return None
    return ax.fill_between(x, lo, hi, where=ok, color=color, alpha=alpha, linewidth=0, label=label)


def interval_band(ax, x, rows: pd.DataFrame, color, label: str | None = None):
    """``interval_band(ax, rows["layer"], rows, color)``: :func:`band` from the table columns ``ci_lo``,
    ``ci_hi`` of ``rows`` (n rows); nothing (None) when the table has no such columns (seed compat)."""
    if "ci_lo" not in rows or "ci_hi" not in rows:
        return None
    return band(ax, x, rows["ci_lo"], rows["ci_hi"], color, label=label)


def interval_label(config: dict) -> str:
    """The legend entry of a band: ``"95% CI"`` for ``ci_level`` 0.95 (the default)."""
    return f"{config.get('ci_level', 0.95):.0%} CI"


def split_stage(rows: pd.DataFrame, subsets: tuple[str, ...] = ("all",)) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``profile, after = split_stage(rows, ("all", NORM_CHECK))``: the rows of a layer profile (subset
    ``subsets[0]``, every row whose ``stage`` is not ``"post_norm"``: the final layer before the model's final
    norm) and the post-norm rows (the final layer after it) of any of ``subsets`` (a study may keep them as a
    sensitivity check of their own). Without a ``subset`` column every row counts; without a ``stage`` column
    all rows are the profile and none are post-norm."""
    post = rows["stage"].eq("post_norm").to_numpy(dtype=bool) if "stage" in rows else np.zeros(len(rows), bool)
    main = rows["subset"].eq(subsets[0]).to_numpy(dtype=bool) if "subset" in rows else np.ones(len(rows), bool)
    after = rows["subset"].isin(subsets).to_numpy(dtype=bool) if "subset" in rows else main
    return rows[main & ~post], rows[after & post]


def after_norm_marker(ax, x, y, color, label: bool = True):
    """``after_norm_marker(ax, after["layer"], after["value"], color)``: the final layer after the model's final
    norm as a hollow marker (legend entry "after final norm" when ``label``); nothing for no points."""
    if len(x) == 0:
        return None
    return ax.scatter(x, y, s=90, facecolors="none", edgecolors=color, linewidths=1.8, zorder=5,
                      label=AFTER_NORM if label else None)


def figure_slug(name: str) -> str:
    """A file-name part for a model's figure: ``figure_slug("org/model-1.5b")`` -> ``"org-model-1-5b"``."""
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")
