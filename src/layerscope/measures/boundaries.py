"""Phase boundaries over depth, counted once per family of measures, with bootstrap intervals.

    fit = bootstrap_boundaries(
        {"lens_kl": (layers, values), ...},                 # values: (R + 1, L), row 0 the full data,
        {"lens": ("lens_kl", "lens_top1_agree"), ...},      # rows 1.. the bootstrap resamples
        tolerance=3)
    fit.measures["lens_kl"]        # [b1, b2]: that measure's breaks on the full data (layers)
    fit.families["lens"]           # [b1, b2]: the family's breaks (lower median over its measures)
    fit.consensus                  # [b1, b2]: lower median over the families
    fit.intervals                  # one Boundary per family (and "consensus") per break: value, ci, support

Each profile gets the exhaustive piecewise-linear fit of :mod:`layerscope.measures.changepoints` (``n_breaks``
breaks, segments of at least ``min_size`` points); its breaks are the first layers of the new segments. Measures
that react to the same event (e.g. a norm, a massive-activation ratio and a spectrum all driven by one outlier
token) form a family, and a family casts one vote: its k-th break is the lower median (an actual layer, the
smaller of two middle values) of its measures' k-th breaks; the consensus is the lower median over families.

Uncertainty: every resample (texts drawn with replacement, each measure recomputed) is refitted the same way.
A boundary's interval is the ``level`` percentile interval of its resampled values (lower and higher order
statistics, so the ends are layers); ``support`` is the fraction of resamples in which that family (or the
consensus) has any break within ``tolerance`` layers of the full-data value. ``drop_first`` leaves out each
profile's first point (the one made from layer 0, the embeddings) before fitting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .changepoints import many_breaks

CONSENSUS = "consensus"


@dataclass(frozen=True)
class Boundary:
    """The ``index``-th break (1-based) of ``family`` (or "consensus"): ``value`` on the full data (a layer),
    ``ci_lo``/``ci_hi`` its bootstrap interval, ``support`` the fraction of resamples with a break within the
    tolerance of it, ``n`` the resamples in which it was defined."""

    family: str
    index: int
    value: int
    ci_lo: int
    ci_hi: int
    support: float
    n: int


@dataclass
class BoundaryFit:
    measures: dict[str, list[int]]
    families: dict[str, list[int]]
    consensus: list[int] | None
    intervals: list[Boundary]
    skipped: dict[str, str] = field(default_factory=dict)
    """Measures that could not be fitted on the full data, with why."""


def lower_median(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """The smaller middle value along ``axis`` (an element of the data, unlike the mean of two middles)."""
    ordered = np.sort(values, axis=axis)
    return np.take(ordered, (ordered.shape[axis] - 1) // 2, axis=axis)


def bootstrap_boundaries(profiles: dict[str, tuple[list[int], np.ndarray]], families: dict[str, tuple[str, ...]],
                         tolerance: int, n_breaks: int = 2, min_size: int = 2, level: float = 0.95,
                         drop_first: bool = False) -> BoundaryFit:
    """Breaks per measure, family and consensus on the full data (row 0 of each profile) and on every resample
    (the other rows), with intervals and support (module docstring). A measure with a non-finite value in row 0,
    or too few points, is skipped (and says why); a resample where a measure is not finite leaves that measure
    out of its family for that resample only."""
    per_measure, skipped = {}, {}
    for name, (layers, values) in profiles.items():
        values = np.atleast_2d(np.asarray(values, dtype=np.float64))
        layers = np.asarray(layers)
        if drop_first:
            layers, values = layers[1:], values[:, 1:]
        if len(layers) < (n_breaks + 1) * min_size:
            skipped[name] = f"{len(layers)} layers, fewer than {(n_breaks + 1) * min_size} for {n_breaks + 1} " \
                            f"segments of {min_size}"
            continue
        if not np.isfinite(values[0]).all():
            skipped[name] = "a value is not finite"
            continue
        finite = np.isfinite(values).all(axis=1)
        found = np.full((len(values), n_breaks), np.nan)
        found[finite] = layers[many_breaks(values[finite], n_breaks, min_size)]
        per_measure[name] = found  # (R + 1, n_breaks) layers, NaN where a resample was not finite
    voted = {family: _vote([per_measure[m] for m in members if m in per_measure])
             for family, members in families.items()}
    voted = {family: v for family, v in voted.items() if v is not None}
    consensus = _vote(list(voted.values()))
    intervals = [b for family, v in voted.items() for b in _interval(family, v, tolerance, level)]
    if consensus is not None:
        intervals += _interval(CONSENSUS, consensus, tolerance, level)
    return BoundaryFit(measures={m: [int(b) for b in v[0]] for m, v in per_measure.items()},
                       families={f: [int(b) for b in v[0]] for f, v in voted.items()},
                       consensus=None if consensus is None else [int(b) for b in consensus[0]],
                       intervals=intervals, skipped=skipped)


def _vote(members: list[np.ndarray]) -> np.ndarray | None:
    """(R + 1, n_breaks): per resample and break the lower median over the members that have one (NaN: none);
    None when no member is defined on the full data."""
    if not members:
        return None
    stacked = np.stack(members)  # (M, R + 1, n_breaks)
    ordered = np.sort(stacked, axis=0)  # NaN last
    count = np.isfinite(stacked).sum(axis=0)  # (R + 1, n_breaks)
    index = np.maximum(count - 1, 0) // 2
    out = np.take_along_axis(ordered, index[None], axis=0)[0]
    out[count == 0] = np.nan
    return out if np.isfinite(out[0]).all() else None


def _interval(family: str, breaks: np.ndarray, tolerance: int, level: float) -> list[Boundary]:
    full, resampled = breaks[0], breaks[1:]
    defined = np.isfinite(resampled).all(axis=1)
    near = (np.abs(resampled[defined][:, :, None] - full[None, None, :]) <= tolerance).any(axis=1)  # (R', k)
    out = []
    for k, value in enumerate(full):
        column = resampled[defined, k]
        if len(column):
            lo = np.quantile(column, (1 - level) / 2, method="lower")
            hi = np.quantile(column, 1 - (1 - level) / 2, method="higher")
            support = float(near[:, k].mean())
        else:
            lo = hi = value
            support = float("nan")
        out.append(Boundary(family, k + 1, int(value), int(lo), int(hi), support, int(defined.sum())))
    return out
