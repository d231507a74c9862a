"""Ablation study (seed 004): fake-quantize chosen decoder layers and measure per-language
perplexity; which layers matter most for low-resource languages (disparity, H5)."""

from __future__ import annotations

import time

from ...data.languages import load_languages
from ...models import decoder_layers, load_model
from ..base import Study
from ..config import StudyConfig
from ..controls import group_warnings
from ..inputs import free_memory
from ..manifest import add_timings, manifest, model_entry
from ..result import StudyResult, make_table
from .analysis import add_degradation, check_scored, disparity_table, median_ppl_ratio, sweep_table, verdicts
from .configs import load_configs, standard_configs, sweep_configs
from .figures import figures as draw_figures
from .report import report as write_report
from .runner import Variant, score_configs

NOTEBOOK = ("per-tensor", "all-weights")
SEED_MAX_LENGTH = 256  # the notebook truncates every text to 256 tokens


class Ablation(Study):
    name = "ablation"
    title = "Ablation"
    question = ("Which decoder layers matter most when quantized, per language, and does protecting the "
                "first and last ('gateway') layers cut the low- vs high-resource disparity by > 30% (H5)?")

    def run(self, config: StudyConfig) -> StudyResult:
        languages = load_languages(config.texts)
        primary = Variant(f"{config.quant_scheme}/{config.quant_targets}", config.quant_scheme,
                          config.quant_targets, config.sweep)
        variants = [primary]
        if (config.quant_scheme, config.quant_targets) != NOTEBOOK:
            variants.append(Variant("per-tensor/all-weights (notebook)", *NOTEBOOK, sweep=False))
        max_length = config.max_length or (SEED_MAX_LENGTH if config.compat == "seed" else None)  # explicit wins
        timings: dict[str, float] = {}
        summaries, rows, models = {}, [], []
        for spec in config.models:
            start = time.perf_counter()
            lm = load_model(spec, dtype=config.dtype, device=config.device, device_map=config.device_map)
            n = len(decoder_layers(lm.model))
            configs = standard_configs(n) if config.configs == "standard" else load_configs(config.configs, n)
            if config.sweep:
                configs.update(sweep_configs(n))
            loaded = time.perf_counter()
            per_text = score_configs(lm, languages, configs, variants, config.bits, config.batch_size, max_length)
            scored_at = time.perf_counter()
            info = lm.info
            del lm
            free_memory()
            summaries[info.name], model_rows = _analyse(info.name, n, per_text, list(configs), variants)
            rows += model_rows
            models.append(model_entry(info))
            add_timings(timings, load_s=loaded - start, extract_s=scored_at - loaded,
                        analysis_s=time.perf_counter() - scored_at)
        dataset = {"kind": "languages", "source": languages.source, "hash": languages.hash,
                   "languages": {lang.code: lang.resource for lang in languages.languages}}
        summary = {"bits": config.bits, "primary": primary.label, "models": summaries,
                   "warnings": group_warnings(len(languages.high), len(languages.low))}
        record = manifest(config, models, dataset, timings, max_length=max_length)
        return StudyResult(study=self.name, config=config.to_dict(), manifest=record, summary=summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """With every layer quantized (primary scheme): median perplexity ratio, mean degradation of the high-
        and low-resource languages, and their disparity ratio."""
        v = result.summary["models"][model]["variants"][result.summary["primary"]]
        allq = next((c for c in v["per_config"] if c["config"] == "all_quantized"), None)
        out = {"all_quantized_ppl_ratio": v["all_quantized_ppl_ratio"]}
        if allq is not None:
            out.update(d_hr=allq["d_hr"], d_lr=allq["d_lr"], disparity_ratio=allq["disparity_ratio"])
        return {k: float("nan") if x is None else x for k, x in out.items()}

    def headline(self, result: StudyResult) -> list[str]:
        lines = []
        for model, s in result.summary["models"].items():
            for label, v in s["variants"].items():
                h5 = v["verdicts"]["h5"]
                detail = (f"{h5['reduction_pct']:.1f}% reduction" if h5.get("reduction_pct") is not None
                          else h5.get("reason", ""))
                lines.append(f"{model} [{label}]: H5 {h5['result']} ({detail})")
        return lines


def _analyse(model: str, n: int, per_text, order: list[str], variants: list[Variant]) -> tuple[dict, list[dict]]:
    rows, out = [], {"n_layers": n, "variants": {}}
    for variant in variants:
        scored = check_scored(model, add_degradation(per_text[per_text["variant"] == variant.label]))
        names = [c for c in order if c in set(scored["config"])]
        per_config = disparity_table(scored, names)
        entry = {"scheme": variant.scheme, "targets": variant.targets, "per_config": per_config,
                 "verdicts": verdicts(per_config), "all_quantized_ppl_ratio": median_ppl_ratio(scored)}
        if variant.sweep:
            sweep = sweep_table(scored)
            entry["sweep"] = sweep.to_dict(orient="records")
            entry["most_sensitive_layer"] = {lang: int(g.loc[g["delta_nll"].idxmax(), "layer"])
                                             for lang, g in sweep.groupby("lang")}
        out["variants"][variant.label] = entry
        for r in scored.itertuples():
            layer = int(r.config.removeprefix("only_L")) if r.config.startswith("only_L") else None
            common = {"model": model, "layer": layer, "n_layers": n if layer is not None else None,
                      "depth": layer / n if layer is not None else None, "config": r.config, "lang": r.lang,
                      "resource": r.resource, "sample": r.sample, "scheme": variant.scheme,
                      "targets": variant.targets, "n": r.n_scored}
            rows += [{**common, "metric": m, "value": getattr(r, m)} for m in ("ppl", "degradation", "delta_nll")]
        for c in per_config:
            rows += [{"model": model, "config": c["config"], "scheme": variant.scheme, "targets": variant.targets,
                      "metric": m, "value": c[m]} for m in ("d_hr", "d_lr", "disparity_ratio", "reduction_pct")]
    return out, rows
