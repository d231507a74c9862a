"""Surgery figures, from the result alone.

    figs = figures(result)   # {"surgery_layers_<model>": Figure, "surgery_pruning_<model>": Figure,
                             #  "surgery_languages_<model>": Figure (with a languages file)}

The layer figure has one panel per intervention (skip, repeat, swap): mean delta NLL per block with its
bootstrap band, significant blocks (BH) marked, the boundaries the study tested drawn as vertical lines (the
given ones solid, Block Influence change points dashed, the thirds dotted). The pruning figure draws each
selection rule's delta NLL against k with its interval over the random sets' band.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from ...report.markdown import BITS_PER_NAT, bits
from ...report.plotting import COLORS, band, figure, figure_slug, zero_line
from ...study.result import StudyResult

LINES = {"given": ("-", "boundary (given)"), "change_points": ("--", "block influence change point"),
         "thirds": (":", "thirds")}
RULE_STYLE = {"block_influence": (COLORS[0], "lowest block influence (ShortGPT)"),
              "angular_distance": (COLORS[1], "closest contiguous block (Gromov et al.)")}


def figures(result: StudyResult) -> dict[str, Figure]:
    table = result.table
    out = {}
    for model, s in result.summary["models"].items():
        rows = table[table["model"] == model]
        slug = figure_slug(model)
        kinds = [k for k in ("skip", "repeat", "swap") if k in s]
        if kinds:
            out[f"surgery_layers_{slug}"] = layers_figure(rows, s, kinds, model)
        if "pruning" in s:
            out[f"surgery_pruning_{slug}"] = pruning_figure(rows, model)
        if any("per_language" in s.get(k, {}) for k in kinds):
            out[f"surgery_languages_{slug}"] = language_figure(s, kinds, model)
    return out


def _in_bits(rows: pd.DataFrame) -> pd.DataFrame:
    """The table's delta NLL rows (nats per token) with value and interval in bits per token, for drawing."""
    return rows.assign(**{c: rows[c] * BITS_PER_NAT for c in ("value", "ci_lo", "ci_hi")})


def _all_langs(rows: pd.DataFrame) -> pd.Series:
    return rows["lang"].isna() | (rows["lang"] == "all")


def layers_figure(rows: pd.DataFrame, s: dict, kinds: list[str], model: str) -> Figure:
    fig, axes = figure(len(kinds), 1, size=(11, 3.4 * len(kinds)))
    for ax, kind in zip(axes[:, 0], kinds, strict=True):
        r = _in_bits(rows[(rows["intervention"] == kind) & (rows["metric"] == "delta_nll") & _all_langs(rows)])
        r = r.sort_values("layer")
        x = r["layer"].to_numpy(dtype=float)
        ax.plot(x, r["value"], marker="o", markersize=3, color=COLORS[0], label="mean delta NLL")
        band(ax, x, r["ci_lo"], r["ci_hi"], COLORS[0], label="95% bootstrap CI")
        sig = r["q"].to_numpy(dtype=float) < 0.05
        ax.plot(x[sig], r["value"].to_numpy()[sig], "o", color=COLORS[3], markersize=5, label="BH q < 0.05")
        for name, b in s.get("boundaries", {}).items():
            style, label = LINES.get(name, ("-", name))
            for i, state in enumerate(b["states"]):
                ax.axvline(state - 0.5, color="gray", linestyle=style, alpha=0.7, label=label if i == 0 else None)
        zero_line(ax)
        ax.set_yscale("symlog", linthresh=0.1)
        what = {"skip": "block l skipped", "repeat": "block l run twice", "swap": "blocks l and l+1 swapped"}[kind]
        ax.set_title(f"{model}: {what}")
        ax.set_xlabel("decoder block l (0-based)")
        ax.set_ylabel("delta NLL (bits/token)")
        ax.legend(fontsize="x-small", loc="lower center", ncol=5)
    return fig


def pruning_figure(rows: pd.DataFrame, model: str) -> Figure:
    fig, axes = figure(1, 1, size=(8, 5))
    ax = axes[0, 0]
    r = _in_bits(rows[(rows["intervention"] == "prune") & (rows["metric"] == "delta_nll")])
    rand = r[r["rule"] == "random"].sort_values("k")
    k = rand["k"].to_numpy(dtype=float)
    ax.plot(k, rand["value"], color="gray", label="random sets: mean")
    band(ax, k, rand["ci_lo"], rand["ci_hi"], "gray", label="random sets: 95% of draws", alpha=0.25)
    for rule, (color, label) in RULE_STYLE.items():
        rr = r[r["rule"] == rule].sort_values("k")
        kk = rr["k"].to_numpy(dtype=float)
        ax.errorbar(kk, rr["value"], yerr=[rr["value"] - rr["ci_lo"], rr["ci_hi"] - rr["value"]], marker="o",
                    color=color, capsize=3, label=label)
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xlabel("blocks removed k")
    ax.set_ylabel("delta NLL (bits/token)")
    ax.set_title(f"{model}: pruning curve")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def language_figure(s: dict, kinds: list[str], model: str) -> Figure:
    kinds = [k for k in kinds if "per_language" in s[k]]
    fig, axes = figure(len(kinds), 1, size=(11, 0.5 + 0.45 * len(s[kinds[0]]["per_language"]) * len(kinds) + 1.5))
    for ax, kind in zip(axes[:, 0], kinds, strict=True):
        langs = list(s[kind]["per_language"])
        grid = bits(np.array([s[kind]["per_language"][code] for code in langs], dtype=float))
        image = ax.imshow(grid, aspect="auto", cmap=colormaps["viridis"],
                          norm=_symlog(grid), interpolation="nearest")
        ax.set_yticks(range(len(langs)), langs)
        ax.set_xlabel("decoder block l")
        ax.set_ylabel("language")
        ax.set_title(f"{model}: delta NLL per language, {kind}")
        fig.colorbar(image, ax=ax, label="delta NLL (bits/token)")
    return fig


def _symlog(grid: np.ndarray):
    from matplotlib.colors import SymLogNorm

    finite = grid[np.isfinite(grid)]
    top = float(finite.max()) if finite.size else 1.0
    bottom = float(min(0.0, finite.min())) if finite.size else 0.0
    return SymLogNorm(linthresh=0.1, vmin=bottom, vmax=max(top, 0.1))
