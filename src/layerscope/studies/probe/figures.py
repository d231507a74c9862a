"""Probe figures, from the result alone: one per model and label set, decodable vs used on one depth axis.

    figs = figures(result)   # {"probe_<label set>_<model>": Figure}

Top panel: out-of-fold accuracy of the logistic and mass-mean probes and of the control task, with bootstrap
bands and the chance level; the states where the logistic probe is significant (BH) are marked. Middle:
selectivity (accuracy - control accuracy) with its band. Bottom (the pair contrast): the steering effect at the
first alpha with its bootstrap band, the -alpha effect, and the random directions' band.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from ...report.plotting import COLORS, band, figure, figure_slug, zero_line
from ...study.result import StudyResult
from .analysis import LEVEL


def figures(result: StudyResult) -> dict[str, Figure]:
    out = {}
    for model, s in result.summary["models"].items():
        for name, entry in s["label_sets"].items():
            rows = result.table[(result.table["model"] == model) & (result.table["label_set"] == name)]
            out[f"probe_{figure_slug(name)}_{figure_slug(model)}"] = task_figure(rows, entry, model, name)
    return out


def curve(rows: pd.DataFrame, method: str, metric: str) -> pd.DataFrame:
    return rows[(rows["method"] == method) & (rows["metric"] == metric)].sort_values("state")


def task_figure(rows: pd.DataFrame, entry: dict, model: str, name: str) -> Figure:
    steer = "steering" in entry
    fig, grid = figure(3 if steer else 2, 1, (9, 9 if steer else 6.5))
    axes = grid[:, 0]
    ax = axes[0]
    for (method, label), color in zip([("logreg", "logistic probe"), ("mass_mean", "mass-mean probe"),
                                       ("control", "control task (logistic)")], COLORS, strict=False):
        c = curve(rows, method, "accuracy")
        ax.plot(c["state"], c["value"], marker="o", ms=3, color=color, label=label)
        band(ax, c["state"], c["ci_lo"], c["ci_hi"], color)
    logreg = curve(rows, "logreg", "accuracy")
    hit = logreg[logreg["q"] < LEVEL]
    ax.scatter(hit["state"], hit["value"], s=40, facecolors="none", edgecolors="black",
               label=f"logistic probe q < {LEVEL}")
    ax.axhline(entry["probes"]["logreg"]["chance"], color="grey", lw=0.8, ls=":", label="chance (majority class)")
    ax.set(ylabel="accuracy (out of fold)", title=f"{model}: {name}")
    ax.legend(fontsize=8)
    ax = axes[1]
    for method, color in (("logreg", COLORS[0]), ("mass_mean", COLORS[1])):
        c = curve(rows, method, "selectivity")
        ax.plot(c["state"], c["value"], marker="o", ms=3, color=color, label=f"{method} selectivity")
        band(ax, c["state"], c["ci_lo"], c["ci_hi"], color)
    zero_line(ax)
    ax.set(ylabel="accuracy - control")
    ax.legend(fontsize=8)
    if steer:
        ax = axes[2]
        alpha = entry["steering"]["alphas"][0]
        effects = rows[(rows["method"] == "steer") & (rows["metric"] == "effect")]
        pos = effects[effects["alpha"] == alpha].sort_values("state")
        neg = effects[effects["alpha"] == -alpha].sort_values("state")
        rand = curve(rows, "random_band", "effect")
        band(ax, rand["state"], rand["ci_lo"], rand["ci_hi"], "grey", label="random directions")
        ax.plot(pos["state"], pos["value"], marker="o", ms=3, color=COLORS[2], label=f"alpha = {alpha:g}")
        band(ax, pos["state"], pos["ci_lo"], pos["ci_hi"], COLORS[2])
        ax.plot(neg["state"], neg["value"], ls="--", color=COLORS[3], label=f"alpha = {-alpha:g}")
        zero_line(ax)
        split = "in-sample" if entry["steering"]["in_sample"] else "held-out pairs"
        ax.set(ylabel=f"preference change ({split})")
        ax.legend(fontsize=8)
    axes[-1].set(xlabel="hidden state (0 = embeddings, L = last block before the final norm)")
    return fig
