"""What a phases result's summary holds, key by key: ``result.summary`` is a :class:`PhasesSummary`, each
``result.summary["models"][name]`` a :class:`PhasesModel` (keys marked NotRequired are absent in notebooks mode, or
without ``--drop-category``).

    s: PhasesModel = result.summary["models"]["smollm2-135m"]
    s["phases"]["late"]["mean"]         # the late phase's mean r
    s["late_inversion"]                 # the late-layer verdict, in words
"""

from typing import NotRequired, TypedDict

from ..shared.length import LengthControl


class PhaseMean(TypedDict):
    """One phase (a third of the tested layers): its mean r and, by default, its bootstrap interval."""

    layers: list[int]  # the tested layers in this third
    mean: float | None  # mean r over those layers with a defined r (None: no layer has one)
    n: NotRequired[int]  # layers with a defined r (default mode)
    ci_lo: NotRequired[float | None]  # percentile bootstrap interval over pairs, lower end (default mode, n > 0)
    ci_hi: NotRequired[float | None]  # its upper end


class PhaseMeans(TypedDict):
    """The three phases, in order."""

    early: PhaseMean  # the first third of the tested layers
    mid: PhaseMean  # the second third
    late: PhaseMean  # the last third


class PhaseValues(TypedDict):
    """A bare phase mean per phase (a sensitivity check's)."""

    early: float | None  # mean r of the early phase (None: no layer with a defined r)
    mid: float | None  # of the mid phase
    late: float | None  # of the late phase


class PhaseDifference(TypedDict):
    """late - early with its bootstrap interval (all None when a phase has no layer with a defined r)."""

    value: float | None  # late mean - early mean
    ci_lo: float | None  # percentile bootstrap interval over pairs (the same resamples), lower end
    ci_hi: float | None  # its upper end


class CentroidComparison(TypedDict):
    """The tested layer where r(leave-one-out centroids) - r(self-including centroids) is largest in size."""

    layer: int  # that layer
    r_loo: float | None  # r there with leave-one-out centroids
    r_self: float | None  # r there with self-including centroids
    difference: float | None  # r_loo - r_self


class WithoutCategory(TypedDict):
    """The analysis again without ``--drop-category``."""

    category: str  # the category left out
    n_pairs: int  # pairs left
    phases: PhaseMeans  # the phase means without it
    pattern: str  # the pattern label without it
    final_r: float | None  # r at the last tested layer without it
    final_significant: bool  # whether that r is significant
    late_inversion: str  # the late-layer verdict without it, in words
    significant_layers: list[int]  # tested layers with a significant r without it


class PhasesCheck(TypedDict):
    """The pattern and the late-layer verdict under one sensitivity check (:func:`sensitivity.check_entry`)."""

    check: str  # the check's name: "without position 0", "after the final norm", "without CAT", ...
    value: float | None  # r at the last tested layer under it
    label: str  # "PATTERN; last tested layer: LATE_LABEL" under it
    flips: bool  # the pattern or the late-layer label differs from the headline's
    n_pairs: int  # pairs under it
    pattern: str  # the pattern label under it
    pattern_flips: bool  # the pattern differs from the headline's
    late: str  # the late-layer verdict under it, in words
    late_flips: bool  # the late-layer label differs from the headline's
    phases: PhaseValues  # the phase means under it


class PhasesModel(TypedDict):
    """One model's phases summary: ``result.summary["models"][name]``."""

    n_layers: int  # the model's blocks; hidden states run 0 to n_layers
    layers: list[int]  # the tested layers
    pooling: str  # how a text's vector is made: "mean", "last" or "first"
    n_pairs: int  # pairs r runs over
    n_bootstrap: int  # bootstrap resamples behind every interval
    ci_level: float  # the intervals' confidence level
    centroids: str  # "loo" (leave-one-out centroids) or "self" (the notebooks')
    significance: str  # how a layer is judged: "q" (q < 1 - level) or "ci" (notebooks mode: the CI excludes 0)
    phases: PhaseMeans  # early, mid and late: their layers and mean r
    final_layer: int  # the last tested layer
    final_r: float | None  # r there (None where undefined)
    final_significant: bool  # whether that r is significant
    significant_layers: list[int]  # tested layers with a significant r
    pattern: str  # the pattern label: PYTHIA_PATTERN, LATE_INVERSION, DECOUPLED, NO_PATTERN, ...
    pattern_text: str  # what the label means, or (NO_PATTERN, NOT_ASSESSABLE) why there is none
    late_inversion: str  # the late-layer verdict, in words
    phase_difference: NotRequired[PhaseDifference]  # late - early with its interval (default mode)
    late_label: NotRequired[str]  # the late-layer verdict's key: CONFIRMED, NOT_SIGNIFICANT, NO_INVERSION, ...
    final_q: NotRequired[float | None]  # q of the last tested layer's r (Benjamini-Hochberg over the tested layers)
    final_p_perm: NotRequired[float | None]  # its permutation p
    final_ci: NotRequired[list[float | None]]  # its BCa bootstrap interval [lo, hi]
    final_stage: NotRequired[str | None]  # "pre_norm" when the last tested layer is the final one before the norm
    stage: NotRequired[str]  # what layer n_layers holds: "pre_norm" or "post_norm" (no pre-norm states)
    loo_vs_self: NotRequired[CentroidComparison]  # where the two centroid variants differ most
    length_control: NotRequired[LengthControl]  # does the pairs' token-length difference explain the preference?
    without_category: NotRequired[WithoutCategory]  # the analysis without --drop-category
    checks: NotRequired[list[PhasesCheck]]  # the pattern and late-layer verdict under each sensitivity check
    robustness: NotRequired[str]  # "robust to all N sensitivity checks" or "not robust: flips ..."


class ComparisonRow(TypedDict):
    """A row of the cross-model comparison: a reference figure, or a model of this run."""

    model: str  # the model's name
    source: str  # "this run", or where the reference figure comes from
    early: float | None  # its early phase mean
    mid: float | None  # its mid phase mean
    late: float | None  # its late phase mean
    data: NotRequired[str]  # the pairs it was computed on (default mode)
    layers: NotRequired[str]  # the layers it was computed on
    token_rule: NotRequired[str]  # how a text's vector was made
    comparable: NotRequired[bool | None]  # whether it compares directly with the basis (None: it is the basis)
    comparability: NotRequired[str]  # that, in words


class PhasesSummary(TypedDict):
    """``result.summary`` of a phases run."""

    models: dict[str, PhasesModel]  # by model name
    comparison: list[ComparisonRow]  # the reference rows, then one row per model of this run
    warnings: list[str]  # small-n warnings
