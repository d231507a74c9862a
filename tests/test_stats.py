import itertools

import numpy as np
import pytest
from scipy import stats as sp

from layerscope.stats import bootstrap_pearson, pearson, percentile_ci, resample_indices, sign_changes


def test_sign_changes_by_hand():
    assert sign_changes([0.3, 0.1, -0.2, -0.1, 0.4]) == [1, 3]
    assert sign_changes([0.2, 0.0, -0.1]) == []  # touching zero is not a strict sign change
    assert sign_changes([-0.5, -0.1]) == [] and sign_changes([1.0]) == []


def test_pearson_matches_the_textbook_formula_and_handles_constants():
    x, y = np.array([1.0, 2.0, 4.0, 7.0]), np.array([2.0, 1.0, 5.0, 6.0])
    xc, yc = x - x.mean(), y - y.mean()
    r, p = pearson(x, y)
    assert r == pytest.approx((xc @ yc) / np.sqrt((xc @ xc) * (yc @ yc)), abs=1e-12)
    t = r * np.sqrt(2 / (1 - r**2))
    assert p == pytest.approx(2 * sp.t.sf(abs(t), df=2), rel=1e-9)
    assert all(np.isnan(pearson([1, 1, 1], [1, 2, 3])))


def test_bootstrap_ci_of_a_perfect_line_is_one():
    x = np.arange(10.0)
    idx = resample_indices(10, 2000, np.random.default_rng(0))
    r = bootstrap_pearson(x, 3 * x - 2, idx)
    assert np.allclose(r, 1.0) and len(r) == 2000
    assert percentile_ci(r) == pytest.approx((1.0, 1.0))


def test_bootstrap_ci_matches_the_exact_bootstrap_distribution():
    """n = 4: all 4^4 = 256 resamples enumerated give the exact bootstrap distribution of r."""
    x, y = np.array([1.0, 2.0, 4.0, 7.0]), np.array([2.0, 1.0, 5.0, 6.0])
    exact = []
    for combo in itertools.product(range(4), repeat=4):
        xs, ys = x[list(combo)], y[list(combo)]
        if np.std(xs) > 0 and np.std(ys) > 0:
            exact.append(np.corrcoef(xs, ys)[0, 1])
    exact = np.sort(exact)
    cdf = np.arange(1, len(exact) + 1) / len(exact)
    exact_lo, exact_hi = exact[np.searchsorted(cdf, 0.025)], exact[np.searchsorted(cdf, 0.975)]
    lo, hi = percentile_ci(bootstrap_pearson(x, y, resample_indices(4, 200_000, np.random.default_rng(1))))
    assert lo == pytest.approx(exact_lo, abs=0.02) and hi == pytest.approx(exact_hi, abs=0.02)


def test_seeded_resampling_reproduces_the_notebook_loop_exactly():
    """The notebooks: np.random.seed(42), then per resample np.random.choice + pearsonr."""
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=30), rng.normal(size=30)
    np.random.seed(42)
    loop = []
    for _ in range(500):
        i = np.random.choice(30, size=30, replace=True)
        if np.std(x[i]) > 0 and np.std(y[i]) > 0:
            loop.append(sp.pearsonr(x[i], y[i])[0])
    ours = bootstrap_pearson(x, y, resample_indices(30, 500, np.random.RandomState(42)))
    np.testing.assert_allclose(ours, loop, atol=1e-12)
    assert percentile_ci(ours) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=1e-12)


def test_spearman_is_pearson_of_the_ranks():
    from layerscope.stats import spearman

    x, y = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 10.0]
    # ranks of y: 2 1 4 3 5; d = -1 1 -1 1 0, sum d^2 = 4: rho = 1 - 6 * 4 / (5 * 24) = 0.8
    rho, p = spearman(x, y)
    assert rho == pytest.approx(0.8) and 0 < p < 1
    assert all(np.isnan(spearman(x, [1.0] * 5)))


def test_fisher_z_interval_textbook_example():
    from layerscope.stats import fisher_z_ci

    # r = 0.5, n = 28: z = atanh(0.5) = 0.5493, se = 1 / 5, z +- 1.96 * 0.2 -> r in (0.1560, 0.7358)
    lo, hi = fisher_z_ci(0.5, 28)
    assert lo == pytest.approx(np.tanh(0.549306 - 0.391993), abs=1e-5) and lo == pytest.approx(0.1560, abs=1e-4)
    assert hi == pytest.approx(0.7358, abs=1e-4)
    assert all(np.isnan(fisher_z_ci(0.5, 3)))


def test_permutation_pvalue_approaches_the_exact_enumeration():
    from layerscope.stats import permutation_pvalue

    x = np.array([0.3, 1.2, 0.8, 2.5, 1.9, 3.1])
    y = np.array([0.1, 0.9, 1.4, 1.8, 2.6, 2.2])
    r = np.corrcoef(x, y)[0, 1]
    exact = np.mean([abs(np.corrcoef(x, y[list(perm)])[0, 1]) >= abs(r) - 1e-12
                     for perm in itertools.permutations(range(6))])  # all 720 orderings
    p = permutation_pvalue(x, y, 20_000, np.random.default_rng(0))
    assert exact == pytest.approx(p, abs=0.005) and 0 < exact < 0.1


def test_bh_qvalues_by_hand_with_nan_kept():
    from layerscope.stats import bh_qvalues

    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): p * m / rank = 0.02, 0.02, 0.04, 0.04, already monotone
    q = bh_qvalues([0.01, 0.04, np.nan, 0.03, 0.005])
    np.testing.assert_allclose(q, [0.02, 0.04, np.nan, 0.04, 0.02])
    np.testing.assert_allclose(bh_qvalues([0.01, 0.02, 0.9]), [0.03, 0.03, 0.9])  # 0.01*3/1 -> min(0.03, 0.02*3/2)
