"""What an ablation result's summary holds, key by key: ``result.summary`` is an :class:`AblationSummary`, each
``result.summary["models"][name]`` an :class:`AblationModel`, each of its ``variants`` a :class:`VariantSummary`
(keys marked NotRequired are absent in notebooks mode, or in some verdicts: see each class).

    s: AblationSummary = result.summary
    v = s["models"]["smollm2-135m"]["variants"][s["primary"]]     # the primary quantization variant
    config_row(v, "all_quantized")["disparity_ratio"]            # D_LR / D_HR with every layer quantized
    v["verdicts"]["h5"]["result"]                                 # SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, ...
"""

from typing import NotRequired, TypedDict


class ConfigRow(TypedDict):
    """One layer configuration's degradations and disparity (:func:`analysis.disparity_table`)."""

    config: str  # the configuration's name: "baseline", "all_quantized", "gateway_protected", "only_L3", ...
    n_quantized: int  # decoder layers it quantizes
    mean_ppl: float  # mean perplexity over every text
    mean_degradation: float  # mean (ppl - baseline ppl) / baseline ppl, clipped at 0
    std_degradation: float  # its sample standard deviation over the texts (0.0 with one text)
    d_hr: float  # mean degradation of the high-resource texts
    d_lr: float  # mean degradation of the low-resource texts
    disparity_ratio: float | None  # d_lr / d_hr (None: disparity_note says why)
    disparity_note: str | None  # why the ratio is undefined (d_hr too small, model broken), else None
    disparity_diff: float  # d_lr - d_hr
    delta_nll_hr: float  # mean NLL increase of the high-resource texts over the baseline
    delta_nll_lr: float  # that of the low-resource texts
    reduction_pct: float | None  # (ratio_all_quantized - ratio) / ratio_all_quantized, in % (None: see the note)
    reduction_note: str | None  # why the reduction is undefined, else None
    median_ppl_ratio: NotRequired[float | None]  # median over texts of ppl / baseline ppl (default mode)
    broken: NotRequired[bool]  # median_ppl_ratio > BROKEN_PPL_RATIO: the model no longer works
    d_hr_ci: NotRequired[list[float] | None]  # bootstrap interval of d_hr over texts [lo, hi] (None: none)
    d_lr_ci: NotRequired[list[float] | None]  # that of d_lr
    disparity_ci: NotRequired[list[float] | None]  # that of disparity_ratio


class LanguageCheck(TypedDict):
    """The H5 reduction without one language (:func:`inference.language_checks`)."""

    check: str  # "without LANG"
    value: float | None  # the reduction without it, in % (None: undefined)
    label: str  # which side of the threshold that is: "above 30%", "at or below 30%" or "undefined"
    flips: bool  # it lies on the other side of the threshold than the reduction with every language


class H5Verdict(TypedDict):
    """H5: does protecting the first and last layers cut the disparity by more than 30%?

    Notebooks mode: result and (when defined) reduction_pct, all_quantized_ratio and gateway_ratio, or reason.
    Default mode: UNDETERMINED and NOT_APPLICABLE carry reason; a verdict carries the interval and the checks."""

    result: str  # SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_APPLICABLE or UNDETERMINED
    reason: NotRequired[str]  # why there is no reduction (UNDETERMINED, NOT_APPLICABLE)
    broken: NotRequired[list[str]]  # the configurations that broke the model (UNDETERMINED for that reason)
    reduction_pct: NotRequired[float]  # the gateway configuration's reduction of the disparity ratio, in %
    all_quantized_ratio: NotRequired[float | None]  # the disparity ratio with every layer quantized
    all_quantized_ratio_ci: NotRequired[list[float] | None]  # its bootstrap interval (NOT_APPLICABLE)
    gateway_ratio: NotRequired[float | None]  # the disparity ratio with the first and last layers protected
    ci: NotRequired[list[float]]  # bootstrap interval of reduction_pct [lo, hi]
    level: NotRequired[float]  # its confidence level
    threshold: NotRequired[float]  # H5_THRESHOLD, in %
    n_resamples: NotRequired[int]  # bootstrap resamples
    n_undefined: NotRequired[int]  # resamples left out: a disparity ratio was undefined in them
    without_language: NotRequired[dict[str, float | None]]  # the reduction without each language, in %
    lolo_range: NotRequired[list[float] | None]  # [min, max] of without_language (None: none defined)
    checks: NotRequired[list[LanguageCheck]]  # one sensitivity check per left-out language
    robustness: NotRequired[str]  # "robust to all N sensitivity checks" or "not robust: flips ..."
    short_robustness: NotRequired[str]  # "robust to leaving out any one of N languages" or "not robust: flips ..."


class Halves(TypedDict):
    """Which half of the layers matters more: first-half-protected against second-half-protected.

    Default mode: labelled only where the bootstrap interval of the difference excludes 0."""

    first_half_protected_ratio: float | None  # the disparity ratio with the first half protected
    second_half_protected_ratio: float | None  # with the second half protected
    more_critical_for_disparity: str | None  # "early", "late", "not significant" (None: undetermined)
    first_half_protected_degradation: float  # mean degradation with the first half protected
    second_half_protected_degradation: float  # with the second half protected
    more_critical_for_degradation: str | None  # "early", "late", "not significant" (None: undetermined)
    disparity_diff: NotRequired[float | None]  # first - second ratio (default mode; None: a ratio undefined)
    degradation_diff: NotRequired[float]  # first - second mean degradation
    level: NotRequired[float]  # the intervals' confidence level
    disparity_diff_ci: NotRequired[list[float] | None]  # bootstrap interval of disparity_diff
    degradation_diff_ci: NotRequired[list[float] | None]  # bootstrap interval of degradation_diff
    disparity_reason: NotRequired[str | None]  # why disparity_diff_ci is None
    degradation_reason: NotRequired[str | None]  # why degradation_diff_ci is None


class Synergy(TypedDict):
    """Is protecting both ends better than the sum of protecting each (gateway vs first + last - all)?"""

    synergistic: bool | None  # the gateway ratio lies below the additive expectation (None: undetermined)
    reason: NotRequired[str]  # why it is undetermined (or, by default, why there is no interval)
    expected_additive: NotRequired[float]  # first_protected + last_protected - all_quantized disparity ratios
    gateway: NotRequired[float]  # the gateway_protected disparity ratio
    difference: NotRequired[float]  # gateway - expected_additive (default mode)
    difference_ci: NotRequired[list[float] | None]  # its bootstrap interval
    level: NotRequired[float]  # the interval's confidence level
    label: NotRequired[str]  # "synergistic", "no synergy (...)", "not significant" or "undetermined"


class Verdicts(TypedDict):
    """A variant's verdicts; halves and synergy need their configurations (the standard set has them)."""

    h5: H5Verdict  # the gateway-layers hypothesis
    halves: NotRequired[Halves]  # first vs second half protected
    synergy: NotRequired[Synergy]  # gateway vs the additive expectation


class SweepRow(TypedDict):
    """One language under "only this layer quantized" (``--sweep``)."""

    layer: int  # the decoder layer quantized
    lang: str  # the language
    degradation: float  # its texts' mean degradation
    delta_nll: float  # their mean NLL increase over the baseline


class LayerError(TypedDict):
    """The error one quantized layer itself introduces (:mod:`.layer_error`): over every text."""

    layer: int  # the decoder layer
    sqnr_db: float  # 10 log10(sum ||y||^2 / sum ||y - y_q||^2) on the full-precision input, every real token
    sqnr_db_excl_pos0: float  # the same without each text's first token
    weight_rel_err: float  # ||W - W_q||_F / ||W||_F over the layer's quantized weights


class SqnrVsSweep(TypedDict):
    """Does a layer's own error predict the damage quantizing it alone does? Spearman over layers (--sweep)."""

    rho: float | None  # Spearman correlation of sqnr_db with the mean delta NLL over texts (None: undefined)
    p: float | None  # its two-sided p-value
    rho_excl_pos0: float | None  # the same with sqnr_db_excl_pos0
    p_excl_pos0: float | None
    n_layers: int  # layers in the correlation


class PrefixReuse(TypedDict):
    """How the forward passes ran (:func:`runner.score_configs`)."""

    on: bool  # prefix reuse was on
    passes: int  # forward passes over the texts (baseline included)
    whole_passes: int  # passes that ran every decoder layer
    layers_run: int  # decoder layers computed over every pass
    layers_whole: int  # what every pass whole would have computed
    peak_streams: int  # most residual streams kept at once
    peak_bytes: int  # host memory they took
    stream_bytes: int  # one stream's memory
    budget_bytes: int  # the budget they had
    whole_by_budget: int  # passes that ran whole because their stream did not fit


class VariantSummary(TypedDict):
    """One quantization variant's results: ``result.summary["models"][name]["variants"][label]``."""

    scheme: str  # per-tensor, per-channel or group:N
    targets: str  # "linear" or "all-weights"
    recipe: str  # notebook, per-channel, group128, int8, or custom (--scheme/--targets of no recipe)
    bits: int  # bits of its fake quantization
    layer_error: list[LayerError]  # every layer any of its configurations quantizes
    per_config: list[ConfigRow]  # one row per configuration, in the configurations' order
    verdicts: Verdicts  # H5, halves, synergy
    all_quantized_ppl_ratio: float | None  # median ppl ratio with every layer quantized (None: not run)
    sweep: NotRequired[list[SweepRow]]  # per swept layer and language (--sweep, primary variant)
    most_sensitive_layer: NotRequired[dict[str, int]]  # language -> the layer with the largest mean delta NLL
    sqnr_vs_sweep: NotRequired[SqnrVsSweep]  # its layers' SQNR against their sweep delta NLL


class AblationModel(TypedDict):
    """One model's ablation summary: ``result.summary["models"][name]``."""

    n_layers: int  # decoder layers
    variants: dict[str, VariantSummary]  # by label: the primary variant first, then the notebook's scheme
    prefix_reuse: PrefixReuse  # how its forward passes ran


class AblationSummary(TypedDict):
    """``result.summary`` of an ablation run."""

    bits: int  # bits of the primary variant's fake quantization
    recipe: str  # the primary variant's recipe
    primary: str  # the label of the primary variant ("SCHEME/TARGETS", "/8-bit" added when its bits are not --bits)
    models: dict[str, AblationModel]  # by model name
    warnings: list[str]  # small-group warnings (few languages)


def config_row(v: VariantSummary, config: str) -> ConfigRow | None:
    """The ``per_config`` row of ``config`` in a variant's summary (None when it was not run)."""
    return next((row for row in v["per_config"] if row["config"] == config), None)
