"""Probe figures, from the result alone: one per model and label set, decodable vs used on one depth axis.

    figs = figures(result)   # {"probe_<label set>_<model>": Figure}

Top: out-of-fold accuracy of the logistic and mass-mean probes, the control task and the two shallow readers (bag
of tokens, the state-0 probe), with bootstrap bands; decodable states ringed. Then the gain over the best shallow
reader. For a contrast tested causally: removal's damage against the null directions' band, and steering's
sign-reversing part S at the tested alpha against theirs, tested states ringed. Last, in a suite that ran them:
divergence's UA and surgery's skip cost (:mod:`.companions`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ...report.plotting import COLORS, band, figure, figure_slug, zero_line
from ...study.result import StudyResult
from .analysis import LEVEL
from .companions import companions_panel


def figures(result: StudyResult) -> dict[str, Figure]:
    out = {}
    for model, s in result.summary["models"].items():
        for name, entry in s["label_sets"].items():
            rows = result.table[(result.table["model"] == model) & (result.table["label_set"] == name)]
            if "check" in rows.columns:
                rows = rows[rows["check"].isna() | (rows["check"] == "")]
            out[f"probe_{figure_slug(name)}_{figure_slug(model)}"] = task_figure(rows, entry, model, name,
                                                                                  s.get("companions") or {})
    return out


def curve(rows: pd.DataFrame, method: str, metric: str, **match) -> pd.DataFrame:
    c = rows[(rows["method"] == method) & (rows["metric"] == metric)]
    for key, value in match.items():
        c = c[c[key] == value]
    return c.sort_values("state")


def task_figure(rows: pd.DataFrame, entry: dict, model: str, name: str, companions: dict | None = None) -> Figure:
    causal = entry.get("causal")
    n_panels = 2 + 2 * bool(causal) + bool(companions)
    fig, grid = figure(n_panels, 1, (9, 2.8 * n_panels + 0.5))
    axes = grid[:, 0]
    ax = axes[0]
    for (method, label), color in zip([("logreg", "logistic probe"), ("mass_mean", "mass-mean probe")], COLORS,
                                      strict=False):
        c = curve(rows, method, "accuracy")
        ax.plot(c["state"], c["value"], marker="o", ms=3, color=color, label=label)
        band(ax, c["state"], c["ci_lo"], c["ci_hi"], color)
    control = curve(rows, "control", "accuracy", direction="logreg") if "direction" in rows.columns else rows[:0]
    if len(control):
        ax.plot(control["state"], control["value"], ls="--", color=COLORS[2], label="control task (logistic)")
    surface = entry["surface"]
    if surface["accuracy"] is not None:
        ax.axhline(surface["accuracy"], color=COLORS[3], lw=1, ls="-.", label="bag of tokens + length")
    ax.axhline(entry["probes"]["logreg"]["chance"], color="grey", lw=0.8, ls=":", label="chance (majority class)")
    gain = curve(rows, "logreg", "gain_over_surface")
    hit = curve(rows, "logreg", "accuracy")
    if "decodable" in gain.columns:
        hit = hit[hit["state"].isin(gain[gain["decodable"] == True]["state"])]  # noqa: E712 - a pandas mask
        ax.scatter(hit["state"], hit["value"], s=40, facecolors="none", edgecolors="black",
                   label="decodable (q < 0.05, gain interval > 0)")
    kind = " (a mixture of contrasts)" if entry.get("kind") == "mixture" else ""
    ax.set(ylabel="accuracy (out of fold)", title=f"{model}: {name}{kind}")
    ax.legend(fontsize=7)
    ax = axes[1]
    for method, color in (("logreg", COLORS[0]), ("mass_mean", COLORS[1])):
        c = curve(rows, method, "gain_over_surface")
        ax.plot(c["state"], c["value"], marker="o", ms=3, color=color, label=f"{method}: gain over the best "
                f"shallow reader ({surface['best']})")
        band(ax, c["state"], c["ci_lo"], c["ci_hi"], color)
    zero_line(ax)
    ax.set(ylabel="accuracy gain")
    ax.legend(fontsize=7)
    if causal:
        removal_panel(axes[2], rows, causal)
        steering_panel(axes[3], rows, causal)
    if companions:
        companions_panel(axes[-1], companions)
    axes[-1].set(xlabel="hidden state (0 = embeddings, L = last block before the final norm)")
    return fig


def ringed(ax, rows: pd.DataFrame, label: str) -> None:
    hit = rows[rows["q"] < LEVEL]
    ax.scatter(hit["state"], hit["value"], s=50, facecolors="none", edgecolors="black", label=label)


def removal_panel(ax, rows: pd.DataFrame, causal: dict) -> None:
    damage, null = curve(rows, "remove", "damage"), curve(rows, "remove_null", "damage")
    band(ax, null["state"], null["ci_lo"], null["ci_hi"], "grey", label="null directions removed (band)")
    ax.plot(damage["state"], damage["value"], marker="o", ms=3, color=COLORS[4], label="u removed: damage")
    band(ax, damage["state"], damage["ci_lo"], damage["ci_hi"], COLORS[4])
    effect = curve(rows, "remove", "effect")
    ax.plot(effect["state"], effect["value"], ls="--", color=COLORS[5], label="u removed: preference change")
    ringed(ax, damage, f"needed (q < {LEVEL})")
    zero_line(ax)
    ax.set(ylabel="nats (held-out pairs)")
    ax.legend(fontsize=7)


def steering_panel(ax, rows: pd.DataFrame, causal: dict) -> None:
    alpha = causal["test_alpha"]
    null = curve(rows, "steer_null", "sign_effect")
    band(ax, null["state"], null["ci_lo"], null["ci_hi"], "grey", label="null directions: S (band)")
    for name, color in (("mass_mean", COLORS[0]), ("logistic", COLORS[1])):
        s = curve(rows, "steer", "sign_effect", direction=name)
        s = s[np.isclose(s["alpha"].astype(float), alpha)]
        ax.plot(s["state"], s["value"], marker="o", ms=3, color=color, label=f"{name}: S({alpha:g})")
        band(ax, s["state"], s["ci_lo"], s["ci_hi"], color)
        if name == "mass_mean":
            ringed(ax, s, f"steerable (q < {LEVEL})")
    d = curve(rows, "steer", "damage", direction="mass_mean")
    d = d[np.isclose(d["alpha"].astype(float), alpha)]
    ax.plot(d["state"], d["value"], ls="--", color=COLORS[3], label=f"mass_mean: damage D({alpha:g})")
    zero_line(ax)
    ax.set(ylabel="preference change (nats)")
    ax.legend(fontsize=7)
