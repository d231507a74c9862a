"""Figure helpers: figures are built as plain ``matplotlib.figure.Figure`` objects (no pyplot
state), so studies can draw them from any thread, process or notebook.

    fig, axes = figure(1, 2, size=(14, 5))
"""

from __future__ import annotations

from matplotlib.figure import Figure

COLORS = ["#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#d62728", "#8c564b", "#e377c2", "#17becf"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
POOLING_COLORS = {"mean": "#1f77b4", "last": "#2ca02c", "first": "#ff7f0e"}


def figure(rows: int = 1, cols: int = 1, size: tuple[float, float] = (10, 6)):
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def zero_line(ax) -> None:
    ax.axhline(0, color="gray", linestyle="--", alpha=0.5)
    ax.grid(True, alpha=0.3)
