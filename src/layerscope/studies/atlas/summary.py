"""What the atlas study's summary holds (``result.summary``), as typed dicts.

    s: AtlasModel = result.summary["models"]["smollm2-135m"]
    s["boundaries"]["consensus"]        # [7, 19]: the median first and second change point over the measures
    s["boundaries"]["per_metric"]["lens_kl"]    # [6, 20]
"""

from __future__ import annotations

from typing import TypedDict


class Boundaries(TypedDict):
    per_metric: dict[str, list[int]]
    """Each measure's two change points (layers; the first layer of the new segment)."""
    skipped: dict[str, str]
    """Measures with no change points, and why (too few layers, not finite)."""
    consensus: list[int] | None
    """The median over measures of the first and of the second change point (rounded down to a measured layer)."""
    thirds: list[int]
    """The phases study's split of the same layers: the first mid layer and the first late layer."""
    tolerance: int
    """Layers within which two boundaries count as the same: max(1, round(0.1 n_layers))."""
    agree: list[bool] | None
    """Whether each consensus change point lies within ``tolerance`` of the thirds' boundary."""
    support: list[int]
    """For each thirds boundary, how many measures put a change point within ``tolerance`` of it."""
    l_star_near: bool | None
    """Whether the anisotropy L* lies within ``tolerance`` of a consensus change point."""
    verdict: str
    """The comparison in one sentence."""


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
    """The first layer where the lens KL falls below half its value at layer 0 (``n_layers`` if none)."""
    massive_onset_layer: int | None
    """The first layer whose median top/median activation ratio exceeds 100 (None: none does)."""
    most_influential: list[int]
    """The layers of the 3 largest block influences (ShortGPT would remove the others first)."""
    boundaries: Boundaries
    boundaries_no_massive: dict[str, list[int]]
    """Block influence's change points without massive-activation tokens (a check on the sink's pull)."""
    seconds: dict[str, float]


class AtlasSummary(TypedDict):
    models: dict[str, AtlasModel]
    cross_model: list[str]
    """Models with cross-model CKA rows (``model_b`` set), when several models ran."""
    warnings: list[str]
