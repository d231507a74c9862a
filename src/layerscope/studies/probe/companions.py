"""What the probe figure draws beside its own profiles when the same run has divergence and surgery results.

    join(result, {"divergence": div_result, "surgery": surgery_result})   # a suite calls Probe.join for it
    result.summary["models"][model]["companions"]
    # {"divergence_ua": {"states": [...], "values": [...], "what": ...},
    #  "surgery_skip": {"blocks": [...], "values": [...], "ci_lo": [...], "ci_hi": [...], "what": ...}}

- ``divergence_ua``: the divergence study's UA (embedding geometry vs output preference) per hidden state, mean
  pooling, every pair (subset ``all``), the mean over its categories; its states are the probe's (0 = embeddings,
  L = the last block's output before the final norm).
- ``surgery_skip``: the surgery study's cost of skipping block b alone, the mean NLL change over its texts (every
  language) with its interval; block b maps state b to state b + 1, so the figure draws it between them.

The values are copied into the probe's own summary, so the figure is drawn again from the probe's result alone.
A model the other study did not run, or a table without those rows (other settings), adds nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...report.plotting import COLORS, zero_line
from ...study.result import StudyResult

COMPANIONS = ("divergence", "surgery")


def _floats(values) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(values, dtype=float)]


def divergence_ua(table: pd.DataFrame, model: str) -> dict | None:
    need = {"model", "layer", "metric", "value", "pooling", "subset"}
    if not need <= set(table.columns):
        return None
    rows = table[(table["model"] == model) & (table["metric"] == "ua") & (table["pooling"] == "mean")
                 & (table["subset"] == "all")]
    if "stage" in rows.columns:
        rows = rows[rows["stage"].isna() | (rows["stage"] == "pre_norm")]
    per_state = rows.dropna(subset=["layer"]).groupby("layer")["value"].mean()
    if per_state.empty:
        return None
    return {"states": [int(s) for s in per_state.index], "values": _floats(per_state.to_numpy()),
            "what": "divergence: UA (mean pooling, mean over categories)"}


def surgery_skip(table: pd.DataFrame, model: str) -> dict | None:
    need = {"model", "layer", "metric", "value", "intervention", "lang", "ci_lo", "ci_hi"}
    if not need <= set(table.columns):
        return None
    rows = table[(table["model"] == model) & (table["intervention"] == "skip") & (table["metric"] == "delta_nll")
                 & (table["lang"] == "all")].dropna(subset=["layer"]).sort_values("layer")
    if rows.empty:
        return None
    return {"blocks": [int(b) for b in rows["layer"]], "values": _floats(rows["value"]),
            "ci_lo": _floats(rows["ci_lo"]), "ci_hi": _floats(rows["ci_hi"]),
            "what": "surgery: NLL change when the block is skipped"}


def join(result: StudyResult, others: dict[str, StudyResult]) -> None:
    """Copy divergence's UA and surgery's skip cost per model into ``result.summary`` (see the module docstring)."""
    readers = {"divergence": ("divergence_ua", divergence_ua), "surgery": ("surgery_skip", surgery_skip)}
    for model, s in result.summary.get("models", {}).items():
        found = {}
        for study, (key, read) in readers.items():
            other = others.get(study)
            entry = read(other.table, model) if other is not None and other.table is not None else None
            if entry is not None:
                found[key] = entry
        if found:
            s["companions"] = found


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
