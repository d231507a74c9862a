"""What the atlas study's summary holds (``result.summary``), as typed dicts.

    s: AtlasModel = result.summary["models"]["smollm2-135m"]
    s["boundaries"]["consensus"]        # [2, 4, 11, 21, 29]: every family's change points, merged across families
    s["boundaries"]["seen_by"]          # [["lens", "similarity", "spectrum"], ["similarity", "spectrum"], ...]
    s["boundaries"]["per_family"]["lens"]       # [2, 11, 21, 29]
    s["boundaries"]["intervals"]                # each with ci_lo, ci_hi, support, moved
"""

from __future__ import annotations

from typing import TypedDict


class Interval(TypedDict):
    family: str
    """A family's name (``lens``, ``similarity``, ``spectrum``) or ``consensus``."""
    index: int
    """1, 2, ...: the boundary's place in its family's (or the consensus's) list, from the top of the model."""
    value: int
    """The boundary layer on the full data."""
    ci_lo: int
    ci_hi: int
    """Its 95 % bootstrap interval over resampled texts (layers)."""
    support: float
    """The fraction of resamples with a break of that family within the tolerance of ``value``."""
    n: int
    """Resamples it was measured on."""
    moved: int
    """Resamples in which it was not at ``value`` (elsewhere within the tolerance, or absent): a zero-width
    interval is printed only when this is 0."""
    families: list[str]
    """The families that see it (for the consensus; the family itself otherwise)."""


class Variant(TypedDict):
    consensus: list[int] | None
    per_family: dict[str, list[int]]
    intervals: list[Interval]
    """The consensus boundaries' intervals under this variant."""
    why: str | None
    """Why the variant has no consensus (e.g. no token left without the massive ones); None when it has one."""


class Boundaries(TypedDict):
    families: dict[str, list[str]]
    """Which measures vote together (one vote per family)."""
    per_metric: dict[str, list[int]]
    """Each measure alone: its change points (layers; the first layer of the new segment) at its own calibrated
    penalty, on the full data; a description (the families' joint fits are what count)."""
    per_family: dict[str, list[int]]
    """Each family's change points: its measures cut together, as many as its calibrated penalty allows."""
    skipped: dict[str, str]
    """Measures with no change points, and why (too few layers, not finite)."""
    consensus: list[int] | None
    """Every family's change points, merged across families within one layer (ascending; [] when no profile
    changes course beyond its noise; None when no family could be fitted)."""
    seen_by: list[list[str]]
    """Per consensus boundary, the families that see it."""
    shared: list[int]
    """The consensus boundaries seen by at least two families (the headline's phase boundaries)."""
    penalties: dict[str, float]
    """Each family's penalty per break, in its noise units (calibrated on the resamples)."""
    alpha: float
    """The calibrated chance that a profile with no change gets an extra break in any family."""
    intervals: list[Interval]
    """Every family's and the consensus's boundaries with bootstrap intervals and support (default variant)."""
    variants: dict[str, Variant]
    """The same fit without position 0 and massive tokens (``excl_massive``), without layer 0 (``no_layer0``) and
    with segments of at least 3 layers (``min_segment_3``)."""
    moved: list[dict[str, int | None]]
    """Per consensus boundary: the shift to the nearest consensus boundary of each variant (layers; None: the
    variant could not be fitted, e.g. too few layers for segments of 3, or has no boundary at all)."""
    fragile: list[bool]
    """Per consensus boundary: whether some variant that was fitted has no boundary within ``tolerance`` of it."""
    massive_driven: list[str]
    """Families with a boundary that has no counterpart within ``tolerance`` without position 0 and the massive
    tokens (or the other way round)."""
    tolerance: int
    """Layers within which two boundaries count as the same: max(1, round(0.1 n_layers))."""
    n_resamples: int
    thirds: list[int]
    """The phases study's split of the same layers: the first mid layer and the first late layer."""
    thirds_distance: list[int] | None
    """Per thirds boundary, the layers to the nearest consensus boundary: a description, not a test."""
    l_star: int
    l_star_families: list[str]
    """The families L* is compared with: those without the covariance top-1 share it is made from."""
    l_star_consensus: list[int] | None
    """Their change points (every one of those families', ascending)."""
    l_star_distance: int | None
    """Layers from L* to the nearest of those change points."""


class LensChoice(TypedDict):
    family: str
    """``"tuned lens"`` (the lens family's measures are ``tuned_lens_kl`` and ``tuned_lens_top1_agree``; the logit
    lens is the ``logit_lens`` check) or ``"logit lens"``."""
    tuned_lens: dict | None
    """The tuned lens: ``folder``, ``params_sha256``, ``weights_hash`` (the weights it was trained on),
    ``steps``, ``batch_size``, ``seed``, ``optimizer``, ``corpus``, ``trained_now``; None without one."""


class AtlasModel(TypedDict):
    n_layers: int
    layers: list[int]
    n_texts: int
    n_tokens: int
    n_scored: int
    massive_tokens: int
    """Real tokens massive at some block output (left out of block influence's second row)."""
    l_star: int
    """The anisotropy L*: the layer of the largest covariance top-1 share of the token states."""
    twonn_peak_layer: int
    lens_kl_half_layer: int
    """The first layer where the logit lens's KL falls below half its value at layer 0 (``n_layers`` if none)."""
    tuned_lens_kl_half_layer: int | None
    """The same through the tuned lens (None without one)."""
    lens: LensChoice
    """Which lens the lens family used, and the tuned lens's provenance."""
    massive_onset_layer: int | None
    """The first layer whose median top/median activation ratio exceeds 100 (None: none does)."""
    most_influential: list[int]
    """The layers of the 3 largest block influences (ShortGPT would remove the others first)."""
    boundaries: Boundaries
    conventions: dict[str, str | float]
    """How the numbers were computed: ``cka`` (the boundaries' CKA), ``entropy`` (``skean`` or ``raw``), ``twonn``
    (``mle`` or ``facco``), ``massive_threshold`` (a multiple of the median), ``random_cka_linear`` and
    ``random_cka_debiased`` (two independent random clouds at this run's n texts and width)."""
    seconds: dict[str, float]


class AtlasSummary(TypedDict):
    models: dict[str, AtlasModel]
    cross_model: list[str]
    """Models with cross-model CKA rows (``model_b`` set), when several models ran."""
    warnings: list[str]
