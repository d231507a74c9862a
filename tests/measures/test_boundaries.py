import numpy as np
import pytest

from layerscope.measures.boundaries import bootstrap_boundaries, lower_median
from layerscope.measures.changepoints import piecewise_linear_breaks

LAYERS = list(range(30))


def resampled(per_text: np.ndarray, n_resamples: int = 200, seed: int = 0) -> np.ndarray:
    """(R + 1, L) means over texts: row 0 every text once, then bootstrap draws of the texts, by a plain loop."""
    rng = np.random.default_rng(seed)
    n = len(per_text)
    rows = [per_text.mean(axis=0)]
    for _ in range(n_resamples):
        rows.append(per_text[rng.integers(0, n, size=n)].mean(axis=0))
    return np.array(rows)


def kinked_texts(kinks, slopes, noise, n_texts=40, seed=1):
    """Per-text profiles over 30 layers: continuous and piecewise linear, the slope changing half-way between layer
    k - 1 and k for each kink k (so k is the first layer of the new segment), plus text noise."""
    rng = np.random.default_rng(seed)
    x = np.arange(30.0)
    y = np.zeros(30)
    edges = [0, *kinks, 30]
    level = 0.0
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        y[a:b] = level + slopes[i] * (x[a:b] - a)
        if i + 1 < len(slopes):
            level = y[b - 1] + (slopes[i] + slopes[i + 1]) / 2
    return y + noise * rng.normal(size=(n_texts, 30))


def test_the_interval_covers_a_planted_boundary_and_is_narrow():
    texts = kinked_texts([8, 20], [1.0, -1.0, 0.5], noise=0.5)
    fit = bootstrap_boundaries({"m": (LAYERS, resampled(texts))}, {"f": ("m",)}, tolerance=2)
    assert fit.measures["m"] == [8, 20] and fit.consensus == [8, 20]
    first, second = [b for b in fit.intervals if b.family == "f"]
    assert first.ci_lo <= 8 <= first.ci_hi and first.ci_hi - first.ci_lo <= 2
    assert second.ci_lo <= 20 <= second.ci_hi and second.ci_hi - second.ci_lo <= 2
    assert first.support > 0.95 and first.n == 200


def test_a_weak_kink_gets_a_wide_interval_and_low_support():
    texts = kinked_texts([8, 20], [1.0, 1.05, 1.0], noise=3.0, seed=2)
    fit = bootstrap_boundaries({"m": (LAYERS, resampled(texts))}, {"f": ("m",)}, tolerance=1)
    first = [b for b in fit.intervals if b.family == "f"][0]
    assert first.ci_hi - first.ci_lo >= 8
    assert first.support < 0.6


def test_an_event_seen_by_five_measures_of_one_family_counts_once():
    one_event = [kinked_texts([12, 22], [0.1, 3.0 + k, -1.0], noise=0.0, n_texts=1)[0] for k in range(5)]
    profiles = {f"spectrum_{k}": (LAYERS, y + 0.01 * np.sin(np.arange(30) * (k + 1))) for k, y in enumerate(one_event)}
    profiles["lens"] = (LAYERS, kinked_texts([5, 22], [2.0, -1.0, 0.0], noise=0.0, n_texts=1)[0])
    profiles["similarity"] = (LAYERS, kinked_texts([6, 23], [-1.0, 1.0, 3.0], noise=0.0, n_texts=1)[0])
    families = {"spectrum": tuple(f"spectrum_{k}" for k in range(5)), "lens": ("lens",),
                "similarity": ("similarity",)}
    firsts = [piecewise_linear_breaks(y).breaks[0] for _, y in profiles.values()]
    assert sorted(firsts)[(len(firsts) - 1) // 2] == 12  # counted per measure, the one event wins
    fit = bootstrap_boundaries(profiles, families, tolerance=1)
    assert fit.families["spectrum"] == [12, 22]
    assert len([b for b in fit.intervals if b.family == "spectrum"]) == 2  # one row per break, not per measure
    assert fit.consensus[0] == 6  # lower median of the three families' first breaks 12, 5, 6
    assert fit.families["lens"] == [5, 22]


def test_drop_first_and_min_size_change_what_is_fitted():
    y = kinked_texts([1, 15], [10.0, 0.0, 1.0], noise=0.0, n_texts=1)
    fit = bootstrap_boundaries({"m": (LAYERS, y)}, {"f": ("m",)}, tolerance=1)
    dropped = bootstrap_boundaries({"m": (LAYERS, y)}, {"f": ("m",)}, tolerance=1, drop_first=True)
    want = piecewise_linear_breaks(y[0, 1:]).breaks
    assert dropped.measures["m"] == [b + 1 for b in want]  # layers, not positions
    assert fit.measures["m"] != dropped.measures["m"]
    wide = bootstrap_boundaries({"m": (LAYERS, y)}, {"f": ("m",)}, tolerance=1, min_size=3)
    assert wide.measures["m"] == list(piecewise_linear_breaks(y[0], min_size=3).breaks)


def test_a_measure_with_nan_is_skipped_with_its_reason():
    y = np.arange(30.0)[None].repeat(3, axis=0)
    bad = y.copy()
    bad[0, 4] = np.nan
    fit = bootstrap_boundaries({"ok": (LAYERS, y), "bad": (LAYERS, bad)}, {"f": ("ok", "bad")}, tolerance=1)
    assert "bad" in fit.skipped and "not finite" in fit.skipped["bad"]
    assert list(fit.measures) == ["ok"]


def test_lower_median_is_an_element():
    assert lower_median(np.array([3, 1, 4, 2])) == 2
    assert lower_median(np.array([5, 1, 3])) == 3
    with pytest.raises(np.exceptions.AxisError):
        lower_median(np.array([1]), axis=2)
