"""What a scaling result's summary holds, key by key: ``result.summary`` is a :class:`ScalingSummary`, each
``result.summary["models"][name]`` a :class:`ScalingModel` (keys marked NotRequired are absent in notebooks mode).

    s: ScalingSummary = result.summary
    s["models"]["smollm2-135m"]["max_pos_pct"]     # the peak's depth, % of the layers
    s["peak_stability"]["verdict"]                 # "STABLE", "SHIFTS" or "not assessable" (default mode)
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class SignChange(TypedDict):
    """A sign change of r between two tested layers (by default one whose two r differ significantly)."""

    layer_before: int  # the tested layer before the change
    layer_after: int  # the tested layer after it
    midpoint_pct: float  # the point between them, % of the layers
    r_before: NotRequired[float]  # r at layer_before (default mode)
    r_after: NotRequired[float]  # r at layer_after
    t: NotRequired[float | None]  # Williams' t of r_after vs r_before
    p: NotRequired[float | None]  # its p
    p_fwer: NotRequired[float | None]  # family-wise p: max-T permutation over the candidate flips


class PeakCheck(TypedDict):
    """A model's peak recomputed under one sensitivity check (:func:`sensitivity.check_entry`)."""

    check: str  # the check's name: "without position 0", "after the final norm", "without CAT", ...
    value: float  # the peak's depth under it, % of the layers
    label: str  # "peak L12 (40%)" or "no significant peak"
    flips: bool  # its significance changes, or it moves by at least STABLE_RANGE_PCT points
    layer: int  # the peak's layer under it
    r: float  # its r
    q: float | None  # its q
    significant: bool  # positive with q < 1 - level
    n_categories: int  # categories under it


class ScalingModel(TypedDict):
    """One model's profile and peak: ``result.summary["models"][name]``."""

    n_layers: int  # the model's blocks; hidden states run 0 to n_layers
    max_pos_r: float  # the largest r over the peak search's layers: the peak
    max_pos_layer: int  # its layer
    max_pos_pct: float  # its depth, % of the layers
    max_neg_r: float  # the most negative r
    max_neg_layer: int  # its layer
    max_neg_pct: float  # its depth, % of the layers
    final_r: float | None  # r at the last tested layer (None where undefined)
    sign_changes: list[SignChange]  # sign changes of r (default mode: significant ones only)
    family: NotRequired[str]  # the model's architecture, e.g. "LlamaForCausalLM"
    stage: NotRequired[str]  # what layer n_layers holds: "pre_norm"
    n_categories: NotRequired[int]  # categories r runs over
    layers: NotRequired[list[int]]  # the tested layers
    peak_layers: NotRequired[list[int]]  # the layers the peak search covers (tested, not the embedding layer)
    final_layer: NotRequired[int]  # the last tested layer
    depth_step_pct: NotRequired[float | None]  # the largest gap between peak_layers, % of the layers
    significant_layers: NotRequired[list[int]]  # tested layers whose r has q < 1 - level
    max_pos_p_perm: NotRequired[float | None]  # the peak r's permutation p
    max_pos_q: NotRequired[float | None]  # its Benjamini-Hochberg q over the tested layers
    max_pos_ci: NotRequired[list[float | None]]  # its Fisher-z interval [lo, hi]
    max_pos_significant: NotRequired[bool]  # the peak counts: r > 0 and q < 1 - level
    max_pos_rho: NotRequired[float | None]  # Spearman rho at the peak's layer
    sign_flips_within_noise: NotRequired[list[SignChange]]  # sign changes whose two r do not differ significantly
    peak: NotRequired[str]  # the peak in words, with q or why it does not count
    checks: NotRequired[list[PeakCheck]]  # the peak under each sensitivity check
    robustness: NotRequired[str]  # "robust to all N sensitivity checks" or "not robust: flips ..."


class Family(TypedDict):
    """One architecture's peaks and verdict (:func:`analysis.family_entry`)."""

    family: str  # the architecture
    models: list[str]  # its models
    significant: list[str]  # those whose peak counts
    peak_pcts: list[float]  # their peak depths, % of the layers
    mean_peak_pct: float | None  # mean of peak_pcts (None when not assessable)
    range_peak_pct: float | None  # max - min of peak_pcts, points
    sd_peak_pct: float | None  # sample standard deviation (n - 1) of peak_pcts, points
    verdict: str  # "STABLE", "SHIFTS" or "not assessable"
    answer: str | None  # the verdict in a sentence (None when not assessable)


class VerdictCheck(TypedDict):
    """The stability verdict from the peaks each model's check found (:func:`sensitivity.check_entry`)."""

    check: str  # the check's name
    value: float | None  # range_peak_pct under it
    label: str  # the verdict under it
    flips: bool  # it differs from the headline verdict
    reason: str | None  # why it is not assessable, if so


class PeakVerdict(TypedDict):
    """Whether the peak shifts with size, by default (:func:`analysis.peak_verdict`)."""

    rule: str  # the rule, in words
    families: list[Family]  # each architecture's peaks and verdict
    caveats: list[str]  # e.g. a layer grid coarser than the rule
    reason: str | None  # why it is not assessable, if so
    peaks_stable: bool | None  # True for STABLE, False for SHIFTS, None when not assessable
    mean_peak_pct: float | None  # of the one assessed family (None with none or several)
    range_peak_pct: float | None  # likewise
    sd_peak_pct: float | None  # likewise
    verdict: str  # "STABLE", "SHIFTS" or "not assessable"
    answer: str  # the verdict in a sentence, with its reason
    checks: list[VerdictCheck]  # the verdict under each check all models share
    robustness: str  # "robust to all N sensitivity checks" or "not robust: flips ..."


class SeedStability(TypedDict):
    """The notebooks' rule (notebooks mode, sweeps: :func:`analysis.peak_stability`)."""

    mean_peak_pct: float  # mean peak depth, % of the layers
    std_peak_pct: float | None  # population standard deviation, points (None for one model)
    peaks_stable: bool | None  # std_peak_pct < STABLE_STD_PCT (None for one model)
    answer: str  # the verdict in a sentence


class ScalingSummary(TypedDict):
    """``result.summary`` of a scaling run."""

    pooling: str  # the pooling of every profile
    models: dict[str, ScalingModel]  # by model name
    peak_stability: PeakVerdict | SeedStability  # SeedStability in notebooks mode
    warnings: list[str]  # small-n warnings
    n_categories: NotRequired[int]  # categories r runs over (default mode)
    stage: NotRequired[str]  # "pre_norm": what the final layer holds
    peak_search: NotRequired[str]  # which layers the peak search covers, in words
