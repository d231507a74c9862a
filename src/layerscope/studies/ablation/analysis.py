"""Ablation (seed 004): per-text perplexity under each layer configuration, degradation against
the unquantized baseline, and the high- vs low-resource disparity the notebook tests (H5).

    scored = add_degradation(per_text)      # DataFrame: config, lang, resource, sample, nll, ppl
    per_config = disparity_table(scored)    # d_hr, d_lr, disparity ratio (or why it is undefined)
    verdicts(per_config)                    # H5, first vs second half, synergy
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...study.finite import check_rows
from .summary import ConfigRow, Verdicts

MIN_HR_DEGRADATION = 0.001
H5_THRESHOLD = 30.0
BROKEN_PPL_RATIO = 100.0
"""Default mode: a configuration that multiplies the median text's perplexity by more than this no longer works
as a language model; its degradations measure the breakage, so it gets no disparity ratio and no reduction
("model broken, undetermined"). Notebooks mode keeps the notebook's numbers whatever the perplexity."""
SCORES = ("ppl", "degradation", "delta_nll")
VERDICT_METRICS = (*SCORES, "d_hr", "d_lr")
"""Table metrics H5, the halves, synergy and the sweep's most sensitive layers are computed from
(``disparity_ratio`` and ``reduction_pct`` are absent by design when ``disparity_note`` says why)."""


def add_degradation(per_text: pd.DataFrame) -> pd.DataFrame:
    """Adds ``degradation`` = (ppl - baseline ppl) / baseline ppl, clipped at 0 as in the notebook,
    and ``delta_nll`` = mean NLL - baseline mean NLL (meaningful even when ppl explodes)."""
    base = per_text[per_text["config"] == "baseline"].set_index(["lang", "sample"])
    key = pd.MultiIndex.from_frame(per_text[["lang", "sample"]])
    out = per_text.copy()
    base_ppl, base_nll = base["ppl"].reindex(key).to_numpy(), base["nll"].reindex(key).to_numpy()
    out["degradation"] = np.clip((out["ppl"].to_numpy() - base_ppl) / base_ppl, 0, None)
    out["delta_nll"] = out["nll"].to_numpy() - base_nll
    return out


def check_scored(model: str, scored: pd.DataFrame) -> pd.DataFrame:
    """``scored`` (from :func:`add_degradation`), once every ppl, degradation and delta_nll is finite; else
    ``NonFiniteError`` naming the model, configuration, layer, language and text. Call it before any verdict."""
    values = scored[list(SCORES)].to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        r = scored.iloc[i]
        layer = int(r["config"].removeprefix("only_L")) if r["config"].startswith("only_L") else None
        check_rows("ablation", [{"model": model, "layer": layer, "metric": SCORES[j], "value": values[i, j],
                                 "variant": r["variant"], "config": r["config"], "lang": r["lang"],
                                 "sample": r["sample"]}])
    return scored


def disparity(d_hr: float, d_lr: float) -> tuple[float | None, str | None]:
    """D_LR / D_HR, or None with the reason when the high-resource degradation is too small."""
    if not (math.isfinite(d_hr) and math.isfinite(d_lr)):  # a bug: check_scored comes first
        raise ValueError(f"disparity of non-finite degradations {d_hr}, {d_lr}")
    if not d_hr > MIN_HR_DEGRADATION:
        return None, (f"high-resource degradation {d_hr:.2e} is below {MIN_HR_DEGRADATION}: "
                      "the ratio would divide by (almost) zero")
    return d_lr / d_hr, None


def disparity_table(scored: pd.DataFrame, order: list[str], broken_above: float | None = None) -> list[ConfigRow]:
    """``disparity_table(scored, names)``: per configuration d_hr, d_lr, disparity ratio and reduction against
    all_quantized, as the notebook computes them. With ``broken_above`` (default mode: ``BROKEN_PPL_RATIO``) each
    row also has ``median_ppl_ratio`` and ``broken``; a broken row's ratio and reduction are None with the reason."""
    ppl_ratio = median_ppl_ratios(scored) if broken_above is not None else {}
    rows = []
    for name in order:
        group = scored[scored["config"] == name]
        hr, lr = group[group["resource"] == "high"], group[group["resource"] == "low"]
        d_hr, d_lr = float(hr["degradation"].mean()), float(lr["degradation"].mean())
        ratio, why = disparity(d_hr, d_lr)
        extra = {}
        if broken_above is not None:
            blowup = ppl_ratio.get(name)
            extra = {"median_ppl_ratio": blowup, "broken": blowup is not None and blowup > broken_above}
            if extra["broken"]:
                ratio, why = None, f"model broken (median perplexity x{blowup:.4g} of baseline > {broken_above:g}x)"
        rows.append({  # n_quantized is the same on every text's row of the configuration
            "config": name, "n_quantized": int(group["n_quantized"].iloc[0]),
            "mean_ppl": float(group["ppl"].mean()), "mean_degradation": float(group["degradation"].mean()),
            "std_degradation": float(group["degradation"].std(ddof=1)) if len(group) > 1 else 0.0,
            "d_hr": d_hr, "d_lr": d_lr, "disparity_ratio": ratio, "disparity_note": why,
            "disparity_diff": d_lr - d_hr,
            "delta_nll_hr": float(hr["delta_nll"].mean()), "delta_nll_lr": float(lr["delta_nll"].mean()), **extra,
        })
    by_name = {r["config"]: r for r in rows}
    reference = by_name.get("all_quantized", {}).get("disparity_ratio")
    for row in rows:
        row["reduction_pct"], row["reduction_note"] = reduction(reference, row["disparity_ratio"])
        if row.get("broken") or by_name.get("all_quantized", {}).get("broken"):
            row["reduction_note"] = "model broken, undetermined"
    return rows


def reduction(all_quantized: float | None, ratio: float | None) -> tuple[float | None, str | None]:
    """(ratio_all - ratio) / ratio_all in percent, or None with the reason."""
    if all_quantized is None or ratio is None:
        return None, "a disparity ratio is undefined"
    if all_quantized <= 0:
        return None, "the all-quantized disparity ratio is not positive"
    return (all_quantized - ratio) / all_quantized * 100, None


def verdicts(per_config: list[ConfigRow]) -> Verdicts:
    """The notebook's rule (notebooks mode), on the point estimates: H5 (reduction > 30%), the halves, synergy."""
    by = {r["config"]: r for r in per_config}
    ratio = {name: r["disparity_ratio"] for name, r in by.items()}
    out: dict = {}
    gateway = by.get("gateway_protected")
    if gateway is None:
        out["h5"] = {"result": "UNDETERMINED", "reason": "no gateway_protected configuration"}
    elif gateway["reduction_pct"] is None:
        out["h5"] = {"result": "UNDETERMINED", "reason": gateway["reduction_note"]}
    else:
        supported = gateway["reduction_pct"] > H5_THRESHOLD
        out["h5"] = {"result": "SUPPORTED" if supported else "NOT_SUPPORTED", "reduction_pct": gateway["reduction_pct"],
                     "all_quantized_ratio": ratio.get("all_quantized"), "gateway_ratio": gateway["disparity_ratio"]}
    first, second = by.get("first_half_protected"), by.get("second_half_protected")
    if first and second:
        f, s = first["disparity_ratio"], second["disparity_ratio"]
        out["halves"] = {
            "first_half_protected_ratio": f, "second_half_protected_ratio": s,
            "more_critical_for_disparity": None if f is None or s is None else ("early" if f < s else "late"),
            "first_half_protected_degradation": first["mean_degradation"],
            "second_half_protected_degradation": second["mean_degradation"],
            "more_critical_for_degradation":
                "early" if first["mean_degradation"] < second["mean_degradation"] else "late",
        }
    names = ("first_protected", "last_protected", "all_quantized", "gateway_protected")
    if all(n in ratio for n in names):
        values = [ratio[n] for n in names]
        if any(v is None for v in values):
            out["synergy"] = {"synergistic": None, "reason": "a disparity ratio is undefined"}
        else:
            first_only, last_only, all_q, gate = values
            expected = first_only + last_only - all_q
            out["synergy"] = {"expected_additive": expected, "gateway": gate, "synergistic": gate < expected}
    return out


def median_ppl_ratio(scored: pd.DataFrame, config: str = "all_quantized") -> float | None:
    """Median over texts of ppl(config) / ppl(baseline): how many-fold the configuration
    multiplies a typical text's perplexity (None when the configuration was not run)."""
    return median_ppl_ratios(scored).get(config)


def median_ppl_ratios(scored: pd.DataFrame) -> dict[str, float]:
    """{config: :func:`median_ppl_ratio`} for every configuration of ``scored`` ({} without a baseline)."""
    ppl = scored.pivot_table(index=["lang", "sample"], columns="config", values="ppl")
    if "baseline" not in ppl:
        return {}
    return {str(c): float(np.median(ppl[c] / ppl["baseline"])) for c in ppl.columns}


def sweep_table(scored: pd.DataFrame) -> pd.DataFrame:
    """Per swept layer and language: mean degradation and mean delta NLL of 'only layer i quantized'."""
    sweep = scored[scored["config"].str.startswith("only_L")].copy()
    sweep["layer"] = sweep["config"].str.removeprefix("only_L").astype(int)
    means = sweep.groupby(["layer", "lang"], sort=False)[["degradation", "delta_nll"]].mean().reset_index()
    return means.sort_values("layer", kind="stable", ignore_index=True)  # languages stay in file order


def finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x
