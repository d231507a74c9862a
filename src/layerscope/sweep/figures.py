"""A sweep's figures: each layer-wise metric over depth (and over training step when the sweep
runs revisions), and each study's headline numbers against training step.

    figs = metric_figures(profile_rows(table, config))   # {"r_ua_pref": Figure, ...}
    fig = dynamics_figure(task_rows(...))                 # None unless some task has a training step
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from ..report.plotting import COLORS, MARKERS, figure, zero_line


def metric_figures(profiles: pd.DataFrame) -> dict[str, Figure]:
    """Per metric: value over depth, one line per task; beside it, when a model was swept at two or more
    training steps, a heat map of value over (step, layer) for the model with the most steps."""
    figures = {}
    for metric, rows in profiles.groupby("metric", sort=False):
        tracked = _most_steps(rows)
        fig, axes = figure(1, 2 if tracked is not None else 1, size=(15 if tracked is not None else 9, 5.5))
        _over_depth(axes[0, 0], rows, metric)
        if tracked is not None:
            _over_step(fig, axes[0, 1], rows[rows["model"] == tracked], metric, tracked)
        figures[metric] = fig
    return figures


def _most_steps(rows: pd.DataFrame) -> str | None:
    counts = rows.dropna(subset=["step"]).groupby("model")["step"].nunique()
    return None if counts.empty or counts.max() < 2 else str(counts.idxmax())


def _over_depth(ax, rows: pd.DataFrame, metric: str) -> None:
    tasks = list(rows.groupby(["model", "revision", "step"], sort=False, dropna=False))
    steps = [step for (_, _, step), _ in tasks if not pd.isna(step)]
    norm = Normalize(min(steps), max(steps) if max(steps) > min(steps) else min(steps) + 1) if steps else None
    for i, ((model, revision, step), group) in enumerate(tasks):
        group = group.sort_values("layer")
        label = f"{model}@{revision}" if revision else model
        color = colormaps["viridis"](norm(step)) if norm is not None and not pd.isna(step) else COLORS[i % len(COLORS)]
        ax.plot(group["depth"] * 100, group["value"], marker=MARKERS[i % len(MARKERS)], markersize=4,
                color=color, label=label)
    zero_line(ax)
    ax.set_xlabel("depth (% of layers)")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} over depth")
    if len(tasks) <= 12:
        ax.legend(fontsize=8)


def _over_step(fig: Figure, ax, rows: pd.DataFrame, metric: str, model: str) -> None:
    grid = rows.pivot_table(index="layer", columns="step", values="value", aggfunc="mean").sort_index()
    data = grid.to_numpy(dtype=float)
    finite = np.abs(data[np.isfinite(data)])
    limit = float(finite.max()) if finite.size else 1.0
    signed = bool(np.nanmin(data) < 0) if finite.size else False
    image = ax.imshow(data, aspect="auto", origin="lower", cmap="RdBu_r" if signed else "viridis",
                      vmin=-limit if signed else None, vmax=limit if signed else None, interpolation="nearest")
    ax.set_xticks(range(len(grid.columns)), [str(s) for s in grid.columns], rotation=45, ha="right", fontsize=8)
    ticks = _ticks(len(grid.index))
    ax.set_yticks(ticks, [str(grid.index[t]) for t in ticks])
    ax.set_xlabel("training step (one column per revision)")
    ax.set_ylabel("layer")
    ax.set_title(f"{metric} of {model} over training")
    fig.colorbar(image, ax=ax, label=metric)


def _ticks(n: int, most: int = 12) -> list[int]:
    return list(range(0, n, max(1, math.ceil(n / most))))


def dynamics_figure(rows: list[dict], title: str) -> Figure | None:
    """Each headline number (a panel) against training step, one line per model; None without steps."""
    stepped = [r for r in rows if r.get("step") is not None and r.get("numbers")]
    if not stepped:
        return None
    names = list(dict.fromkeys(name for r in stepped for name in r["numbers"]))
    cols = 2 if len(names) == 4 else min(3, len(names))
    fig, axes = figure(math.ceil(len(names) / cols), cols, size=(5 * cols, 3.8 * math.ceil(len(names) / cols)))
    models = list(dict.fromkeys(r["model"] for r in stepped))
    positive = [r["step"] for r in stepped if r["step"] > 0]
    for k, name in enumerate(names):
        ax = axes.flat[k]
        for m, model in enumerate(models):
            points = sorted((r["step"], r["numbers"].get(name, float("nan"))) for r in stepped if r["model"] == model)
            x, y = zip(*points)
            ax.plot(x, [np.nan if v is None else v for v in y], marker=MARKERS[m % len(MARKERS)],
                    color=COLORS[m % len(COLORS)], label=model)
        if positive and max(positive) > 100 * min(positive):  # steps over decades, often with step 0
            ax.set_xscale("symlog", linthresh=min(positive))
        ax.grid(True, alpha=0.3)
        ax.set_title(name)
        ax.set_xlabel("training step")
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title)
    return fig
