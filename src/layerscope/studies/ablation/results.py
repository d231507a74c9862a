"""One model's ablation summary and tidy table rows, from what the runner scored.

    summary, rows = analyse_model("smollm2-135m", 30, scores, list(configs), variants, config)

Per variant: the per-configuration table and verdicts (:mod:`.inference`), the sweep, and the per-layer
quantization error (SQNR, weight error) beside it. Table metrics: ``ppl``, ``degradation``, ``delta_nll`` per
text; ``d_hr``, ``d_lr``, ``disparity_ratio``, ``reduction_pct``, ``median_ppl_ratio`` per configuration;
``sqnr_db``, ``sqnr_db_excl_pos0`` (per layer, over every text and per language) and ``weight_rel_err`` per layer.
Every row names its ``scheme``, ``targets``, ``recipe`` and ``bits``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from ...study.config import StudyConfig
from .analysis import add_degradation, check_scored, median_ppl_ratio, sweep_table
from .configs import Variant
from .inference import variant_verdicts
from .runner import Scores
from .summary import AblationModel, LayerError, SqnrVsSweep, VariantSummary

LAYER_METRICS = ("sqnr_db", "sqnr_db_excl_pos0", "weight_rel_err")

CI = {"d_hr": "d_hr_ci", "d_lr": "d_lr_ci", "disparity_ratio": "disparity_ci"}
"""The per-configuration interval of each table metric (default mode)."""


def analyse_model(model: str, n: int, scores: Scores, order: list[str], variants: list[Variant],
                  config: StudyConfig) -> tuple[AblationModel, list[dict]]:
    """``summary, rows = analyse_model(name, n_layers, scores, list(configs), variants, config)``."""
    per_text = scores.per_text
    rows: list[dict] = []
    out: AblationModel = {"n_layers": n, "variants": {}, "prefix_reuse": scores.reuse}
    resource = dict(zip(per_text["lang"], per_text["resource"], strict=False))
    for variant in variants:
        how = {"scheme": variant.scheme, "targets": variant.targets, "recipe": variant.recipe, "bits": variant.bits}
        scored = check_scored(model, add_degradation(per_text[per_text["variant"] == variant.label]))
        names = [c for c in order if c in set(scored["config"])]
        per_config, verdicts = variant_verdicts(scored, names, config.compat, config.ci_level, config.n_bootstrap,
                                                config.seed)
        errors = scores.layer_error[scores.layer_error["variant"] == variant.label] if len(scores.layer_error) else \
            pd.DataFrame(columns=["layer", "lang", *LAYER_METRICS])
        overall = errors[errors["lang"].isna()].sort_values("layer")
        entry: VariantSummary = {**how, "per_config": per_config, "verdicts": verdicts,
                                 "all_quantized_ppl_ratio": median_ppl_ratio(scored),
                                 "layer_error": [_layer_error(r) for r in overall.itertuples()]}
        if variant.sweep:
            sweep = sweep_table(scored)
            entry["sweep"] = sweep.to_dict(orient="records")
            entry["most_sensitive_layer"] = {lang: int(g.loc[g["delta_nll"].idxmax(), "layer"])
                                             for lang, g in sweep.groupby("lang")}
            entry["sqnr_vs_sweep"] = sqnr_vs_sweep(overall, scored)
        out["variants"][variant.label] = entry
        for r in scored.itertuples():
            layer = int(r.config.removeprefix("only_L")) if r.config.startswith("only_L") else None
            common = {"model": model, "layer": layer, "n_layers": n if layer is not None else None,
                      "depth": layer / n if layer is not None else None, "config": r.config, "lang": r.lang,
                      "resource": r.resource, "sample": r.sample, **how, "n": r.n_scored}
            rows += [{**common, "metric": m, "value": getattr(r, m)} for m in ("ppl", "degradation", "delta_nll")]
        for c in per_config:
            rows += [{"model": model, "config": c["config"], **how, "metric": m, "value": c[m],
                      **_interval(c.get(CI.get(m, ""), False))}
                     for m in ("d_hr", "d_lr", "disparity_ratio", "reduction_pct", "median_ppl_ratio") if m in c]
        for r in errors.itertuples():
            lang = None if not isinstance(r.lang, str) else r.lang
            common = {"model": model, "layer": int(r.layer), "n_layers": n, "depth": r.layer / n, "config": None,
                      "lang": lang, "resource": resource.get(lang), **how}
            rows += [{**common, "metric": m, "value": getattr(r, m)} for m in LAYER_METRICS
                     if lang is None or m != "weight_rel_err"]
    return out, rows


def _layer_error(r) -> LayerError:
    return {"layer": int(r.layer), "sqnr_db": float(r.sqnr_db), "sqnr_db_excl_pos0": float(r.sqnr_db_excl_pos0),
            "weight_rel_err": float(r.weight_rel_err)}


def sqnr_vs_sweep(overall: pd.DataFrame, scored: pd.DataFrame) -> SqnrVsSweep:
    """Spearman correlation, over the swept layers, of each layer's SQNR with the mean delta NLL over every text
    of quantizing that layer alone (a fragile layer: low SQNR, large delta NLL, so rho < 0 when SQNR predicts it)."""
    sweep = scored[scored["config"].str.startswith("only_L")]
    damage = sweep.groupby(sweep["config"].str.removeprefix("only_L").astype(int))["delta_nll"].mean()
    both = overall.set_index("layer").join(damage.rename("delta_nll"), how="inner")
    out: SqnrVsSweep = {"n_layers": len(both)}
    for suffix, column in (("", "sqnr_db"), ("_excl_pos0", "sqnr_db_excl_pos0")):
        x, y = both[column].to_numpy(dtype=float), both["delta_nll"].to_numpy(dtype=float)
        ok = np.isfinite(x) & np.isfinite(y)
        rho = p = None
        if ok.sum() >= 3 and np.ptp(x[ok]) > 0 and np.ptp(y[ok]) > 0:
            res = spearmanr(x[ok], y[ok])
            rho, p = float(res.statistic), float(res.pvalue)
        out[f"rho{suffix}"], out[f"p{suffix}"] = (None if rho is None or not math.isfinite(rho) else rho), p
    return out


def _interval(ci: list[float] | None | bool) -> dict:
    """Table columns ``ci_lo``, ``ci_hi`` for a bootstrap interval (None: not computed); {} where the summary
    has no interval for the metric (notebooks mode, reduction_pct)."""
    if ci is False:
        return {}
    return {"ci_lo": None, "ci_hi": None} if ci is None else {"ci_lo": ci[0], "ci_hi": ci[1]}
