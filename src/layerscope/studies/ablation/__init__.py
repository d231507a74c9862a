"""Ablation study (seed 004): fake-quantize chosen decoder layers and measure per-language
perplexity; which layers matter most for low-resource languages (disparity, H5).

    result = Ablation().run(StudyConfig(study="ablation", sweep=True))
    s: AblationSummary = result.summary          # what each key holds: .summary
    Ablation().headline(result)   # per model and variant: H5 with its interval, leave-one-language-out, robustness
"""

from __future__ import annotations

from dataclasses import dataclass

from ...data.languages import load_languages
from ...errors import short
from ...models import decoder_layers
from ...quant.fake import parse_scheme
from ..base import Study
from ..caveats import MIN_N, group_warnings
from ..config import StudyConfig
from ..manifest import manifest, model_entry
from ..registry import register_study
from ..result import StudyResult, make_table
from ..runner import each_model
from ..settings import ConfigError, Settings, by_compat, check_n_bootstrap, setting
from .analysis import VERDICT_METRICS, add_degradation, check_scored, median_ppl_ratio, sweep_table
from .configs import load_configs, read_configs, standard_configs, sweep_configs
from .figures import figures as draw_figures
from .inference import variant_verdicts
from .report import report as write_report
from .runner import Variant, score_configs
from .summary import AblationModel, AblationSummary, H5Verdict, VariantSummary, config_row

NOTEBOOK = ("per-tensor", "all-weights")
SEED_MAX_LENGTH = 256  # the notebook truncates every text to 256 tokens


@dataclass(frozen=True)
class AblationSettings(Settings):
    texts: str | None = setting("JSON {lang: {\"resource\": \"high\"|\"low\", \"texts\": [...]}}; default: the "
                                "bundled texts (8 languages).", file=True)
    bits: int = setting("Bits of the symmetric fake quantization.", default=4)
    configs: str = setting("'standard' (the notebook's 8 layer sets) or a JSON file mapping each configuration's "
                           "name to the list of layers it quantizes.", default="standard", file=True,
                           keywords=("standard",))
    sweep: bool = setting("Also quantize one layer at a time, every layer.", default=False)
    scheme: str | None = setting("per-tensor, per-channel or group:N. Default: per-channel (seed compat: "
                                 "per-tensor).")
    targets: str | None = setting("'linear' (linear-layer weights) or 'all-weights' (every weight, norms "
                                  "included). Default: linear (seed compat: all-weights).")
    n_bootstrap: int = setting("Bootstrap resamples for confidence intervals.", default=10_000)

    def __post_init__(self):
        super().__post_init__()
        if not 2 <= self.bits <= 16:
            raise ConfigError(f"--bits {self.bits} is not usable; symmetric quantization needs 2 to 16 bits")
        if self.scheme is not None:
            parse_scheme(self.scheme)
        if self.targets not in (None, "linear", "all-weights"):
            raise ConfigError(f"unknown --targets {short(self.targets)}; use linear or all-weights")
        check_n_bootstrap(self.n_bootstrap)

    @by_compat
    def quant_scheme(self, compat: str | None) -> str:
        return self.scheme or ("per-tensor" if compat == "seed" else "per-channel")

    @by_compat
    def quant_targets(self, compat: str | None) -> str:
        return self.targets or ("all-weights" if compat == "seed" else "linear")


@register_study
class Ablation(Study):
    name = "ablation"
    title = "Ablation"
    question = ("Which decoder layers matter most when quantized, per language, and does protecting the "
                "first and last ('gateway') layers cut the low- vs high-resource disparity by > 30% (H5)?")
    Settings = AblationSettings
    order = 50
    compat_notes = (("per-tensor scale, every parameter named 'weight' (norms included), texts cut at 256 tokens",
                     "per-channel scale on linear weights, full texts; the notebook's scheme is run beside it"),)
    verdict_metrics = VERDICT_METRICS

    def check_inputs(self, config: StudyConfig) -> None:
        load_languages(config.texts)
        if config.configs != "standard":
            read_configs(config.configs)  # the layer range is checked once the model is loaded

    def main_view(self, config: StudyConfig) -> dict:
        return {"subset": "all", "scheme": config.quant_scheme, "targets": config.quant_targets}

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
        for run in each_model(config, timings):
            lm = run.lm
            n = len(decoder_layers(lm.model))
            configs = standard_configs(n) if config.configs == "standard" else load_configs(config.configs, n)
            if config.sweep:
                configs.update(sweep_configs(n))
            per_text = score_configs(lm, languages, configs, variants, config.bits, config.batch_size, max_length)
            run.mark("extract_s")
            del lm
            info = run.release()
            summaries[info.name], model_rows = analyse_model(info.name, n, per_text, list(configs), variants, config)
            rows += model_rows
            models.append(model_entry(info))
            run.mark("analysis_s")
        dataset = {"kind": "languages", "source": languages.source, "hash": languages.hash,
                   "languages": {lang.code: lang.resource for lang in languages.languages}}
        summary: AblationSummary = {"bits": config.bits, "primary": primary.label, "models": summaries,
                                    "warnings": group_warnings(len(languages.high), len(languages.low))}
        record = manifest(config, models, dataset, timings, max_length=max_length)
        return StudyResult(study=self.name, config=config.to_dict(), manifest=record, summary=summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """With every layer quantized (primary scheme): median perplexity ratio, mean degradation of the high-
        and low-resource languages, and their disparity ratio."""
        summary: AblationSummary = result.summary
        v = summary["models"][model]["variants"][summary["primary"]]
        allq = config_row(v, "all_quantized")
        out = {"all_quantized_ppl_ratio": v["all_quantized_ppl_ratio"]}
        if allq is not None:
            out.update(d_hr=allq["d_hr"], d_lr=allq["d_lr"], disparity_ratio=allq["disparity_ratio"])
        return {k: float("nan") if x is None else x for k, x in out.items()}

    def headline(self, result: StudyResult) -> list[str]:
        """One line per model and variant: the H5 verdict with its interval, leave-one-language-out range and
        robustness (seed compat: the notebook's rule), and the number of languages when a group has < 10."""
        seed = result.config.get("compat") == "seed"
        caveat = _languages_caveat(result.manifest.get("dataset", {}).get("languages", {}))
        lines = []
        summary: AblationSummary = result.summary
        for model, s in summary["models"].items():
            for label, v in s["variants"].items():
                h5 = v["verdicts"]["h5"]
                detail = h5_detail(h5, seed)
                lines.append(f"{model} [{label}]: H5 {h5['result']} ({detail}){caveat}")
        return lines


def h5_detail(h5: H5Verdict, seed: bool) -> str:
    """What the H5 verdict rests on, in words: ``"+12.3% reduction, 95% CI [+4.1, +20.2]%, threshold 30%;
    leave-one-language-out +8.0% to +15.1%; robust to leaving out any one of 8 languages"``."""
    if h5.get("reduction_pct") is None:
        return h5.get("reason", "")
    if seed or "ci" not in h5:
        return f"{h5['reduction_pct']:.1f}% reduction" + ("; the notebook's rule: > 30%, no interval" if seed else "")
    lo, hi = h5["ci"]
    lolo = h5.get("lolo_range")
    return (f"{h5['reduction_pct']:+.1f}% reduction, {h5['level']:.0%} CI [{lo:+.1f}, {hi:+.1f}]%, threshold "
            f"{h5['threshold']:g}%; leave-one-language-out "
            + (f"{lolo[0]:+.1f}% to {lolo[1]:+.1f}%" if lolo else "undefined") + f"; {h5['short_robustness']}")


def _languages_caveat(languages: dict[str, str]) -> str:
    """``" (n = 4 HR / 4 LR languages)"`` when a group has fewer than ``MIN_N`` languages, else ``""``."""
    n_high = sum(r == "high" for r in languages.values())
    n_low = sum(r == "low" for r in languages.values())
    return f" (n = {n_high} HR / {n_low} LR languages)" if languages and min(n_high, n_low) < MIN_N else ""


def analyse_model(model: str, n: int, per_text, order: list[str], variants: list[Variant],
                  config: StudyConfig) -> tuple[AblationModel, list[dict]]:
    """``summary, rows = analyse_model(name, n_layers, per_text, list(configs), variants, config)``: one model's
    summary (per variant: per-configuration table, verdicts, sweep) and table rows, from the runner's per-text
    frame (config, variant, lang, resource, sample, n_quantized, nll, n_scored, ppl)."""
    rows: list[dict] = []
    out: AblationModel = {"n_layers": n, "variants": {}}
    for variant in variants:
        scored = check_scored(model, add_degradation(per_text[per_text["variant"] == variant.label]))
        names = [c for c in order if c in set(scored["config"])]
        per_config, verdicts = variant_verdicts(scored, names, config.compat, config.ci_level, config.n_bootstrap,
                                                config.seed)
        entry: VariantSummary = {"scheme": variant.scheme, "targets": variant.targets, "per_config": per_config,
                                 "verdicts": verdicts, "all_quantized_ppl_ratio": median_ppl_ratio(scored)}
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
                      "metric": m, "value": c[m], **_interval(c.get(CI.get(m, ""), False))}
                     for m in ("d_hr", "d_lr", "disparity_ratio", "reduction_pct", "median_ppl_ratio") if m in c]
    return out, rows


CI = {"d_hr": "d_hr_ci", "d_lr": "d_lr_ci", "disparity_ratio": "disparity_ci"}
"""The per-configuration interval of each table metric (default mode)."""


def _interval(ci: list[float] | None | bool) -> dict:
    """Table columns ``ci_lo``, ``ci_hi`` for a bootstrap interval (None: not computed); {} where the summary
    has no interval for the metric (seed compat, reduction_pct)."""
    if ci is False:
        return {}
    return {"ci_lo": None, "ci_hi": None} if ci is None else {"ci_lo": ci[0], "ci_hi": ci[1]}
