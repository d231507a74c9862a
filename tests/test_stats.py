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


def exact_permutation_p(x, y):
    """Every ordering of y, one np.corrcoef each: the share with |r| at least the observed |r|."""
    r = np.corrcoef(x, y)[0, 1]
    return np.mean([abs(np.corrcoef(x, y[list(perm)])[0, 1]) >= abs(r) - 1e-12
                    for perm in itertools.permutations(range(len(y)))])


def test_permutation_pvalue_enumerates_every_ordering_when_it_can():
    from layerscope.stats import permutation_pvalue

    x = np.array([0.3, 1.2, 0.8, 2.5, 1.9, 3.1])
    y = np.array([0.1, 0.9, 1.4, 1.8, 2.6, 2.2])
    exact = exact_permutation_p(x, y)  # all 720 orderings
    assert permutation_pvalue(x, y, 720, np.random.default_rng(0)) == pytest.approx(exact, abs=1e-12)
    assert 0 < exact < 0.1


def test_permutation_pvalues_per_column_match_the_exact_loop():
    from layerscope.stats import permutation_pvalues

    rng = np.random.default_rng(3)
    x = rng.normal(size=(7, 4))
    y = x[:, 0] + rng.normal(scale=0.7, size=7)
    x[:, 3] = 2.0  # constant: r undefined
    p = permutation_pvalues(x, y, 10_000, rng)  # 7! = 5040 <= 10_000: exact
    np.testing.assert_allclose(p[:3], [exact_permutation_p(x[:, j], y) for j in range(3)], atol=1e-12)
    assert np.isnan(p[3])


def test_permutation_pvalues_sample_orderings_when_n_factorial_is_too_many():
    from layerscope.stats import permutation_pvalues

    rng = np.random.default_rng(4)
    x = rng.normal(size=(7, 2))
    y = x[:, 0] - x[:, 1] + rng.normal(size=7)
    exact = [exact_permutation_p(x[:, j], y) for j in range(2)]
    p = permutation_pvalues(x, y, 4000, np.random.default_rng(1))  # 4000 < 5040: random orderings
    np.testing.assert_allclose(p, exact, atol=0.025)  # ~4 standard errors
    assert np.all(p >= 1 / 4001)  # (1 + hits) / (1 + N): never 0
    np.testing.assert_array_equal(p, permutation_pvalues(x, y, 4000, np.random.default_rng(1)))
    assert not np.array_equal(p, permutation_pvalues(x, y, 4000, np.random.default_rng(2)))


def test_bca_interval_equals_scipy_bootstrap_per_column():
    from layerscope.stats import bca_pearson_ci

    rng = np.random.default_rng(6)
    x = rng.normal(size=(25, 3))
    y = x[:, 1] + rng.exponential(size=25)
    lo, hi = bca_pearson_ci(x, y, 500, 0.9, np.random.default_rng(11))
    for j in range(3):
        ref = sp.bootstrap((x[:, j], y), lambda a, b: np.corrcoef(a, b)[0, 1], paired=True, vectorized=False,
                           n_resamples=500, confidence_level=0.9, method="BCa", rng=np.random.default_rng(11))
        assert (lo[j], hi[j]) == pytest.approx(tuple(ref.confidence_interval), abs=1e-10)


def test_bca_interval_is_nan_without_a_warning_where_r_is_undefined(recwarn):
    from layerscope.stats import bca_pearson_ci

    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(20, 2)), rng.normal(size=20)
    x[:, 1] = 3.0
    lo, hi = bca_pearson_ci(x, y, 300, 0.95, np.random.default_rng(0))
    assert np.isnan(lo[1]) and np.isnan(hi[1]) and not recwarn.list
    assert (lo[0], hi[0]) == pytest.approx(
        tuple(c[0] for c in bca_pearson_ci(x[:, :1], y, 300, 0.95, np.random.default_rng(0))), abs=1e-12)


def test_bca_interval_differs_from_the_percentile_one_on_skewed_data():
    """r near 1 has a strongly skewed bootstrap distribution; BCa shifts the interval away from the
    percentile one drawn from the very same resamples."""
    from layerscope.stats import bca_pearson_ci

    rng = np.random.default_rng(0)
    x = rng.lognormal(size=15)
    y = x + rng.normal(scale=0.5, size=15)  # r = 0.947
    lo, hi = bca_pearson_ci(x[:, None], y, 2000, 0.95, np.random.default_rng(0))
    pct = sp.bootstrap((x, y), lambda a, b: np.corrcoef(a, b)[0, 1], paired=True, vectorized=False,
                       n_resamples=2000, method="percentile", rng=np.random.default_rng(0)).confidence_interval
    assert lo[0] - pct.low > 0.03  # 0.775 vs 0.720: BCa moves the long lower tail up
    assert lo[0] < np.corrcoef(x, y)[0, 1] < hi[0]


def test_bh_qvalues_by_hand_with_nan_kept():
    from layerscope.stats import bh_qvalues

    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): p * m / rank = 0.02, 0.02, 0.04, 0.04, already monotone
    q = bh_qvalues([0.01, 0.04, np.nan, 0.03, 0.005])
    np.testing.assert_allclose(q, [0.02, 0.04, np.nan, 0.04, 0.02])
    np.testing.assert_allclose(bh_qvalues([0.01, 0.02, 0.9]), [0.03, 0.03, 0.9])  # 0.01*3/1 -> min(0.03, 0.02*3/2)
