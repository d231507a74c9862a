import itertools

import numpy as np
import pytest

from layerscope.measures.cka_debiased import (
    debiased_cka,
    debiased_cka_from_grams,
    debiased_cka_matrix,
    gram,
    random_cka_baseline,
)
from layerscope.measures.similarity import linear_cka


def u_statistic_hsic(k, m):
    """HSIC as the U-statistic over distinct indices (Song et al. 2012, eq. 5's expectation form), by loops:
    mean_{i != j} k_ij m_ij + mean_{i,j,q,r distinct} k_ij m_qr - 2 mean_{i,j,q distinct} k_ij m_iq."""
    n = len(k)
    pairs = [(i, j) for i, j in itertools.permutations(range(n), 2)]
    first = np.mean([k[i, j] * m[i, j] for i, j in pairs])
    second = np.mean([k[i, j] * m[q, r] for i, j, q, r in itertools.permutations(range(n), 4)])
    third = np.mean([k[i, j] * m[i, q] for i, j, q in itertools.permutations(range(n), 3)])
    return first + second - 2 * third


def hand_debiased_cka(x, y):
    k, m = x @ x.T, y @ y.T  # raw, uncentred Gram matrices: the U-statistic needs no centring
    return u_statistic_hsic(k, m) / np.sqrt(u_statistic_hsic(k, k) * u_statistic_hsic(m, m))


@pytest.mark.parametrize("n, d1, d2", [(6, 3, 5), (7, 9, 2), (8, 4, 4)])
def test_debiased_cka_equals_the_u_statistic_by_loops(n, d1, d2):
    rng = np.random.default_rng(n * d1)
    x = rng.normal(size=(n, d1)) + 2.0
    y = x[:, :1] @ rng.normal(size=(1, d2)) + rng.normal(size=(n, d2))
    assert debiased_cka(x, y) == pytest.approx(hand_debiased_cka(x, y), rel=1e-9, abs=1e-12)
    assert debiased_cka(y, x) == pytest.approx(hand_debiased_cka(x, y), rel=1e-9, abs=1e-12)


def test_debiased_cka_of_independent_random_clouds_is_near_zero_where_linear_is_not():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 576)), rng.normal(size=(60, 576))
    assert linear_cka(x, y) > 0.85  # the bias the issue reports (0.91 at n = 60, d = 576)
    assert abs(debiased_cka(x, y)) < 0.05
    assert debiased_cka(x, x) == pytest.approx(1.0, abs=1e-12)
    linear, debiased = random_cka_baseline(60, 576, seed=1)
    assert linear > 0.85 and abs(debiased) < 0.05


def test_matrix_matches_pairwise_values_and_a_subset_of_grams():
    rng = np.random.default_rng(3)
    base = rng.normal(size=(30, 8))
    layers = [base + s * rng.normal(size=(30, 8)) for s in (0.1, 0.5, 2.0)]
    other = [base @ rng.normal(size=(8, 5)), rng.normal(size=(30, 6))]
    within = debiased_cka_matrix(layers)
    across = debiased_cka_matrix(layers, other)
    for i, a in enumerate(layers):
        for j, b in enumerate(layers):
            assert within[i, j] == pytest.approx(debiased_cka(a, b), rel=1e-12)
        for j, b in enumerate(other):
            assert across[i, j] == pytest.approx(debiased_cka(a, b), rel=1e-12)
    u = np.array([0, 3, 4, 9, 12, 20, 29])
    k, m = gram(layers[0]), gram(layers[2])
    assert debiased_cka_from_grams(k[np.ix_(u, u)], m[np.ix_(u, u)]) == pytest.approx(
        hand_debiased_cka(layers[0][u], layers[2][u]), rel=1e-9)
    subset = debiased_cka_matrix(layers, max_texts=10, seed=5)
    rows = np.sort(np.random.default_rng(5).choice(30, size=10, replace=False))
    assert subset[0, 1] == pytest.approx(debiased_cka(layers[0][rows], layers[1][rows]), rel=1e-12)


def test_too_few_inputs_is_a_clear_error():
    with pytest.raises(ValueError, match="at least 4"):
        debiased_cka(np.ones((3, 2)), np.ones((3, 2)))
