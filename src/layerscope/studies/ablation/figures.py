"""Ablation figures: the notebook's four panels per quantization variant, each layer's own quantization error
(SQNR) beside what quantizing it alone does (with --sweep), and with --sweep a layer x language heat map."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ...report.markdown import bits
from ...report.plotting import COLORS, MARKERS, figure, figure_slug
from ...study.result import StudyResult
from .summary import AblationSummary, ConfigRow, SweepRow, VariantSummary

LOG_ABOVE = 100.0
"""Degradations above this (perplexity > 100x baseline) are drawn on a symlog scale."""

ORDER = ["baseline", "gateway_protected", "first_protected", "last_protected", "first_half_protected",
         "second_half_protected", "middle_protected", "all_quantized"]


def figures(result: StudyResult) -> dict[str, Figure]:
    out = {}
    table = result.table
    summary: AblationSummary = result.summary
    several = len(summary["models"]) > 1
    for model, s in summary["models"].items():
        for label, v in s["variants"].items():
            scheme = "" if label == summary["primary"] else "_notebook_scheme"  # the other variant: the notebook's
            name = "ablation" + scheme + (f"_{figure_slug(model)}" if several else "")
            rows = table[(table["model"] == model) & (table["scheme"] == v["scheme"])
                         & (table["targets"] == v["targets"])]
            out[name] = _panels(model, label, v, rows)
            resource = result.manifest["dataset"]["languages"]
            if v.get("layer_error"):
                out[name + "_layer_error"] = _layer_error(model, label, v, resource)
            if "sweep" in v:
                out[name + "_sweep"] = _heatmap(model, label, v["sweep"], resource)
    return out


def _panels(model: str, label: str, v: VariantSummary, rows) -> Figure:
    by = {c["config"]: c for c in v["per_config"]}
    order = [c for c in ORDER if c in by] + [c for c in by if c not in ORDER and not c.startswith("only_L")]
    colors = [COLORS[2] if "protected" in c or c == "baseline" else COLORS[3] for c in order]  # green, vermillion
    fig, axes = figure(2, 2, size=(15, 11))
    ax1, ax2, ax3, ax4 = axes.flat
    ax1.barh(order, [by[c]["mean_degradation"] for c in order], xerr=[by[c]["std_degradation"] for c in order],
             color=colors, capsize=3)
    if "all_quantized" in by:
        ax1.axvline(by["all_quantized"]["mean_degradation"], color=COLORS[3], linestyle="--", alpha=0.5)
    ax1.set_xlabel("Mean degradation (ppl / baseline ppl - 1)")
    ax1.set_ylabel("Configuration")
    ax1.set_title("Degradation by layer protection strategy")

    ratios = [by[c]["disparity_ratio"] if by[c]["disparity_ratio"] is not None else np.nan for c in order]
    pos = np.arange(len(order))  # numeric positions: an undefined ratio keeps its row, with the reason written in
    ax2.barh(pos, np.nan_to_num(ratios), color=colors, xerr=_errors(ratios, [by[c].get("disparity_ci") for c in order]),
             capsize=3)
    ax2.set_yticks(pos, order)
    for k, c in enumerate(order):
        if by[c]["disparity_ratio"] is None:
            why = f"broken (ppl x{by[c]['median_ppl_ratio']:.3g})" if by[c].get("broken") else "undefined"
            ax2.text(0.02, k, why, va="center", fontsize="small", transform=ax2.get_yaxis_transform())
    ax2.axvline(1.0, color="gray", alpha=0.5)
    if "all_quantized" in by and by["all_quantized"]["disparity_ratio"] is not None:
        ax2.axvline(by["all_quantized"]["disparity_ratio"], color=COLORS[3], linestyle="--", alpha=0.5)
    ax2.set_xlabel("Disparity ratio D_LR / D_HR" + (" (error bars: bootstrap CI over texts)" if _has_ci(by) else ""))
    ax2.set_ylabel("Configuration")
    ax2.set_title("Language disparity by protection strategy")

    per_lang = rows[rows["metric"] == "degradation"].pivot_table(index="config", columns="lang", values="value",
                                                                 aggfunc="mean", sort=False)
    per_lang = per_lang.reindex([c for c in order if c in per_lang.index])
    width = 0.8 / max(1, len(per_lang.columns))
    x = np.arange(len(per_lang.index))
    for j, lang in enumerate(per_lang.columns):
        ax3.bar(x + (j - (len(per_lang.columns) - 1) / 2) * width, per_lang[lang], width=width, label=lang)
    ax3.set_xticks(x, per_lang.index, rotation=45, ha="right")
    ax3.set_xlabel("Configuration")
    ax3.set_ylabel("Mean degradation (ppl / baseline ppl - 1)")
    ax3.set_title("Per-language degradation by configuration")
    ax3.legend(title="Language", fontsize="small")

    # a marker per configuration, and its name beside it
    for k, (c, color) in enumerate(zip(order, colors, strict=False)):
        x, y = by[c]["d_hr"], by[c]["d_lr"]
        ax4.errorbar(x, y, xerr=_errors([x], [by[c].get("d_hr_ci")]), yerr=_errors([y], [by[c].get("d_lr_ci")]),
                     fmt=MARKERS[k % len(MARKERS)], markersize=9, color=color, ecolor=color, elinewidth=1,
                     capsize=2, alpha=0.85, label=c + (" (broken)" if by[c].get("broken") else ""))
        ax4.annotate(c, (x, y), xytext=(6, 5 if k % 2 == 0 else -11), textcoords="offset points",
                     fontsize="x-small")
    top = max(max(by[c]["d_hr"] for c in order), max(by[c]["d_lr"] for c in order), 1e-12)
    ax4.plot([0, top], [0, top], "k--", alpha=0.3, label="equal degradation")
    ax4.set_xlabel("High-resource degradation" + (" (error bars: bootstrap CI over texts)" if _has_ci(by) else ""))
    ax4.set_ylabel("Low-resource degradation")
    ax4.set_title("HR vs LR degradation per configuration (above the diagonal: disparity)")
    ax4.legend(fontsize="x-small", loc="upper left")
    if max(by[c]["mean_degradation"] for c in order) > LOG_ABOVE:  # a broken model: spread the orders of magnitude
        for ax in (ax1, ax4):
            ax.set_xscale("symlog", linthresh=0.1)
            ax.set_xlim(left=0)
        for ax in (ax3, ax4):
            ax.set_yscale("symlog", linthresh=0.1)
            ax.set_ylim(bottom=0)
        ax1.set_xlabel(ax1.get_xlabel() + ", symlog scale")
    for ax in (ax1, ax2, ax3, ax4):
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{model}: layer ablation, {label}", fontweight="bold")
    return fig


def _layer_error(model: str, label: str, v: VariantSummary, resource: dict[str, str]) -> Figure:
    """Left: SQNR per layer (every token, and without each text's first token) with, on a second axis, the mean
    delta NLL of quantizing that layer alone per resource group (--sweep; else the weights' relative error).
    Right (--sweep): SQNR against that delta NLL, one point per layer, with Spearman's rho."""
    errors = v["layer_error"]
    layers = [e["layer"] for e in errors]
    sweep = v.get("sweep")
    fig, axes = figure(1, 2 if sweep else 1, size=(13 if sweep else 7, 4.8))
    ax = axes[0, 0]
    ax.plot(layers, [e["sqnr_db"] for e in errors], "o-", color="#34495e", label="SQNR, every token")
    ax.plot(layers, [e["sqnr_db_excl_pos0"] for e in errors], "s--", color="#7f8c8d", alpha=0.8,
            label="SQNR, first token left out")
    ax.set_xlabel("Decoder layer")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("SQNR of the layer's output (dB)")
    ax.grid(True, alpha=0.3)
    twin = ax.twinx()
    if sweep:
        for group, color in (("high", COLORS[0]), ("low", COLORS[3])):
            rows = [r for r in sweep if resource.get(r["lang"]) == group]
            by_layer = {layer: bits(np.mean([r["delta_nll"] for r in rows if r["layer"] == layer])) for layer in layers}
            if rows:
                twin.plot(layers, [by_layer[layer] for layer in layers], MARKERS[0] + ":", color=color,
                          label=f"delta NLL, only this layer ({group}-resource)")
        twin.set_ylabel("Mean delta NLL, only this layer quantized (bits/token)")
    else:
        twin.plot(layers, [e["weight_rel_err"] for e in errors], "^:", color=COLORS[4], label="weight relative error")
        twin.set_ylabel("||W - W_q|| / ||W||")
    handles = [h for a in (ax, twin) for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles, [h.get_label() for h in handles], fontsize="small", loc="best")
    ax.set_title("Each layer's own error (full-precision input) and its damage alone")
    if sweep:
        damage = {layer: bits(np.mean([r["delta_nll"] for r in sweep if r["layer"] == layer])) for layer in layers}
        right = axes[0, 1]
        x = [e["sqnr_db"] for e in errors]
        y = [damage[layer] for layer in layers]
        right.scatter(x, y, color="#34495e")
        for layer, xi, yi in zip(layers, x, y, strict=True):
            right.annotate(str(layer), (xi, yi), fontsize="x-small", xytext=(3, 2), textcoords="offset points")
        corr = v.get("sqnr_vs_sweep", {})
        rho = corr.get("rho")
        right.set_title("SQNR vs delta NLL per layer" + (f" (Spearman rho {rho:+.2f}, p = {corr['p']:.2g})"
                                                         if rho is not None else ""))
        right.set_xlabel("SQNR of the layer's output (dB)")
        right.set_ylabel("Mean delta NLL, only this layer quantized (bits/token)")
        right.grid(True, alpha=0.3)
    fig.suptitle(f"{model}: per-layer quantization error, {label} ({v.get('recipe', 'custom')} recipe, "
                 f"{v.get('bits', '?')}-bit)", fontweight="bold")
    return fig


def _heatmap(model: str, label: str, sweep: list[SweepRow], resource: dict[str, str]) -> Figure:
    layers = sorted({r["layer"] for r in sweep})
    langs = list(dict.fromkeys(r["lang"] for r in sweep))
    grid = np.full((len(layers), len(langs)), np.nan)
    for r in sweep:
        grid[layers.index(r["layer"]), langs.index(r["lang"])] = bits(r["delta_nll"])
    fig, axes = figure(1, 1, size=(1.2 * len(langs) + 3, 0.28 * len(layers) + 2))
    ax = axes[0, 0]
    bound = max(float(np.nanmax(np.abs(grid))), 1e-9)  # red: quantizing the layer hurts, blue: it helps
    image = ax.imshow(grid, aspect="auto", cmap="RdBu_r", vmin=-bound, vmax=bound)
    ax.set_xticks(range(len(langs)), [f"{lang}\n({resource.get(lang, '?')})" for lang in langs])
    ax.set_yticks(range(len(layers)), layers)
    ax.set_xlabel("Language")
    ax.set_ylabel("Only this layer quantized")
    ax.set_title(f"{model}: per-layer sensitivity ({label})\nmean NLL increase over baseline (bits/token)")
    fig.colorbar(image, ax=ax, label="delta NLL (bits/token)")
    return fig


def _has_ci(by: dict[str, ConfigRow]) -> bool:
    """Whether the rows carry bootstrap intervals (default mode; notebooks mode has none)."""
    return any(r.get("d_hr_ci") is not None for r in by.values())


def _errors(values: list[float], cis: list[list[float] | None]) -> np.ndarray | None:
    """(2, n) distances below and above each value for ``errorbar``/``barh`` (0 where there is no interval);
    None when no value has one."""
    if all(ci is None for ci in cis):
        return None
    lo = [v - ci[0] if ci is not None and np.isfinite(v) else 0.0 for v, ci in zip(values, cis, strict=False)]
    hi = [ci[1] - v if ci is not None and np.isfinite(v) else 0.0 for v, ci in zip(values, cis, strict=False)]
    return np.clip(np.array([lo, hi]), 0, None)
