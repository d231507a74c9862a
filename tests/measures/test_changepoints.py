import itertools

import numpy as np
import pytest

from layerscope.errors import LayerscopeError
from layerscope.measures.changepoints import critical_penalties, path_of, piecewise_linear_breaks, segment_costs


def three_segments():
    """30 layers: a rise over 0..6, a plateau with a slight slope over 7..18, a fall over 19..29 (not continuous)."""
    layer = np.arange(30.0)
    return np.where(layer < 7, 0.5 * layer, np.where(layer < 19, 6.0 + 0.05 * layer, 10.0 - 0.4 * (layer - 19)))


def brute_force(y, n_breaks, min_size):
    """Every placement of the breaks, each segment fitted with np.polyfit; the smallest total RSS."""
    size = len(y)
    best = (np.inf, None)
    for breaks in itertools.combinations(range(1, size), n_breaks):
        bounds = [0, *breaks, size]
        if any(b - a < min_size for a, b in itertools.pairwise(bounds)):
            continue
        rss = 0.0
        for a, b in itertools.pairwise(bounds):
            x = np.arange(a, b, dtype=float)
            residuals = y[a:b] - np.polyval(np.polyfit(x, y[a:b], 1), x)
            rss += float(residuals @ residuals)
        if rss < best[0]:
            best = (rss, breaks)
    return best


def test_noiseless_breaks_are_found_exactly():
    y = three_segments()
    fit = piecewise_linear_breaks(y)
    assert fit.breaks == (7, 19)
    assert fit.rss == pytest.approx(0.0, abs=1e-18)
    assert [(s.start, s.stop) for s in fit.segments] == [(0, 7), (7, 19), (19, 30)]
    expected_lines = [(0.5, 0.0), (0.05, 6.0), (-0.4, 17.6)]
    for segment, (slope, intercept) in zip(fit.segments, expected_lines, strict=True):
        assert segment.slope == pytest.approx(slope, rel=1e-12)
        assert segment.intercept == pytest.approx(intercept, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("n_breaks, min_size", [(2, 2), (2, 4), (1, 3), (3, 2)])
def test_noisy_profile_equals_a_brute_force_search(n_breaks, min_size):
    y = three_segments()[:24] + np.random.default_rng(n_breaks * 10 + min_size).normal(scale=0.8, size=24)
    rss, breaks = brute_force(y, n_breaks, min_size)
    fit = piecewise_linear_breaks(y, n_breaks=n_breaks, min_size=min_size)
    assert fit.breaks == breaks
    assert fit.rss == pytest.approx(rss, rel=1e-10)


def test_no_breaks_is_one_line():
    y = np.array([1.0, 2.0, 2.0, 5.0])  # least squares: slope 1.2, intercept 0.7, residuals 0.3, 0.1, -1.1, 0.7
    fit = piecewise_linear_breaks(y, n_breaks=0)
    assert fit.breaks == ()
    assert fit.segments[0].slope == pytest.approx(1.2, rel=1e-12)
    assert fit.segments[0].intercept == pytest.approx(0.7, rel=1e-12)
    assert fit.rss == pytest.approx(0.09 + 0.01 + 1.21 + 0.49, rel=1e-12)


def test_bad_profiles_are_refused():
    with pytest.raises(LayerscopeError, match="NaN or inf at 1 layer"):
        piecewise_linear_breaks(np.array([1.0, np.nan, 2.0, 3.0, 4.0, 5.0]))
    with pytest.raises(ValueError, match="too few"):
        piecewise_linear_breaks(np.arange(5.0), n_breaks=2, min_size=2)
    with pytest.raises(ValueError, match="min_size >= 2"):
        piecewise_linear_breaks(np.arange(10.0), min_size=1)


def test_many_breaks_equals_one_fit_per_row():
    from layerscope.measures.changepoints import many_breaks

    rng = np.random.default_rng(11)
    layers = np.arange(25)
    ys = np.cumsum(rng.normal(size=(40, 25)), axis=1) + np.where(layers >= 9, 0.4 * (layers - 9), 0.0)
    for n_breaks, min_size in ((2, 2), (1, 3), (3, 2), (2, 4)):
        got = many_breaks(ys, n_breaks=n_breaks, min_size=min_size)
        want = [piecewise_linear_breaks(y, n_breaks=n_breaks, min_size=min_size).breaks for y in ys]
        assert got.tolist() == [list(w) for w in want]


@pytest.mark.parametrize("min_size", [2, 3])
def test_critical_penalties_of_many_signals_equal_ruptures_path_of_each(min_size):
    """The vectorised k-segment costs against ruptures' Dynp per signal (path_of), and against every cut enumerated
    with np.polyfit for one short signal: max_k (C_0 - C_k) / k."""
    rng = np.random.default_rng(3)
    ys = np.cumsum(rng.normal(size=(6, 17, 2)), axis=1)  # 6 signals of 17 points, 2 columns
    tables = segment_costs(ys, min_size)
    ours = critical_penalties(tables, min_size)
    assert ours == pytest.approx([path_of(t, None, min_size).critical_penalty() for t in tables], rel=1e-12)
    y = ys[0, :10, 0]
    c0 = brute_force(y, 0, min_size)[0]
    by_hand = max((c0 - brute_force(y, k, min_size)[0]) / k for k in range(1, 10 // min_size))
    assert critical_penalties(segment_costs(y[None, :, None], min_size), min_size)[0] == pytest.approx(by_hand)
