"""Probe figures, from the result alone: one per model and label set, decodable vs used on one depth axis.

    figs = figures(result)   # {"probe_<label set>_<model>": Figure}

Top panel: out-of-fold accuracy of the logistic and mass-mean probes and of the control task, with bootstrap
bands and the chance level; the states where the logistic probe is significant (BH) are marked. Middle:
selectivity (accuracy - control accuracy) with its band. Then (a two-class label set): the steering effect at the
first alpha with its bootstrap band, the -alpha effect, and the random directions' band. Last, when the same
suite ran them (``summary["models"][model]["companions"]``): divergence's UA per state and, on its own axis,
surgery's cost of skipping block b, drawn between states b and b + 1 (the block maps one to the other).
"""

from __future__ import annotations

import numpy as np
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
            out[f"probe_{figure_slug(name)}_{figure_slug(model)}"] = task_figure(rows, entry, model, name,
                                                                                  s.get("companions") or {})
    return out


def curve(rows: pd.DataFrame, method: str, metric: str) -> pd.DataFrame:
    return rows[(rows["method"] == method) & (rows["metric"] == metric)].sort_values("state")


def companions_panel(ax, companions: dict) -> None:
    """Divergence's UA per state (left axis) and surgery's skip cost per block (right axis, at b + 0.5)."""
    ua, skip = companions.get("divergence_ua"), companions.get("surgery_skip")
    handles = []
    if ua:
        handles += ax.plot(ua["states"], [np.nan if v is None else v for v in ua["values"]], marker="s", ms=3,
                           color=COLORS[4], label=ua["what"])
        ax.set_ylabel("UA")
        zero_line(ax)
    if skip:
        right = ax.twinx() if ua else ax
        x = np.array(skip["blocks"]) + 0.5
        value, lo, hi = (np.array([np.nan if v is None else v for v in skip[k]]) for k in ("values", "ci_lo", "ci_hi"))
        handles.append(right.errorbar(x, value, yerr=[value - lo, hi - value], fmt="^", ms=3, color=COLORS[5],
                                      label=f"{skip['what']} (block b at b + 0.5)"))
        right.set_ylabel("skip cost (mean NLL change)")
    ax.legend(handles=handles, fontsize=8)


def task_figure(rows: pd.DataFrame, entry: dict, model: str, name: str, companions: dict | None = None) -> Figure:
    steer = "steering" in entry
    n_panels = 2 + steer + bool(companions)
    fig, grid = figure(n_panels, 1, (9, 3 * n_panels + 0.5))
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
        split = "in-sample" if entry["steering"]["in_sample"] else f"held-out {'pairs' if name == 'side' else 'groups'}"
        ax.set(ylabel=f"preference change ({split})")
        ax.legend(fontsize=8)
    if companions:
        companions_panel(axes[-1], companions)
    axes[-1].set(xlabel="hidden state (0 = embeddings, L = last block before the final norm)")
    return fig
