"""The atlas's phase boundaries: as many as the data show, one joint fit per family of measures, bootstrap intervals,
and the checks that move them.

    b, rows = atlas_boundaries("smollm2-135m", p, n_resamples=200, seed=42, l_star=12)     # p: an AtlasPass
    b["consensus"], b["seen_by"], b["intervals"], b["fragile"], b["variants"]["excl_massive"]["consensus"]

Measures that react to the same thing form a family and are cut together (``FAMILIES``): the logit lens (the tuned
lens instead when the pass read the layers through one, the logit lens then a check); consecutive-layer similarity
(block influence and angular distance are both a cosine between consecutive layers, CKA-next its dataset-level
cousin, debiased); the spectrum and norm measures, which the position-0 sink's one huge dimension drives together.
Each family's number of breaks is chosen by a penalty calibrated on the resamples' own noise so that a profile with
no change gets an extra break, in any family, about 5 % of the time (:mod:`layerscope.measures.boundaries`); the
consensus is every family's breaks, merged across families within one layer, each listing the families that see
it. The texts are resampled with replacement (``n_resamples``, seeded) and every measure recomputed from the pass's
per-text sums, giving each boundary an interval and a support. The same fit runs in ``VARIANTS``: without position 0
and the massive tokens, without layer 0 (the embeddings), with segments of at least 3 layers, and (with a tuned lens)
with the logit lens in the lens family. A consensus boundary with no boundary of a variant within the tolerance is
fragile. The comparison with L* (made from the covariance top-1 share) uses only the families without that measure.
"""

from __future__ import annotations

from ...engine.atlas.stream import AtlasPass
from ...measures.boundaries import ALPHA, CONSENSUS, BoundaryFit, bootstrap_boundaries
from ...measures.changepoints import thirds
from ...study.result import layer_row
from .resample import draw_weights, resampled_profiles
from .summary import Boundaries

FAMILIES = {"lens": ("lens_kl", "lens_top1_agree"),
            "similarity": ("block_influence", "angular_distance", "cka_next"),
            "spectrum": ("norm", "massive_ratio", "top1_ratio", "prompt_entropy", "dataset_entropy", "twonn_id")}
"""Which measures are cut together: those driven by one event count once."""
TUNED_LENS = ("tuned_lens_kl", "tuned_lens_top1_agree")
"""The lens family's measures when the pass read the layers through a tuned lens too."""

VARIANTS = {"default": "every token, layers 0 to L, segments of at least 2 layers",
            "excl_massive": "without position 0 and the massive tokens",
            "no_layer0": "without layer 0 (the embeddings)",
            "min_segment_3": "segments of at least 3 layers",
            "logit_lens": "with the logit lens in the lens family instead of the tuned lens"}
"""The checks; ``logit_lens`` runs only when a tuned lens is in the lens family."""

L_STAR_MEASURE = "top1_ratio"
LEVEL = 0.95
SHARED = 2
"""A consensus boundary seen by at least this many families is a shared one (the headline's)."""


def tolerance(n_layers: int) -> int:
    """Layers within which two boundaries count as the same: max(1, round(0.1 n_layers))."""
    return max(1, round(0.1 * n_layers))


def families_of(p: AtlasPass) -> dict[str, tuple[str, ...]]:
    """:data:`FAMILIES`, the lens family made of the tuned lens's measures when ``p`` has them."""
    return {**FAMILIES, "lens": TUNED_LENS} if p.tuned_lens is not None else FAMILIES


def atlas_boundaries(model: str, p: AtlasPass, n_resamples: int, seed: int, l_star: int,
                     twonn: str = "mle", variants: bool = True) -> tuple[Boundaries, list[dict]]:
    """The boundaries of every variant (only the default one when not ``variants``) with intervals, their summary
    and their ``boundary`` table rows."""
    tol = tolerance(p.n_layers)
    weights = draw_weights(p.n_texts, n_resamples, seed)
    every = resampled_profiles(p, weights, 0, twonn, seed)
    families = families_of(p)
    fits = {"default": bootstrap_boundaries(every, families, tol, 2, LEVEL)}
    if variants:
        kept = resampled_profiles(p, weights, 1, twonn, seed)
        fits |= {"excl_massive": bootstrap_boundaries(kept, families, tol, 2, LEVEL, per_measure=False),
                 "no_layer0": bootstrap_boundaries(every, families, tol, 2, LEVEL, drop_first=True, per_measure=False),
                 "min_segment_3": bootstrap_boundaries(every, families, tol, 3, LEVEL, per_measure=False)}
        if p.tuned_lens is not None:
            fits["logit_lens"] = bootstrap_boundaries(every, FAMILIES, tol, 2, LEVEL, per_measure=False)
    rows = [layer_row(model, b.value, p.n_layers, "boundary", float(b.value), n=b.n, ci_lo=b.ci_lo, ci_hi=b.ci_hi,
                      family=b.family, variant=variant, support=b.support, boundary=b.index, moved=b.moved,
                      seen_by="+".join(b.families))
            for variant, fit in fits.items() for b in fit.intervals]
    summary = summarise(fits, p.layers, tol, n_resamples, l_star, families)
    if "excl_massive" in summary["variants"] and p.kept_tokens == 0:
        summary["variants"]["excl_massive"]["why"] = ("no token left in the set: every token is at position 0 or "
                                                      "massive at some block output")
    return summary, rows


def nearest(value: int, others: list[int] | None) -> int | None:
    """The signed shift from ``value`` to the nearest of ``others`` (the smaller on a tie); None when there are
    none."""
    if not others:
        return None
    best = min(others, key=lambda o: (abs(o - value), o))
    return int(best - value)


def summarise(fits: dict[str, BoundaryFit], layers: list[int], tol: int, n_resamples: int, l_star: int,
              families: dict[str, tuple[str, ...]] = FAMILIES) -> Boundaries:
    """The summary of :func:`atlas_boundaries`' fits (see :class:`~.summary.Boundaries`), ``families`` the default
    fit's."""
    main = fits["default"]
    consensus = main.consensus
    moved = [{v: (None if f.consensus is None else nearest(c, f.consensus)) for v, f in fits.items()
              if v != "default"} for c in consensus] if consensus else []
    fragile = [any(m is None and fits[v].consensus is not None or m is not None and abs(m) > tol
                   for v, m in shifts.items()) for shifts in moved]
    massive = []
    if "excl_massive" in fits:
        other = fits["excl_massive"].families
        massive = [f for f, breaks in main.families.items() if f in other
                   and (_unmatched(breaks, other[f], tol) or _unmatched(other[f], breaks, tol))]
    split = thirds(layers)
    marks = [split["mid"][0] if split["mid"] else layers[-1], split["late"][0]]
    star_families = [f for f in families if L_STAR_MEASURE not in families[f] and f in main.families]
    without = sorted({b for f in star_families for b in main.families[f]})
    seen = [list(s) for s in main.seen_by]
    return {"families": {f: list(m) for f, m in families.items()}, "per_metric": main.measures,
            "per_family": main.families, "skipped": main.skipped, "consensus": consensus, "seen_by": seen,
            "shared": [c for c, s in zip(consensus or [], seen, strict=True) if len(s) >= SHARED],
            "penalties": main.penalties, "alpha": ALPHA,
            "intervals": [_plain(b) for b in main.intervals],
            "variants": {v: {"consensus": f.consensus, "per_family": f.families, "why": _why(f),
                             "intervals": [_plain(b) for b in f.intervals if b.family == CONSENSUS]}
                         for v, f in fits.items() if v != "default"},
            "moved": moved, "fragile": fragile, "massive_driven": massive, "tolerance": tol,
            "n_resamples": n_resamples, "thirds": marks,
            "thirds_distance": [abs(nearest(m, consensus)) for m in marks] if consensus else None,
            "l_star": int(l_star), "l_star_families": star_families,
            "l_star_consensus": without or None,
            "l_star_distance": abs(nearest(l_star, without)) if without else None}


def _unmatched(breaks: list[int], others: list[int], tol: int) -> bool:
    """Whether some break has no break of ``others`` within ``tol`` layers."""
    return any((shift := nearest(b, others)) is None or abs(shift) > tol for b in breaks)


def _plain(b) -> dict:
    return {**b.__dict__, "families": list(b.families)}


def _why(fit: BoundaryFit) -> str | None:
    """Why a variant has no consensus: its measures' reasons, or None when it has one."""
    if fit.consensus is not None:
        return None
    reasons = sorted(set(fit.skipped.values()))
    return f"every measure: {'; '.join(reasons)}" if reasons else "no family had a finite profile"
