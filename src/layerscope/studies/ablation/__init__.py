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
from ...modes import NOTEBOOKS
from ...quant import RECIPES, recipe_for
from ...quant.fake import parse_scheme
from ...study.base import Study
from ...study.config import StudyConfig
from ...study.manifests import manifest, model_entry
from ...study.per_model import each_model
from ...study.registry import register_study
from ...study.result import StudyResult, make_table
from ...study.settings import ConfigError, Settings, by_compat, check_n_bootstrap, setting
from ..shared.caveats import MIN_N, group_warnings, prequantized_warnings
from .analysis import VERDICT_METRICS
from .claims import claims as study_claims
from .configs import LayerConfig, load_configs, read_configs, standard_configs, sweep_configs
from .figures import figures as draw_figures
from .report import report as write_report
from .results import analyse_model
from .runner import PREFIX_BUDGET_GIB, Variant, score_configs
from .summary import AblationSummary, H5Verdict, config_row

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
    recipe: str | None = setting("How to quantize: notebook (per-tensor, every weight), per-channel (linear weights), "
                                 "group128 (128 inputs per scale, linear weights) or int8 (8-bit per-channel); the "
                                 "README lists each one's source. Default: per-channel (notebooks mode: notebook).")
    scheme: str | None = setting("per-tensor, per-channel or group:N, in place of the recipe's. Default: the "
                                 "recipe's.")
    targets: str | None = setting("'linear' (linear-layer weights) or 'all-weights' (every weight, norms "
                                  "included), in place of the recipe's. Default: the recipe's.")
    prefix_reuse: bool = setting("Start each configuration's forward pass at its first changed layer, from the "
                                 "residual stream an earlier pass kept there (same numbers, less compute).",
                                 default=True)
    prefix_budget_gib: float = setting("Host memory (GiB) for the residual streams prefix reuse keeps; a pass "
                                       "whose stream does not fit runs whole.", default=PREFIX_BUDGET_GIB)
    n_bootstrap: int = setting("Bootstrap resamples for confidence intervals.", default=10_000)

    def __post_init__(self):
        super().__post_init__()
        if not 2 <= self.bits <= 16:
            raise ConfigError(f"--bits {self.bits} is not usable; symmetric quantization needs 2 to 16 bits")
        if self.recipe is not None and self.recipe not in RECIPES:
            raise ConfigError(f"unknown --recipe {short(self.recipe)}; use one of {', '.join(RECIPES)}")
        if self.scheme is not None:
            parse_scheme(self.scheme)
        if self.targets not in (None, "linear", "all-weights"):
            raise ConfigError(f"unknown --targets {short(self.targets)}; use linear or all-weights")
        if self.recipe is not None:
            r = RECIPES[self.recipe]
            for option, given, fixed in (("scheme", self.scheme, r.scheme), ("targets", self.targets, r.targets)):
                if given is not None and given != fixed:
                    raise ConfigError(f"--recipe {r.name} quantizes with --{option} {fixed}, not {given}; leave out "
                                      f"--{option}, or leave out --recipe and give --scheme and --targets")
            if r.bits is not None and self.bits not in (4, r.bits):
                raise ConfigError(f"--recipe {r.name} quantizes to {r.bits} bits, not {self.bits}; leave out --bits")
        if not self.prefix_budget_gib >= 0:
            raise ConfigError(f"--prefix-budget-gib {self.prefix_budget_gib} must be 0 or more (0: no stream kept)")
        check_n_bootstrap(self.n_bootstrap)

    def _recipe(self, compat: str | None):
        return RECIPES[self.recipe or ("notebook" if compat == NOTEBOOKS else "per-channel")]

    @by_compat
    def quant_recipe(self, compat: str | None) -> str:
        """The recipe's name; "custom" when --scheme/--targets make one no recipe has."""
        if self.recipe is not None:
            return self.recipe
        return recipe_for(self.quant_scheme(compat), self.quant_targets(compat))

    @by_compat
    def quant_bits(self, compat: str | None) -> int:
        return self._recipe(compat).bits or self.bits

    @by_compat
    def quant_scheme(self, compat: str | None) -> str:
        return self.scheme or self._recipe(compat).scheme

    @by_compat
    def quant_targets(self, compat: str | None) -> str:
        return self.targets or self._recipe(compat).targets


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
        bits = config.quant_bits
        variants = study_variants(config)
        primary = variants[0]
        max_length = study_max_length(config)
        timings: dict[str, float] = {}
        summaries, rows, models = {}, [], []
        for run in each_model(config, timings):
            lm = run.lm
            n = len(decoder_layers(lm.model))
            configs = study_configs(config, n)
            scores = score_configs(lm, languages, configs, variants, config.batch_size, max_length,
                                   prefix_reuse=config.prefix_reuse,
                                   budget_bytes=int(config.prefix_budget_gib * 2**30))
            run.mark("extract_s")
            del lm
            info = run.release()
            summaries[info.name], model_rows = analyse_model(info.name, n, scores, list(configs), variants, config)
            rows += model_rows
            models.append(model_entry(info))
            run.mark("analysis_s")
        dataset = {"kind": "languages", "source": languages.source, "hash": languages.hash,
                   "languages": {lang.code: lang.resource for lang in languages.languages}}
        summary: AblationSummary = {"bits": bits, "recipe": primary.recipe, "primary": primary.label,
                                    "models": summaries,
                                    "warnings": [*prequantized_warnings(models, bits),
                                                 *group_warnings(len(languages.high), len(languages.low))]}
        record = manifest(config, models, dataset, timings, max_length=max_length)
        return StudyResult(study=self.name, config=config.to_dict(), manifest=record, summary=summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)
    verdicts = staticmethod(study_claims)

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
        robustness (notebooks mode: the notebook's rule), and the number of languages when a group has < 10."""
        seed = result.config.get("compat") == NOTEBOOKS
        caveat = _languages_caveat(result.manifest.get("dataset", {}).get("languages", {}))
        lines = []
        summary: AblationSummary = result.summary
        for model, s in summary["models"].items():
            for label, v in s["variants"].items():
                h5 = v["verdicts"]["h5"]
                detail = h5_detail(h5, seed)
                lines.append(f"{model} [{label}]: H5 {h5['result']} ({detail}){caveat}")
        return lines


def study_variants(config: StudyConfig) -> list[Variant]:
    """How ``config`` quantizes: the primary variant (its scheme, targets, bits and recipe), then the notebook's
    per-tensor/all-weights beside it when the primary is not that one."""
    bits = config.quant_bits
    primary = Variant(f"{config.quant_scheme}/{config.quant_targets}" + ("" if bits == config.bits else
                                                                          f"/{bits}-bit"),
                      config.quant_scheme, config.quant_targets, config.sweep, bits, config.quant_recipe)
    variants = [primary]
    if (config.quant_scheme, config.quant_targets) != NOTEBOOK:
        variants.append(Variant("per-tensor/all-weights (notebook)", *NOTEBOOK, sweep=False, bits=config.bits,
                                recipe="notebook"))
    return variants


def study_max_length(config: StudyConfig) -> int | None:
    """The truncation of the texts: ``--max-length`` when given, else 256 tokens in notebooks mode, else none."""
    return config.max_length or (SEED_MAX_LENGTH if config.compat == NOTEBOOKS else None)  # explicit wins


def study_configs(config: StudyConfig, n: int) -> dict[str, LayerConfig]:
    """The layer configurations ``config`` scores on a model with ``n`` decoder layers (the sweep's one-layer
    configurations added with ``--sweep``)."""
    configs = standard_configs(n) if config.configs == "standard" else load_configs(config.configs, n)
    if config.sweep:
        configs.update(sweep_configs(n))
    return configs


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
