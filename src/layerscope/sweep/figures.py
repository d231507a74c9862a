"""A sweep's figures: each layer-wise metric over depth (and over training step when the sweep
runs revisions), and each study's headline numbers against training step.

    figs = metric_figures(profile_rows(table, config))   # {"r_ua_pref": Figure, ...}
    fig = dynamics_figure(task_rows(...))                 # None unless some task has a training step
    readable("peak_depth_pct")                            # "peak depth (% of layers)": titles and axes

Layer curves get an interval band where the profile rows carry ``ci_lo`` and ``ci_hi`` (one row per task and
layer with an interval: r profiles of divergence, scaling and phases; none in notebooks mode).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from ..report.plotting import COLORS, MARKERS, figure, interval_band, zero_line

NAMES = {
    # layer-wise table metrics
    "r_ua_pref": "r(UA, output preference)",
    "rho_ua_pref": "Spearman rho(UA, output preference)",
    "r_ua_pref_sum": "r(UA, summed output preference)",
    "r_centroid_pref": "r(centroid asymmetry, output preference)",
    "rho_centroid_pref": "Spearman rho(centroid asymmetry, output preference)",
    "r_centroid_pref_loo": "r(centroid asymmetry, preference), leave-one-out centroids",
    "r_centroid_pref_self": "r(centroid asymmetry, preference), all-pair centroids",
    "eigenvalue_variance": "eigenvalue variance Var(λ)",
    "top1_ratio": "top-1 eigenvalue share λ1 / Σλ",
    "effective_rank": "effective rank",
    "cos_to_mean": "mean cosine to the mean state",
    "var_top10": "variance share of the top 10 PCs",
    "var_top50": "variance share of the top 50 PCs",
    "n_outlier_dims": "number of outlier dimensions",
    "outlier_share_top1": "outlier dimensions' share of the top PC",
    "top1_ratio_without_outliers": "top-1 eigenvalue share without outlier dimensions",
    "ppl": "perplexity",
    "degradation": "perplexity degradation (relative to baseline)",
    "delta_nll": "NLL increase over baseline",
    # headline numbers (study.numbers)
    "final_r_mean": "final-layer r(UA, pref), mean pooling",
    "final_r_last": "final-layer r(UA, pref), last-token pooling",
    "final_r_first": "final-layer r(UA, pref), first-token pooling",
    "final_r": "final-layer r",
    "peak_r": "peak r (largest positive)",
    "peak_depth_pct": "peak depth (% of layers)",
    "early": "early-phase mean r",
    "mid": "mid-phase mean r",
    "late": "late-phase mean r",
    "l_star": "L* (layer of peak anisotropy)",
    "l_star_depth_pct": "L* depth (% of layers)",
    "top1_ratio_at_l_star": "top-1 eigenvalue share at L*",
    "all_quantized_ppl_ratio": "perplexity ratio, all layers quantized (median)",
    "d_hr": "degradation, high-resource languages",
    "d_lr": "degradation, low-resource languages",
    "disparity_ratio": "disparity ratio D_LR / D_HR",
}
"""Readable names of the metric keys a sweep plots; :func:`readable` falls back to the key without underscores."""


def readable(key: str) -> str:
    """``readable("l_star")`` -> ``"L* (layer of peak anisotropy)"``; an unknown key with its underscores as
    spaces (``"new_metric"`` -> ``"new metric"``)."""
    return NAMES.get(key, key.replace("_", " "))


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
    band_label = "each task's CI"
    for i, ((model, revision, step), group) in enumerate(tasks):
        group = group.sort_values("layer")
        label = f"{model}@{revision}" if revision else model
        color = colormaps["viridis"](norm(step)) if norm is not None and not pd.isna(step) else COLORS[i % len(COLORS)]
        ax.plot(group["depth"] * 100, group["value"], marker=MARKERS[i % len(MARKERS)], markersize=4,
                color=color, label=label)
        if interval_band(ax, group["depth"] * 100, group, color, label=band_label) is not None:
            band_label = None  # one legend entry for all bands
    zero_line(ax)
    ax.set_xlabel("depth (% of layers)")
    ax.set_ylabel(readable(metric))
    ax.set_title(f"{readable(metric)} over depth")
    if len(tasks) <= 12:
        ax.legend(fontsize="small")


def _over_step(fig: Figure, ax, rows: pd.DataFrame, metric: str, model: str) -> None:
    grid = rows.pivot_table(index="layer", columns="step", values="value", aggfunc="mean").sort_index()
    data = grid.to_numpy(dtype=float)
    finite = np.abs(data[np.isfinite(data)])
    limit = float(finite.max()) if finite.size else 1.0
    signed = bool(np.nanmin(data) < 0) if finite.size else False
    image = ax.imshow(data, aspect="auto", origin="lower", cmap="RdBu_r" if signed else "viridis",
                      vmin=-limit if signed else None, vmax=limit if signed else None, interpolation="nearest")
    ax.set_xticks(range(len(grid.columns)), [str(s) for s in grid.columns], rotation=45, ha="right", fontsize="small")
    ticks = _ticks(len(grid.index))
    ax.set_yticks(ticks, [str(grid.index[t]) for t in ticks])
    ax.set_xlabel("training step (one column per revision)")
    ax.set_ylabel("layer")
    ax.set_title(f"{readable(metric)} of {model} over training")
    fig.colorbar(image, ax=ax, label=readable(metric))


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
            x, y = zip(*points, strict=False)
            ax.plot(x, [np.nan if v is None else v for v in y], marker=MARKERS[m % len(MARKERS)],
                    color=COLORS[m % len(COLORS)], label=model)
        if positive and max(positive) > 100 * min(positive):  # steps over decades, often with step 0
            ax.set_xscale("symlog", linthresh=min(positive))
        ax.grid(True, alpha=0.3)
        ax.set_title(readable(name))
        ax.set_xlabel("training step")
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize="small")
    fig.suptitle(title)
    return fig
