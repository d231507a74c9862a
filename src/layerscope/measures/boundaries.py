"""Change points over depth, as many as the data show: one joint fit per family of measures, a penalty calibrated on
the resamples' own noise, and bootstrap intervals.

    fit = bootstrap_boundaries(
        {"lens_kl": (layers, values), ...},                 # values: (R + 1, L), row 0 the full data,
        {"lens": ("lens_kl", "lens_top1_agree"), ...},      # rows 1.. the bootstrap resamples
        tolerance=3)
    fit.families["lens"]           # [2, 11, 21]: that family's breaks on the full data (layers)
    fit.consensus                  # [2, 4, 11, 15, ...]: every family's breaks, merged across families
    fit.intervals                  # one Boundary per break of each family and of the consensus: ci, support, ...
    fit.penalties["lens"]          # the calibrated penalty per break (in the family's noise units)

**The fit.** A family's measures are cut at the same layers: each measure is divided by its noise level (the
root mean square over layers of the resamples' deviations from their mean), and a cut's cost is the residual sum
of squares of independent least-squares lines per segment, summed over the measures
(:mod:`layerscope.measures.changepoints`, searched exactly by ``ruptures``). The number of breaks is the one that
minimises cost + penalty x breaks.

**The penalty.** A profile with no change is a straight line plus noise like the resamples'. For each resample r,
the family's null profile is the full data's straight-line fit plus that resample's deviation from the resamples'
mean, and its critical penalty is the smallest penalty at which the null gets no break (``max_k (C_0 - C_k) / k``).
The families' penalties are set together so that a profile with no change gets a break in any family at most at
rate ``alpha`` (a max-type calibration: each family's critical penalties ranked, the largest rank per resample, and
in every family the smallest rank that the resamples reaching it, plus the new profile, are at most ``alpha`` of).
The rate holds in finite samples for a profile exchangeable with the null profiles (3-4 % with three families at
5 %).

**The consensus.** Every family's breaks, merged across families when they lie within ``merge`` layers of each
other (the lower median of the merged ones; each consensus boundary lists the families that see it): a change
that one family sees is kept, and a change that three families see counts once.

**Uncertainty.** Every resample is cut with the same penalties and merged the same way. For each full-data
boundary, a resample's value is its break (of that family, or of the consensus) nearest to it if within
``tolerance`` layers; ``support`` is the fraction of resamples that have one, the interval is the ``level``
percentile interval of those values (lower and higher order statistics), widened to their range when that interval
is a single layer but some resample put the boundary elsewhere, so a zero-width interval means that no resample moved
it; ``moved`` counts the resamples where it was not at the full-data layer. A consensus boundary's interval also
spans the families' own breaks it joins (families that see one change one layer apart leave its place open by that
layer). ``drop_first`` leaves out each
profile's first point (the one made from layer 0, the embeddings) before fitting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from .changepoints import critical_penalties, penalised_breaks, segment_costs

CONSENSUS = "consensus"
MERGE = 1
"""Layers within which breaks of different families are one consensus boundary (a family on hidden states and one
on transitions between them put the same change one layer apart)."""
ALPHA = 0.05
"""The chance that a profile with no change gets an extra break, in any family (the penalties' calibration)."""
PER_MEASURE_NULLS = 60
"""Null profiles each measure's own (descriptive) fit is calibrated on: the first resamples'."""


@dataclass(frozen=True)
class Boundary:
    """A break of ``family`` (or "consensus"), the ``index``-th from the top (1-based): ``value`` on the full data
    (a layer), ``ci_lo``/``ci_hi`` its bootstrap interval, ``support`` the fraction of resamples with a break within
    the tolerance of it, ``n`` the resamples it was measured on, ``moved`` those where it was not at ``value`` (or
    absent), ``families`` the families that see it (for the consensus; the family itself otherwise)."""

    family: str
    index: int
    value: int
    ci_lo: int
    ci_hi: int
    support: float
    n: int
    moved: int = 0
    families: tuple[str, ...] = ()


@dataclass
class BoundaryFit:
    measures: dict[str, list[int]]
    """Each measure of the profiles (in a family or not) alone on the full data, at its own penalty calibrated on
    the first :data:`PER_MEASURE_NULLS` resamples (a description: the family's joint fit is what counts)."""
    families: dict[str, list[int]]
    consensus: list[int] | None
    intervals: list[Boundary]
    skipped: dict[str, str] = field(default_factory=dict)
    """Measures that could not be fitted on the full data, with why."""
    penalties: dict[str, float] = field(default_factory=dict)
    """Each family's penalty per break, in its noise units."""
    seen_by: list[tuple[str, ...]] = field(default_factory=list)
    """Per consensus boundary, the families that see it."""
    resampled: list[list[int]] = field(default_factory=list)
    """The consensus of every resample (what the intervals are made from)."""


def lower_median(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """The smaller middle value along ``axis`` (an element of the data, unlike the mean of two middles)."""
    ordered = np.sort(values, axis=axis)
    return np.take(ordered, (ordered.shape[axis] - 1) // 2, axis=axis)


@dataclass
class _Family:
    layers: np.ndarray
    """(L,) the layer each point stands for."""
    z: np.ndarray
    """(R + 1, L, M) the members divided by their noise levels; rows with a non-finite value removed."""
    rows: np.ndarray
    """Which of the R + 1 rows ``z`` holds (row 0 always)."""
    unit: np.ndarray
    """(R', L, M) the kept resamples' deviations from their mean, in noise units."""


def bootstrap_boundaries(profiles: dict[str, tuple[list[int], np.ndarray]], families: dict[str, tuple[str, ...]],
                         tolerance: int, min_size: int = 2, level: float = 0.95, drop_first: bool = False,
                         alpha: float = ALPHA, merge: int = MERGE, per_measure: bool = True) -> BoundaryFit:
    """Breaks per family and consensus on the full data (row 0 of each profile) and on every resample (the other
    rows), with calibrated penalties, intervals and support (module docstring). A measure with a non-finite value in
    row 0, too few points, or resamples that never vary (no noise level to calibrate on) is skipped and says why;
    a resample where a member is not finite is left out of its family. ``per_measure``: also fit each measure
    alone (:attr:`BoundaryFit.measures`)."""
    skipped: dict[str, str] = {}
    kept: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, (layers, values) in profiles.items():
        values = np.atleast_2d(np.asarray(values, dtype=np.float64))
        layers = np.asarray(layers)
        if drop_first:
            layers, values = layers[1:], values[:, 1:]
        reason = _unusable(values, len(layers), min_size)
        if reason:
            skipped[name] = reason
            continue
        kept[name] = (layers, values)
    prepared = {f: _prepare({m: kept[m] for m in members if m in kept}) for f, members in families.items()}
    prepared = {f: p for f, p in prepared.items() if p is not None}
    critical = {f: _critical(p, min_size) for f, p in prepared.items()}
    penalties = _calibrate(critical, alpha)
    fitted = {f: _fit_rows(p, penalties[f], min_size) for f, p in prepared.items()}
    n_rows = 1 + max((len(v) - 1 for _, v in kept.values()), default=0)
    intervals: list[Boundary] = []
    for f, rows in fitted.items():
        intervals += _intervals(f, rows[0], [rows.get(r) for r in range(1, n_rows)], tolerance, level, (f,))
    consensus, seen, resampled = None, [], []
    if fitted:
        merged = [_merge({f: rows[r] for f, rows in fitted.items() if r in rows}, merge) for r in range(n_rows)]
        consensus, seen = [b for b, _, _ in merged[0]], [fs for _, fs, _ in merged[0]]
        resampled = [[b for b, _, _ in m] for m in merged[1:]]
        spans = [span for _, _, span in merged[0]]
        intervals += [dataclasses.replace(b, ci_lo=min(b.ci_lo, lo), ci_hi=max(b.ci_hi, hi))
                      for b, (lo, hi) in zip(_intervals(CONSENSUS, consensus, resampled, tolerance, level, None, seen),
                                             spans, strict=True)]
    measures = {}
    if per_measure:
        for name in kept:
            alone = _prepare({name: kept[name]})
            if alone is not None:
                pen = _calibrate({name: _critical(alone, min_size, PER_MEASURE_NULLS)}, alpha)[name]
                measures[name] = _fit_rows(alone, pen, min_size, only_full=True)[0]
    return BoundaryFit(measures=measures, families={f: rows[0] for f, rows in fitted.items()},
                       consensus=consensus, intervals=intervals, skipped=skipped,
                       penalties={f: float(p) for f, p in penalties.items()}, seen_by=seen, resampled=resampled)


def _unusable(values: np.ndarray, n_points: int, min_size: int) -> str | None:
    if n_points < 2 * min_size:
        return f"{n_points} layers, fewer than {2 * min_size} for 2 segments of {min_size}"
    if not np.isfinite(values[0]).all():
        return "a value is not finite"
    resamples = values[1:][np.isfinite(values[1:]).all(axis=1)]
    if len(resamples) < 2 or not np.any(resamples - resamples.mean(axis=0)):
        return "its resamples never vary, so there is no noise level to calibrate a change against"
    return None


def _prepare(members: dict[str, tuple[np.ndarray, np.ndarray]]) -> _Family | None:
    """The family's members on their common layers, in noise units; None without a usable member."""
    if not members:
        return None
    common = sorted(set.intersection(*(set(layers.tolist()) for layers, _ in members.values())))
    stacked = []
    for layers, values in members.values():
        index = np.searchsorted(layers, common)
        stacked.append(values[:, index])
    y = np.stack(stacked, axis=-1)  # (R + 1, L, M)
    rows = np.flatnonzero(np.isfinite(y).all(axis=(1, 2)) | (np.arange(len(y)) == 0))
    y = y[rows]
    deviation = y[1:] - y[1:].mean(axis=0)
    noise = np.sqrt((deviation ** 2).mean(axis=(0, 1)))  # (M,) every member varies (_unusable)
    return _Family(np.asarray(common), y / noise, rows, deviation / noise)


def _critical(p: _Family, min_size: int, most: int | None = None) -> np.ndarray:
    """(R',) each null profile's critical penalty: the full data's straight line per member plus one resample's
    deviation (the first ``most`` resamples' only, when given)."""
    z0 = p.z[0]
    x = np.arange(len(z0), dtype=np.float64)
    xc = x - x.mean()
    slope = xc @ (z0 - z0.mean(axis=0)) / (xc @ xc)
    line = z0.mean(axis=0) + xc[:, None] * slope
    return critical_penalties(segment_costs(line[None] + p.unit[:most], min_size), min_size)


def _calibrate(critical: dict[str, np.ndarray], alpha: float) -> dict[str, float]:
    """Penalties such that a profile with no change, exchangeable with the n null profiles, gets a break in any
    family with probability at most ``alpha``: per family the t-th smallest critical penalty (t/n of the way up
    its ranks, for a family with fewer usable resamples), t the smallest rank with
    ``(#{resamples whose largest rank over the families is >= t} + 1) / (n + 1) <= alpha``.

    The bound holds in finite samples: were the new profile ranked among all n + 1, a null's rank would be at most
    one higher than among the n, so the rule holds for the n + 1 together, and the new profile is any one of them
    (the full-conformal argument; a 1 - alpha quantile of the n nulls' own largest ranks reached 6 % at 5 % with
    three families and 100 resamples: the ranks are coarse). With fewer nulls than that allows (about 20 per
    family at 5 %), t is the largest rank."""
    if not critical:
        return {}
    n = max(len(c) for c in critical.values())
    ranks = np.zeros((len(critical), n))
    for i, c in enumerate(critical.values()):
        ranks[i, : len(c)] = (np.argsort(np.argsort(c, kind="stable"), kind="stable") + 1) * n / len(c)
    largest = ranks.max(axis=0)  # (n,) each resample's largest rank over the families, on the 1 .. n scale
    t = next((t for t in range(1, n + 1) if (np.count_nonzero(largest >= t - 1e-9) + 1) <= alpha * (n + 1)), n)
    return {f: float(np.sort(c)[min(max(int(np.ceil(t * len(c) / n - 1e-9)), 1), len(c)) - 1])
            for f, c in critical.items()}


def _fit_rows(p: _Family, penalty: float, min_size: int, only_full: bool = False) -> dict[int, list[int]]:
    """{row: breaks (layers)} at ``penalty`` for the full data (row 0) and every kept resample."""
    z = p.z[:1] if only_full else p.z
    tables = segment_costs(z, min_size)
    out = {}
    for row, table in zip(p.rows, tables, strict=False):
        out[int(row)] = [int(p.layers[b]) for b in penalised_breaks(table, penalty, min_size)]
    return out


def _merge(breaks: dict[str, list[int]], merge: int) -> list[tuple[int, tuple[str, ...], tuple[int, int]]]:
    """Every family's breaks, those within ``merge`` layers of the first of a run joined into one: its lower median,
    the families that had one there, and the first and last of the joined breaks (the consensus interval spans
    them: the families put the one change at those layers)."""
    points = sorted((b, f) for f, bs in breaks.items() for b in bs)
    out, i = [], 0
    while i < len(points):
        j = i
        while j + 1 < len(points) and points[j + 1][0] - points[i][0] <= merge:
            j += 1
        run = points[i : j + 1]
        values = np.array([b for b, _ in run])
        out.append((int(lower_median(values)), tuple(sorted({f for _, f in run})), (int(values.min()),
                                                                                   int(values.max()))))
        i = j + 1
    return out


def _intervals(family: str, full: list[int], resampled: list[list[int] | None], tolerance: int, level: float,
               families: tuple[str, ...] | None, seen: list[tuple[str, ...]] | None = None) -> list[Boundary]:
    """One :class:`Boundary` per full-data break; ``resampled``: each resample's breaks (None: not measured)."""
    usable = [r for r in resampled if r is not None]
    out = []
    for k, value in enumerate(full):
        near = []
        for breaks in usable:
            if breaks:
                nearest = min(breaks, key=lambda b, v=value: (abs(b - v), b))
                if abs(nearest - value) <= tolerance:
                    near.append(nearest)
        moved = len(usable) - sum(1 for b in near if b == value)
        if near:
            column = np.array(near)
            lo = int(np.quantile(column, (1 - level) / 2, method="lower"))
            hi = int(np.quantile(column, 1 - (1 - level) / 2, method="higher"))
            if lo == hi and (column != lo).any():
                lo, hi = int(column.min()), int(column.max())
            lo, hi = min(lo, value), max(hi, value)
            support = len(near) / len(usable)
        else:
            lo = hi = value
            support = 0.0 if usable else float("nan")
        out.append(Boundary(family, k + 1, int(value), lo, hi, float(support), len(usable), int(moved),
                            families if families is not None else tuple(seen[k])))
    return out
