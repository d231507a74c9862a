"""The pair studies' figures show the uncertainty and say what they show: interval bands whose vertices are
the table's ci_lo / ci_hi, the final layer after the final norm as a separate hollow marker (never part of the
line), and no band where the table has no interval (seed compat). Built from hand-made results."""

import numpy as np
import pytest
from matplotlib.collections import PathCollection, PolyCollection

from layerscope.report.plotting import AFTER_NORM, POOLING_COLORS
from layerscope.studies.divergence.figures import figures as divergence_figures
from layerscope.studies.phases.figures import figures as phases_figures
from layerscope.studies.scaling.figures import figures as scaling_figures
from layerscope.studies.shared.inputs import NORM_CHECK
from layerscope.study import StudyResult
from layerscope.study.result import make_table

N_LAYERS = 4
R = {"mean": [0.1, 0.3, -0.2, 0.4, 0.5], "last": [0.0, -0.1, 0.2, 0.3, -0.4], "first": [0.2, 0.2, 0.1, 0.0, 0.1]}
"""r at layers 0..4 per pooling; the value at layer 4 is the pre-norm one."""
POST_NORM = {"mean": 0.9, "last": -0.8, "first": 0.7}
"""r at layer 4 after the final norm."""
HALF = {"mean": 0.2, "last": 0.25, "first": 0.3}
"""Half-width of each pooling's interval (the bounds are r -+ it, and an asymmetric 0.05 shift on top)."""


def bounds(pooling, r):
    return r - HALF[pooling] + 0.05, r + HALF[pooling] + 0.05


def rows(metric, poolings, stage=True, intervals=True, extra=None, post_subset=NORM_CHECK):
    """Rows of r per layer (subset all), a decoy subset and, with ``stage``, the post-norm final row in subset
    ``post_subset`` (the studies keep it as the check "after the final norm") and a decoy one."""
    out = []
    for pooling in poolings:
        for layer, r in enumerate(R[pooling]):
            lo, hi = bounds(pooling, r) if intervals else (np.nan, np.nan)
            row = {"model": "m", "layer": layer, "n_layers": N_LAYERS, "depth": layer / N_LAYERS,
                   "pooling": pooling, "metric": metric, "value": r, "ci_lo": lo, "ci_hi": hi, "subset": "all",
                   **(extra or {})}
            if stage:
                row["stage"] = "pre_norm" if layer == N_LAYERS else None
            out.append(row)
            out.append({**row, "subset": "without c", "value": r + 5, "ci_lo": lo + 5, "ci_hi": hi + 5})
        if stage:
            lo, hi = bounds(pooling, POST_NORM[pooling]) if intervals else (np.nan, np.nan)
            post = {**out[-2], "stage": "post_norm", "value": POST_NORM[pooling], "ci_lo": lo, "ci_hi": hi}
            out += [{**post, "subset": post_subset}, {**post, "subset": "without c", "value": -5.0}]
    return make_table(out)


def result(study, table, summary, compat=None):
    return StudyResult(study=study, config={"compat": compat, "ci_level": 0.9}, manifest={},
                       summary={"models": {"m": summary}}, table=table)


def bands(ax):
    """The vertex set of each band (fill_between PolyCollection) on ``ax``."""
    return [{tuple(np.round(v, 9)) for path in c.get_paths() for v in path.vertices}
            for c in ax.collections if isinstance(c, PolyCollection)]


def expected_band(x, pooling, values):
    x = np.asarray(x, dtype=float)
    return {tuple(np.round(v, 9)) for xi, r in zip(x, values, strict=False) for v in ((xi, bounds(pooling, r)[0]),
                                                                        (xi, bounds(pooling, r)[1]))}


def line(ax, label):
    found, = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return np.asarray(found.get_xdata(), dtype=float), np.asarray(found.get_ydata(), dtype=float)


def after_norm_points(ax):
    """(x, y) of every hollow marker (no face colour: the final layer after the final norm), sorted."""
    marks = [c for c in ax.collections if isinstance(c, PathCollection) and len(c.get_facecolors()) == 0]
    return sorted(tuple(np.round(p, 9)) for c in marks for p in c.get_offsets())


DIVERGENCE = {"divergence_points": {p: [] for p in POOLING_COLORS},
              "pooling_comparison": [{"pooling": p, "r": R[p][-1], "ci_lo": bounds(p, R[p][-1])[0],
                                      "ci_hi": bounds(p, R[p][-1])[1]} for p in POOLING_COLORS]}


def test_divergence_curves_get_bands_from_ci_columns_and_a_hollow_post_norm_marker():
    fig = divergence_figures(result("divergence", rows("r_ua_pref", POOLING_COLORS), DIVERGENCE))["divergence"]
    curve, bars = fig.axes[:2]
    for pooling in POOLING_COLORS:
        x, y = line(curve, pooling)
        assert list(x) == [0, 1, 2, 3, 4] and list(y) == R[pooling]  # pre-norm at layer 4, no post-norm, no decoy
    assert sorted(map(sorted, bands(curve))) == sorted(
        sorted(expected_band(range(5), p, R[p])) for p in POOLING_COLORS)
    assert after_norm_points(curve) == sorted((4.0, POST_NORM[p]) for p in POOLING_COLORS)
    assert [t.get_text() for t in curve.get_legend().get_texts()].count(AFTER_NORM) == 1
    assert "90% CI" in [t.get_text() for t in curve.get_legend().get_texts()]
    # the final-layer bars carry their interval as vertical lines from ci_lo to ci_hi
    segments, = [c.get_segments() for c in bars.collections if c.get_label() == "90% CI"]
    np.testing.assert_allclose(sorted((s[0][1], s[1][1]) for s in segments),
                               sorted(bounds(p, R[p][-1]) for p in POOLING_COLORS))


def test_divergence_without_stage_or_intervals_draws_every_row_and_no_band():
    """Seed compat: no interval in the table (make_table leaves ci_lo / ci_hi empty), no stage column."""
    table = rows("r_ua_pref", POOLING_COLORS, stage=False, intervals=False)
    summary = {**DIVERGENCE, "pooling_comparison": [{"pooling": p, "r": R[p][-1]} for p in POOLING_COLORS]}
    fig = divergence_figures(result("divergence", table, summary, compat="notebooks"))["divergence"]
    curve = fig.axes[0]
    assert "stage" not in table and bands(curve) == []
    assert list(line(curve, "mean")[1]) == R["mean"]
    assert after_norm_points(curve) == []


def test_scaling_bands_on_both_panels_and_post_norm_marker_off_the_line():
    table = rows("r_ua_pref", ["mean"], post_subset="all")  # a post-norm row in the main subset works too
    fig = scaling_figures(result("scaling", table, {}))["scaling"]
    absolute, relative = fig.axes[:2]
    for ax, scale in ((absolute, 1), (relative, 100 / N_LAYERS)):
        x, y = line(ax, "m")
        assert list(x) == pytest.approx([scale * layer for layer in range(5)]) and list(y) == R["mean"]
        assert bands(ax) == [expected_band(scale * np.arange(5), "mean", R["mean"])]
        assert after_norm_points(ax) == [(round(scale * N_LAYERS, 9), POST_NORM["mean"])]


def test_phases_band_from_bca_bounds_by_default_error_bars_in_seed_compat():
    table = rows("r_centroid_pref", ["mean"], extra={"significant": False})
    fig = phases_figures(result("phases", table, {"pattern": "NONE"}))["phases"]
    ax = fig.axes[0]
    assert bands(ax) == [expected_band(range(5), "mean", R["mean"])]
    assert list(line(ax, "m")[1]) == R["mean"]
    assert after_norm_points(ax) == [(4.0, POST_NORM["mean"])]

    seed = phases_figures(result("phases", rows("r_centroid_pref", ["mean"], stage=False,
                                                extra={"significant": False}), {"pattern": "NONE"},
                                 compat="notebooks"))["phases"].axes[0]
    assert bands(seed) == []
    caps, = [c for c in seed.containers]  # the notebook's error bars, lo to hi
    segments = caps.lines[2][0].get_segments()
    np.testing.assert_allclose(sorted((s[0][1], s[1][1]) for s in segments),
                               sorted(bounds("mean", r) for r in R["mean"]))
