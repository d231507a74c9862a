"""What a divergence result's summary holds, key by key: ``result.summary`` is a :class:`DivergenceSummary`,
each ``result.summary["models"][name]`` a :class:`DivergenceModel` (keys marked NotRequired are absent in seed
compat, or without ``--drop-category``).

    s: DivergenceModel = result.summary["models"]["smollm2-135m"]
    headline_entry(s)["r"]           # r(UA, pref) of mean pooling at the headline layer
    by_pooling(s, "last")["label"]   # the verdict of last-token pooling there
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from ..shared.length import LengthControl


class SignChange(TypedDict):
    """A sign change of r between two consecutive tested layers (by default from :func:`sensitivity.sign_flips`)."""

    layer_before: int  # the tested layer before the change
    layer_after: int  # the tested layer after it
    r_before: float  # r at layer_before
    r_after: float  # r at layer_after
    t: NotRequired[float | None]  # Williams' t of r_after vs r_before (default mode)
    p: NotRequired[float | None]  # its p
    p_fwer: NotRequired[float | None]  # family-wise p: max-T permutation over the candidate flips


class PoolingVerdict(TypedDict):
    """One pooling's r(UA, pref) at the headline layer: an entry of ``pooling_comparison``."""

    pooling: str  # "mean", "last" or "first"
    layer: int  # the headline layer (last tested; notebooks mode: the final layer)
    stage: NotRequired[str]  # "pre_norm" when layer is the final layer taken before the final norm
    r: float | None  # Pearson r over categories (None where undefined)
    p: float | None  # its t-test p
    p_perm: NotRequired[float | None]  # its permutation p
    q: NotRequired[float | None]  # Benjamini-Hochberg of p_perm over the tested layers
    significant: NotRequired[bool]  # q < 1 - level
    fisher_z: NotRequired[list[float | None]]  # the Fisher-z interval [lo, hi]
    leverage: NotRequired[list[str]]  # categories with leverage (Cook's distance or a sign flip without them)
    loo_range: NotRequired[list[float | None]]  # [min, max] of the leave-one-category-out r
    interval: NotRequired[str]  # "Fisher-z", or "leave-one-out range" when a category has leverage
    ci_lo: NotRequired[float | None]  # the headline interval's lower end (of the kind in interval)
    ci_hi: NotRequired[float | None]  # its upper end
    label: str  # the verdict: the notebook's label when significant (notebooks mode: always), else why not


class PoolingTest(TypedDict):
    """Williams' test of r(UA_last, pref) against r(UA_mean, pref) at the headline layer."""

    layer: int  # the headline layer
    r_mean: float | None  # r of mean pooling
    r_last: float | None  # r of last-token pooling
    r_xz: float | None  # r(UA_mean, UA_last) over categories
    t: float | None  # Williams' t
    p: float | None  # its p


class WithoutCategory(TypedDict):
    """The analysis again without ``--drop-category``."""

    category: str  # the category left out
    n_categories: int  # categories left
    final_r: dict[str, float | None]  # r at the headline layer, by pooling
    divergence_points: list[SignChange]  # mean pooling's divergence points (notebooks mode: its sign changes)
    sign_throughout: str | None  # "positive", "negative", "unclear" or "undefined" when r never changes sign
    layer: NotRequired[int]  # the headline layer
    label: NotRequired[str]  # mean pooling's verdict there
    sign_flips_within_noise: NotRequired[list[SignChange]]  # mean pooling's sign changes that are not significant


class Influence(TypedDict):
    """Each category's influence on r (mean pooling, headline layer): :func:`sensitivity.influence`."""

    pooling: str  # "mean"
    layer: int  # the headline layer
    r: float | None  # r over all categories
    loo_r: dict[str, float | None]  # r without each category, by name
    cooks: dict[str, float | None]  # Cook's distance of each category (the larger of the two regressions)
    cutoff: float | None  # the Cook's distance above which a category has leverage
    flagged: list[str]  # the categories with leverage
    range: list[float | None]  # [min, max] of loo_r


class Check(TypedDict):
    """The headline verdict recomputed under one sensitivity check (:func:`sensitivity.check_entry`)."""

    check: str  # the check's name: "without position 0", "after the final norm", "without CAT", ...
    value: float | None  # r under it
    label: str  # the verdict under it
    flips: bool  # significance or the sign of a significant r differs from the headline's
    n: int  # categories
    layer: int  # the layer tested
    p_perm: float | None  # permutation p of r
    q: float | None  # Benjamini-Hochberg q over the tested layers
    significant: bool  # q < 1 - level
    interval: str  # "Fisher-z" or "leave-one-out range"
    ci_lo: float | None  # the interval's lower end
    ci_hi: float | None  # its upper end
    leverage: list[str]  # categories with leverage under it
    divergence_points: list[list[int]]  # [layer_before, layer_after] of each divergence point under it
    flips_within_noise: int  # sign flips within noise under it


class DivergenceModel(TypedDict):
    """One model's divergence summary: ``result.summary["models"][name]``."""

    n_layers: int  # the model's blocks; hidden states run 0 to n_layers
    layers: list[int]  # the tested layers
    n_categories: int  # categories r runs over
    categories: list[str]  # their names
    pooling_comparison: list[PoolingVerdict]  # per pooling, in POOLINGS order: the verdict at the headline layer
    divergence_points: dict[str, list[SignChange]]  # by pooling: significant sign changes (notebooks mode: all)
    sign_throughout: dict[str, str | None]  # by pooling: the sign r keeps when it never changes (else None)
    pooling_effect: str  # whether last and mean pooling differ, in a sentence
    headline_layer: NotRequired[int]  # the last tested layer
    stage: NotRequired[str]  # what layer n_layers holds: "pre_norm" (default) or "post_norm"
    pooling_test: NotRequired[PoolingTest]  # Williams' test behind pooling_effect
    sign_flips_within_noise: NotRequired[dict[str, list[SignChange]]]  # by pooling: sign changes not significant
    significant_layers: NotRequired[dict[str, list[int]]]  # by pooling: tested layers with q < 1 - level
    not_applicable: NotRequired[dict[str, str]]  # pooling -> why it is undefined for these data
    length_control: NotRequired[LengthControl]  # does the pairs' token-length difference explain the preference?
    without_category: NotRequired[WithoutCategory]  # the analysis without --drop-category
    influence: NotRequired[Influence]  # each category's influence on the headline r
    checks: NotRequired[list[Check]]  # the headline verdict under each sensitivity check
    robustness: NotRequired[str]  # "robust to all N sensitivity checks" or "not robust: flips ..."


class DivergenceSummary(TypedDict):
    """``result.summary`` of a divergence run."""

    models: dict[str, DivergenceModel]  # by model name
    warnings: list[str]  # small-n warnings


def by_pooling(s: DivergenceModel, pooling: str) -> PoolingVerdict:
    """The ``pooling_comparison`` entry of ``pooling`` ("mean", "last", "first") in a model's summary."""
    for entry in s["pooling_comparison"]:
        if entry["pooling"] == pooling:
            return entry
    raise KeyError(f"no {pooling!r} pooling in this divergence summary; it has "
                   f"{', '.join(e['pooling'] for e in s['pooling_comparison'])}")


def headline_entry(s: DivergenceModel) -> PoolingVerdict:
    """The headline verdict: mean pooling at the headline layer."""
    return by_pooling(s, "mean")
