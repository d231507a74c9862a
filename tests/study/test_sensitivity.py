"""The verdict primitives: Williams' test, leave-one-out r, Cook's distance, influence and sign flips, against
refits by hand and a Monte-Carlo type-I rate."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from layerscope.stats import cooks_distance, dependent_r_test, leave_one_out_r, wilson
from layerscope.study.sensitivity import check_entry, influence, not_significant, robustness, sign_flips

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hand_flips import hand_null, hand_p_fwer  # noqa: E402


def test_leave_one_out_r_equals_corrcoef_without_each_point():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=9), rng.normal(size=9)
    expected = [np.corrcoef(np.delete(x, i), np.delete(y, i))[0, 1] for i in range(9)]
    np.testing.assert_allclose(leave_one_out_r(x, y), expected, rtol=1e-12)


def test_cooks_distance_equals_the_refit_definition():
    """D_i = sum_j (yhat_j - yhat_j(i))^2 / (2 s^2): the fitted values with and without point i."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=8)
    y = 2 * x + rng.normal(size=8)
    y[3] += 6
    full = np.polyfit(x, y, 1)
    s2 = ((y - np.polyval(full, x)) ** 2).sum() / (len(x) - 2)
    expected = [((np.polyval(full, x) - np.polyval(np.polyfit(np.delete(x, i), np.delete(y, i), 1), x)) ** 2).sum()
                / (2 * s2) for i in range(len(x))]
    np.testing.assert_allclose(cooks_distance(x, y), expected, rtol=1e-9)


def test_williams_test_is_zero_for_equal_correlations_and_symmetric():
    assert dependent_r_test(0.4, 0.4, 0.3, 20) == (0.0, 1.0)
    t1, p1 = dependent_r_test(0.6, 0.1, 0.3, 20)
    t2, p2 = dependent_r_test(0.1, 0.6, 0.3, 20)
    assert t1 == pytest.approx(-t2) and p1 == pytest.approx(p2)
    assert np.isnan(dependent_r_test(0.6, 0.1, 0.3, 3)[0])


def test_williams_test_holds_its_level_and_finds_a_real_difference():
    """Under H0 (x and z equally correlated with y) about 5% of tests reject at 0.05; with a real difference
    nearly all do."""
    rng = np.random.default_rng(2)
    n, trials = 30, 2000
    cov = np.array([[1, 0.4, 0.4], [0.4, 1, 0.5], [0.4, 0.5, 1]])  # y, x, z
    data = rng.multivariate_normal(np.zeros(3), cov, size=(trials, n))
    rejections = 0
    for sample in data:
        r = np.corrcoef(sample.T)
        rejections += dependent_r_test(r[0, 1], r[0, 2], r[1, 2], n)[1] < 0.05
    assert 0.035 < rejections / trials < 0.065
    cov = np.array([[1, 0.7, 0.0], [0.7, 1, 0.3], [0.0, 0.3, 1]])
    data = rng.multivariate_normal(np.zeros(3), cov, size=(200, n))
    power = np.mean([dependent_r_test(*(lambda r: (r[0, 1], r[0, 2], r[1, 2]))(np.corrcoef(s.T)), n)[1] < 0.05
                     for s in data])
    assert power > 0.95


def test_influence_flags_the_leverage_category_and_not_the_others():
    """Five categories with no relation and one far out on both axes: r is large only because of it."""
    x = np.array([0.1, -0.2, 0.15, -0.1, 0.05, 3.0])
    y = np.array([0.3, 0.1, -0.2, 0.2, -0.1, -5.0 * -1])
    names = ["a", "b", "c", "d", "e", "numeric"]
    out = influence(x, y, names)
    assert out["flagged"] == ["numeric"]
    assert out["cutoff"] == pytest.approx(stats.f.median(2, 4))
    assert out["loo_r"]["numeric"] == pytest.approx(np.corrcoef(x[:5], y[:5])[0, 1])
    assert out["r"] == pytest.approx(stats.pearsonr(x, y).statistic)
    assert out["range"][0] == pytest.approx(min(np.corrcoef(np.delete(x, i), np.delete(y, i))[0, 1] for i in range(6)))


def test_sign_flips_split_noise_from_a_real_change():
    rng = np.random.default_rng(3)
    y = rng.normal(size=40)
    strong_pos, strong_neg = y + 0.3 * rng.normal(size=40), -y + 0.3 * rng.normal(size=40)
    weak = [0.02 * y + rng.normal(size=40) for _ in range(2)]
    r_weak = [np.corrcoef(w, y)[0, 1] for w in weak]
    if r_weak[0] * r_weak[1] > 0:
        weak[1] = -weak[1]
    significant, noise = sign_flips([0, 1], np.column_stack([strong_pos, strong_neg]), y, n_permutations=300)
    assert [(f["layer_before"], f["layer_after"]) for f in significant] == [(0, 1)] and noise == []
    within, noise = sign_flips([2, 3], np.column_stack(weak), y, n_permutations=300, seed=5)
    assert within == [] and [(f["layer_before"], f["layer_after"]) for f in noise] == [(2, 3)]
    t, p = dependent_r_test(np.corrcoef(strong_neg, y)[0, 1], np.corrcoef(strong_pos, y)[0, 1],
                            np.corrcoef(strong_pos, strong_neg)[0, 1], 40)
    assert significant[0]["p"] == pytest.approx(p)
    assert significant[0]["p_fwer"] == pytest.approx(1 / 301)  # no permutation comes near a real reversal
    assert noise[0]["p_fwer"] >= 0.05


def test_the_family_wise_p_is_the_max_t_permutation_p_of_a_hand_loop():
    # 7 cases: every one of the 7! = 5040 orderings of y is a draw, here and in the hand loop
    rng = np.random.default_rng(12)
    y = rng.normal(size=7)
    x = 0.5 * np.cumsum(rng.normal(size=(7, 6)), axis=1) + y[:, None] * np.array([3, 2.5, -3, -3, 0.3, -0.3])
    significant, noise = sign_flips(list(range(6)), x, y, n_permutations=5040, seed=2)
    flips = significant + noise
    assert len(significant) >= 1 and len(noise) >= 1, "a real reversal and a flip within noise, to test both"
    null = hand_null(x, y)
    for flip in flips:
        assert flip["p_fwer"] == pytest.approx(hand_p_fwer(x, y, flip["t"], null))
        assert (flip in significant) == (flip["p_fwer"] < 0.05)


def test_a_profile_with_no_association_shows_a_significant_flip_at_most_at_the_stated_rate():
    # 300 null profiles: 15 categories, 20 layers of a smooth random walk (consecutive layers correlate as a
    # model's do, so the profile crosses zero many times), y unrelated to x. Benjamini-Hochberg over the
    # candidate flips called a divergence point in 8.6 % of shuffled-preference runs on SmolLM2.
    rng = np.random.default_rng(0)
    alarms = 0
    for i in range(300):
        x = np.cumsum(rng.normal(size=(15, 20)), axis=1)
        significant, _ = sign_flips(list(range(20)), x, rng.normal(size=15), n_permutations=200, seed=i)
        alarms += bool(significant)
    lo, hi = wilson(alarms, 300)
    assert lo <= 0.05 and alarms / 300 <= 0.08, alarms  # 4.8 % over 1500 such profiles; BH: 13 %


def test_texts_name_what_decides_the_label():
    assert not_significant(6, 0.1, 0.21, (-0.17, 0.95)) == \
        "not significant (n = 6, p_perm = 0.100, q = 0.210, 95% CI [-0.170, +0.950])"
    checks = [check_entry("without position 0", 0.8, "ALIGNED", False),
              check_entry("after the final norm", 0.1, "not significant", True)]
    assert robustness(checks) == "not robust: flips after the final norm"
    assert robustness(checks[:1]) == "robust to all 1 sensitivity checks"
    assert robustness([]) == ""
