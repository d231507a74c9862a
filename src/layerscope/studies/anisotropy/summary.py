"""What an anisotropy result's summary holds, key by key: ``result.summary`` is an :class:`AnisotropySummary`, each
``result.summary["models"][name]`` an :class:`AnisotropyModel` (keys marked NotRequired are absent in notebooks mode).

    s: AnisotropyModel = result.summary["models"]["smollm2-135m"]
    headline_set(s)["l_star"]           # L* of the headline token set
    s["token_sets"]["excl_pos0"]["bell"]["verdict"]   # the bell verdict without position 0 (default mode)
"""

from typing import NotRequired, TypedDict


class Bell(TypedDict):
    """The bell-curve test of a top1_ratio profile around L*: :func:`analysis.bell_verdict` by default,
    :func:`analysis.bell_test` (the notebook's rule, fewer keys) in notebooks mode."""

    is_bell_curve: bool  # a rise before L* and a fall from L* on (by default: each significant)
    phase1_slope: float | None  # least-squares slope per layer before L* (None: fewer than 2 layers)
    phase1_r: float | None  # its r
    phase1_p: float | None  # its p (by default None with fewer than MIN_SEGMENT layers)
    phase2_slope: float | None  # the slope from L* on
    phase2_r: float | None  # its r
    phase2_p: float | None  # its p
    max_value: float  # top1_ratio at L*
    level: NotRequired[float]  # the confidence level the slopes are judged at (default mode)
    min_layers: NotRequired[int]  # layers each side needs for the test to be assessable
    phase1_q: NotRequired[float | None]  # Benjamini-Hochberg q of phase1_p over the two slopes
    phase2_q: NotRequired[float | None]  # that of phase2_p
    phase1_layers: NotRequired[list[int] | None]  # [first, last] layer before L* (None: no layer)
    phase2_layers: NotRequired[list[int] | None]  # [first, last] layer from L* on
    phase1_n: NotRequired[int]  # layers before L*
    phase2_n: NotRequired[int]  # layers from L* on
    assessable: NotRequired[bool]  # both sides have at least min_layers layers
    verdict: NotRequired[str]  # the verdict in a sentence, naming the layers and the slope that fails


class ReferenceMatch(TypedDict):
    """L* against ``--reference-lstar`` (the notebook's bands)."""

    reference_l_star: int  # the reference L*
    distance: int  # |L* - reference| in layers
    verdict: str  # "EXCELLENT MATCH" (<= 3), "GOOD MATCH" (<= 5) or "DISCREPANCY"


class DriverExclusion(TypedDict):
    """One exclusion tried at L*: what it leaves of the top-1 share."""

    exclusion: str  # "sink", "massive", "outlier_dims" or "sink_and_massive"
    left_out: str  # what it leaves out, in words
    top1_ratio: float | None  # top1_ratio at L* without it (None: fewer than 2 token states left)
    share_left: float | None  # that as a share of top1_ratio with it


class Driver(TypedDict):
    """What the top-1 share at L* rests on (:func:`drivers.driver_at`)."""

    layer: int  # L*
    top1_ratio: float  # top1_ratio at L* of the token set as it is
    rule: float  # an exclusion drives L* when it leaves less than this share (DRIVER_SHARE)
    driver: str  # "sink", "massive", "outlier_dims", "sink_and_massive" or "none"
    label: str  # the driver in words, e.g. "sink (position 0)" or "none of these"
    without: list[DriverExclusion]  # each exclusion tried, in order: sink, massive, outlier dims, both


class PostNorm(TypedDict):
    """A token set's profile with the final layer after the final norm in place of the pre-norm one."""

    l_star: int  # L* of that profile
    bell: Bell  # its bell test
    top1_ratio_final: float  # top1_ratio of the post-norm final state
    top1_ratio_final_pre_norm: float  # top1_ratio of the pre-norm final state (the profile's)


class TokenSet(TypedDict):
    """One token set's profile: L*, its bell test and the layers worth a look."""

    l_star: int  # the layer of the largest top1_ratio (the first on a tie)
    bell: Bell  # the bell-curve test around L*
    reference: ReferenceMatch | None  # L* against --reference-lstar (None without one)
    key_layers: list[int]  # 0, L*/2, L*, (L* + n_layers)/2, n_layers (the spectrum figure's layers)
    saturated_layers: list[int]  # layers with top1_ratio >= SATURATED
    layers_with_outliers: list[int]  # layers with outlier dimensions
    n_tokens: int  # token states in the set
    driver: NotRequired[Driver]  # what drives its L* (default mode)
    post_norm: NotRequired[PostNorm]  # its profile with the final layer after the final norm


class Sink(TypedDict):
    """The position-0 norm ratio per layer and where it passes SINK_RATIO (:func:`analysis.sink_profile`)."""

    rule: float  # SINK_RATIO: the ratio above which position 0 is a sink
    onset_layer: int | None  # the first layer whose ratio exceeds it (None: none does)
    pos0_norm_ratio: list[float | None]  # the ratio at each layer 0..n_layers (the pre-norm final state last)
    pos0_norm_ratio_post_norm: float | None  # the ratio after the final norm
    at_l_star: float | None  # the ratio at the headline L*


class MassiveToken(TypedDict):
    """A mid-sentence massive-activation token."""

    text: int  # the index of its text
    position: int  # its position in the text
    token_id: int  # its token id
    token: str | None  # its text (None where no tokenizer decoded it)
    layers: list[int]  # the layers where it is massive


class Massive(TypedDict):
    """The massive-activation tokens (:func:`drivers.massive_summary`)."""

    ratio: float  # MASSIVE_RATIO: largest |activation| over the text's median |activation| that flags a token
    n_tokens: int  # tokens flagged at some layer
    n_position_0: int  # of those, at position 0
    n_mid_sentence: int  # of those, elsewhere
    positions: list[int]  # the positions of the flagged tokens
    layers: list[int]  # the layers where any token is flagged
    mid_sentence: list[MassiveToken]  # the first LISTED mid-sentence ones


class LStarCheck(TypedDict):
    """The headline L* and bell label under one sensitivity check (:func:`drivers.lstar_checks`)."""

    check: str  # "without position 0", "without massive-activation tokens", "without position 0 and
    # massive-activation tokens", "with all tokens" or "after the final norm"
    value: int  # L* under it
    label: str  # the bell label under it
    flips: bool  # L* moves or the bell label flips
    l_star_moves: bool  # L* differs from the headline's
    bell_flips: bool  # the bell label differs from the headline's


class AnisotropyAnalysis(TypedDict):
    """What :func:`analysis.analyse_model` returns for one model."""

    n_layers: int  # the model's blocks; hidden states run 0 to n_layers
    hidden_dim: int  # the hidden size
    primary: str  # the headline token set: "all" or "excl_pos0" (--exclude-bos)
    token_sets: dict[str, TokenSet]  # by token set ("all", "excl_pos0", "excl_massive", "excl_pos0_massive"; seed
    # compat: "all", "excl_pos0"): its profile's verdicts
    l_star: int  # the headline token set's L*
    outlier_verdict: str | None  # whether outlier dimensions explain a saturated top1_ratio (None: "all" not run)
    final_layer: NotRequired[str]  # what layer n_layers holds in the profile: "pre_norm" (default mode)
    skipped_token_sets: NotRequired[dict[str, str]]  # token set -> why it was not computed
    l_star_stage: NotRequired[str | None]  # "pre_norm" when L* is the final layer, else None
    bell_verdict: NotRequired[str]  # the headline bell verdict, in a sentence
    driver: NotRequired[Driver]  # what drives the headline L*
    sink: NotRequired[Sink]  # the position-0 sink per layer
    massive: NotRequired[Massive]  # the massive-activation tokens
    checks: NotRequired[list[LStarCheck]]  # the headline L* and bell label under each sensitivity check
    robustness: NotRequired[str]  # "robust: L* = ... hold ..." or "not robust: ..."
    caveats: NotRequired[list[str]]  # what a reader of the headline must know (short bell segments, not robust)


class AnisotropyModel(AnisotropyAnalysis):
    """One model's anisotropy summary: ``result.summary["models"][name]``."""

    n_prompts: int  # the prompts the token states come from


class AnisotropySummary(TypedDict):
    """``result.summary`` of an anisotropy run."""

    models: dict[str, AnisotropyModel]  # by model name
    warnings: list[str]  # bell-test warnings (few layers)


def headline_set(s: AnisotropyAnalysis) -> TokenSet:
    """The headline token set's profile (``s["primary"]``) of a model's summary."""
    return s["token_sets"][s["primary"]]
