import math

import numpy as np
import pytest
from scipy.stats import ortho_group

from layerscope.measures.entropy import matrix_entropy, mean_prompt_entropy


def with_singular_values(s, n, d, seed=0):
    """z = U diag(s) V^T (n, d) with random orthonormal U, V: the Gram eigenvalues are s^2."""
    u = ortho_group.rvs(n, random_state=seed)[:, : len(s)]
    v = ortho_group.rvs(d, random_state=seed + 1)[:, : len(s)]
    return u @ np.diag(s) @ v.T


def entropy_of(s):
    p = np.square(s) / np.sum(np.square(s))
    return -sum(q * math.log(q) for q in p)


@pytest.mark.parametrize("n, d", [(6, 20), (30, 8)])
def test_entropy_from_known_singular_values(n, d):
    s = np.array([5.0, 3.0, 2.0, 1.0, 0.5, 0.1])
    m = matrix_entropy(with_singular_values(s, n, d), "raw")
    expected = entropy_of(s)
    assert m.entropy == pytest.approx(expected, rel=1e-10)
    assert m.normalised_entropy == pytest.approx(expected / math.log(min(n, d)), rel=1e-10)
    assert m.effective_rank == pytest.approx(math.exp(expected), rel=1e-10)


def test_rank_one_has_zero_entropy():
    z = np.outer([1.0, -2.0, 3.0, 0.5], np.arange(1.0, 8.0))
    m = matrix_entropy(z, "raw")
    assert m.entropy == 0.0
    assert m.normalised_entropy == 0.0
    assert m.effective_rank == 1.0


def test_orthonormal_matrix_has_the_largest_entropy():
    n = 7
    m = matrix_entropy(ortho_group.rvs(n, random_state=3), "raw")
    assert m.entropy == pytest.approx(math.log(n), rel=1e-12)
    assert m.normalised_entropy == pytest.approx(1.0, rel=1e-12)
    assert m.effective_rank == pytest.approx(n, rel=1e-12)


def test_one_row_or_column_has_normalised_entropy_zero():
    for z in (np.array([[1.0, 2.0, 3.0]]), np.array([[1.0], [2.0]])):
        m = matrix_entropy(z, "raw")
        assert (m.entropy, m.normalised_entropy, m.effective_rank) == (0.0, 0.0, 1.0)


def test_mean_prompt_entropy_averages_and_skips_one_token_texts():
    a = with_singular_values(np.array([2.0, 1.0]), 4, 10, seed=4)
    b = with_singular_values(np.array([1.0, 1.0, 1.0]), 5, 10, seed=6)
    one_token = np.ones((1, 10))
    mean = mean_prompt_entropy(iter([a, one_token, b]), "raw")
    ea, eb = entropy_of([2.0, 1.0]), math.log(3)
    assert mean.entropy == pytest.approx((ea + eb) / 2, rel=1e-10)
    assert mean.normalised_entropy == pytest.approx((ea / math.log(4) + eb / math.log(5)) / 2, rel=1e-10)
    assert mean.effective_rank == pytest.approx((math.exp(ea) + 3) / 2, rel=1e-10)
    assert (mean.n_texts, mean.n_skipped) == (2, 1)
    with pytest.raises(ValueError, match="2 or more tokens"):
        mean_prompt_entropy([one_token])


def test_all_zero_states_are_an_error():
    with pytest.raises(ValueError, match="all zeros"):
        matrix_entropy(np.zeros((3, 4)), "raw")


def skean_by_hand(z):
    """Skean et al.'s released convention written out row by row: each token minus the tokens' mean, divided by its
    length; the Gram (z z^T, or z^T z when N > D) with negative entries set to 0; eigenvalues p normalised;
    -sum p log p and that over log(min(N, D))."""
    rows = [list(r) for r in z]
    mean = [sum(col) / len(rows) for col in zip(*rows, strict=True)]
    rows = [[a - m for a, m in zip(r, mean, strict=True)] for r in rows]
    rows = [[a / math.sqrt(sum(b * b for b in r)) for a in r] for r in rows]
    u = np.array(rows)
    k = u @ u.T if len(rows) <= len(rows[0]) else u.T @ u
    k = np.where(k < 0, 0.0, k)
    values = [v for v in np.linalg.eigvalsh(k) if v > 1e-12 * max(np.linalg.eigvalsh(k))]
    p = [v / sum(values) for v in values]
    s = -sum(q * math.log(q) for q in p)
    return s, s / math.log(min(z.shape))


@pytest.mark.parametrize("n, d", [(6, 9), (12, 4)])
def test_authors_convention_against_their_formula_by_hand(n, d):
    rng = np.random.default_rng(n)
    z = rng.normal(size=(n, d)) + 5.0 * rng.normal(size=d)  # a shared offset: what centring removes
    z[:, 0] *= 40.0  # an outlier dimension dominates the raw states
    m = matrix_entropy(z)
    entropy, normalised = skean_by_hand(z)
    assert m.entropy == pytest.approx(entropy, rel=1e-10)
    assert m.normalised_entropy == pytest.approx(normalised, rel=1e-10)
    assert abs(matrix_entropy(z, "raw").normalised_entropy - normalised) > 0.05  # the conventions differ
    with pytest.raises(ValueError, match="choose one of skean, raw"):
        matrix_entropy(z, "centred")


@pytest.mark.parametrize("convention", ["skean", "raw"])
def test_entropy_from_a_subset_of_one_gram_equals_the_states(convention):
    from layerscope.measures.entropy import gram_entropy

    rng = np.random.default_rng(8)
    z = rng.normal(size=(40, 25)) + 3.0 * rng.normal(size=25)
    k = z @ z.T
    for u in (np.arange(10), np.array([1, 5, 7, 20, 33, 39]), np.arange(25)):
        want = matrix_entropy(z[u], convention).normalised_entropy
        assert gram_entropy(k[np.ix_(u, u)], 25, convention) == pytest.approx(want, rel=1e-9)
    if convention == "skean":
        with pytest.raises(ValueError, match="pass the states"):
            gram_entropy(k, 25)
