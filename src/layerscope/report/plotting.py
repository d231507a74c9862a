"""Figure helpers: figures are built as plain ``matplotlib.figure.Figure`` objects (no pyplot
state), so studies can draw them from any thread, process or notebook.

    fig, axes = figure(1, 2, size=(14, 5))
    band(axes[0, 0], layers, ci_lo, ci_hi, color)          # an interval band, where both bounds exist
    profile, after = split_stage(rows)                      # the final layer before / after the final norm

    with styled():                                          # the house style (STYLE): around drawing AND saving
        figs = study.figures(result)
        svg = save_figure(figs["phases"], "svg")            # bytes; png at PNG_DPI, svg with text as text, pdf

Font sizes are read when an artist is made, so :func:`styled` must wrap the code that draws a figure, not only
the save. Sizes in study code are relative ("small", "large"), so they follow ``STYLE["font.size"]``.
"""

from __future__ import annotations

import io
from contextlib import AbstractContextManager

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import cycler
from matplotlib.figure import Figure

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
"""Okabe & Ito's colour-blind-safe palette (blue, orange, green, vermillion, purple, sky blue, yellow, black)."""
COLORS = OKABE_ITO
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
POOLING_COLORS = {"mean": OKABE_ITO[0], "last": OKABE_ITO[2], "first": OKABE_ITO[1]}
FIGURE_FORMATS = ("png", "svg", "pdf")
"""The figure file formats layerscope writes (``--figure-format``)."""
PNG_DPI = 150

STYLE: dict[str, object] = {
    # Studies draw at 7-22 in wide (most 10-14 in). A 14 pt base is 4.9 pt on a (10, 6) figure shrunk to one
    # column (3.5 in) and 7-10 pt at text width (7 in); the named sizes below scale with it.
    "font.size": 14,
    "axes.titlesize": "large",
    "axes.labelsize": "large",
    "xtick.labelsize": "medium",
    "ytick.labelsize": "medium",
    "legend.fontsize": "medium",
    "legend.title_fontsize": "medium",
    "figure.titlesize": "x-large",
    "axes.prop_cycle": cycler(color=OKABE_ITO),
    "lines.linewidth": 1.8,
    "svg.fonttype": "none",  # text stays text (<text> elements): selectable, editable, searchable
    "svg.hashsalt": "layerscope",  # the same figure gives the same SVG ids on every run
    "pdf.fonttype": 42,  # TrueType fonts embedded whole: text stays text, editable in a PDF editor
    "ps.fonttype": 42,
}
"""The matplotlib rcParams every layerscope figure is drawn and saved with (see :func:`styled`)."""


def styled() -> AbstractContextManager:
    """``with styled(): figs = study.figures(result)``: matplotlib's rcParams set to :data:`STYLE` inside."""
    return matplotlib.rc_context(STYLE)


def save_figure(fig: Figure, fmt: str, dpi: int = PNG_DPI) -> bytes:
    """``save_figure(fig, "svg")``: the figure as ``fmt`` (one of :data:`FIGURE_FORMATS`) bytes, tightly cropped,
    saved under :data:`STYLE`; png at ``dpi``; no creation date in svg or pdf (the same figure, the same bytes)."""
    buffer = io.BytesIO()
    metadata = {"png": None, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    with styled():
        fig.savefig(buffer, format=fmt, dpi=dpi, bbox_inches="tight", metadata=metadata)
    return buffer.getvalue()
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
    ``ci_hi`` of ``rows`` (n rows); nothing (None) when the table has no such columns (notebooks mode)."""
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
