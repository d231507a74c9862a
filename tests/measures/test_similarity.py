import math

import numpy as np
import pytest
from scipy.stats import ortho_group

from layerscope.errors import LayerscopeError
from layerscope.measures.similarity import angular_distance, block_influence, cka_matrix, linear_cka


def naive_cka(x, y):
    """Straight from the HSIC formula: K = X X^T, L = Y Y^T, H = I - 11^T / n, HSIC = tr(KHLH) / (n - 1)^2."""
    n = len(x)
    h = np.eye(n) - np.ones((n, n)) / n

    def hsic(k, m):
        return np.trace(k @ h @ m @ h) / (n - 1) ** 2

    k, m = x @ x.T, y @ y.T  # K and L of the formula
    return hsic(k, m) / math.sqrt(hsic(k, k) * hsic(m, m))


@pytest.mark.parametrize("n, d1, d2", [(20, 50, 70), (80, 6, 9), (30, 10, 60), (40, 40, 40)])
def test_linear_cka_equals_the_hsic_formula(n, d1, d2):
    rng = np.random.default_rng(n + d1)
    x = rng.normal(size=(n, d1)) + 3.0
    y = x[:, : min(d1, d2)] @ rng.normal(size=(min(d1, d2), d2)) + rng.normal(size=(n, d2))
    assert linear_cka(x, y) == pytest.approx(naive_cka(x, y), rel=1e-10)
    assert linear_cka(y, x) == pytest.approx(naive_cka(x, y), rel=1e-10)


@pytest.mark.parametrize("n, d", [(15, 40), (60, 8)])
def test_cka_of_a_layer_with_itself_and_its_invariances(n, d):
    rng = np.random.default_rng(d)
    x = rng.normal(size=(n, d))
    assert abs(linear_cka(x, x) - 1.0) < 1e-12
    rotated = 3.7 * x @ ortho_group.rvs(d, random_state=1)
    assert abs(linear_cka(x, rotated) - 1.0) < 1e-12
    y = rng.normal(size=(n, 5))
    assert linear_cka(rotated, y) == pytest.approx(linear_cka(x, y), rel=1e-10)


def layer_stack(seed, n=25, sizes=(12, 40, 40, 7)):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 4))
    return [base @ rng.normal(size=(4, d)) + 0.5 * rng.normal(size=(n, d)) for d in sizes]


def test_cka_matrix_equals_the_naive_pairwise_loop():
    layers = layer_stack(0)
    expected = np.array([[naive_cka(a, b) for b in layers] for a in layers])
    got = cka_matrix(layers)
    assert got.shape == (4, 4) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    np.testing.assert_array_equal(got, got.T)
    assert np.max(np.abs(np.diag(got) - 1.0)) < 1e-12
    # a generator, and a callable returning one, are read the same way
    np.testing.assert_allclose(cka_matrix(lambda: (x for x in layers)), expected, rtol=1e-10)


def test_cka_matrix_across_two_models():
    a = layer_stack(1, sizes=(12, 40, 7))
    b = layer_stack(2, sizes=(30, 5))
    got = cka_matrix(a, b)
    assert got.shape == (3, 2)
    expected = np.array([[naive_cka(x, y) for y in b] for x in a])
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    same_width = layer_stack(4, sizes=(9, 9, 9))
    stacked = np.array([[naive_cka(x, y) for y in same_width] for x in same_width])
    np.testing.assert_allclose(cka_matrix(np.stack(same_width)), stacked, rtol=1e-10)  # an (L, n, d) array


def test_max_texts_uses_a_seeded_subset_of_rows():
    layers = layer_stack(3, n=60)
    rows = np.sort(np.random.default_rng(7).choice(60, size=20, replace=False))
    expected = np.array([[naive_cka(a[rows], b[rows]) for b in layers] for a in layers])
    got = cka_matrix(layers, max_texts=20, seed=7)
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    np.testing.assert_array_equal(cka_matrix(layers, max_texts=20, seed=7), got)
    assert not np.allclose(cka_matrix(layers, max_texts=20, seed=8), got)
    np.testing.assert_array_equal(cka_matrix(layers, max_texts=60), cka_matrix(layers))  # n <= max_texts: all


def test_cka_errors_and_constant_layers():
    x = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(ValueError, match="same n inputs"):
        linear_cka(x, x[:9])
    with pytest.raises(ValueError, match="same inputs"):
        cka_matrix([x, x[:9]])
    bad = x.copy()
    bad[4, 1] = np.nan
    with pytest.raises(LayerscopeError, match="row 4"):
        linear_cka(bad, x)
    assert math.isnan(linear_cka(np.ones((10, 3)), x))


def naive_block_influence(h, g):
    total = 0.0
    for a, b in zip(h.tolist(), g.tolist(), strict=True):
        dot = sum(p * q for p, q in zip(a, b, strict=True))
        total += 1 - dot / (math.sqrt(sum(p * p for p in a)) * math.sqrt(sum(q * q for q in b)))
    return total / len(h)


def naive_angular_distance(h, g):
    total = 0.0
    for a, b in zip(h.tolist(), g.tolist(), strict=True):
        dot = sum(p * q for p, q in zip(a, b, strict=True))
        cos = dot / (math.sqrt(sum(p * p for p in a)) * math.sqrt(sum(q * q for q in b)))
        total += math.acos(max(-1.0, min(1.0, cos))) / math.pi
    return total / len(h)


def test_block_influence_and_angular_distance_against_a_loop():
    rng = np.random.default_rng(5)
    h = rng.normal(size=(30, 16))
    g = h + 0.8 * rng.normal(size=(30, 16))
    assert block_influence(h, g) == pytest.approx(naive_block_influence(h, g), rel=1e-12)
    assert angular_distance(h, g) == pytest.approx(naive_angular_distance(h, g), rel=1e-12)
    mask = rng.random(30) < 0.5
    assert block_influence(h, g, mask=mask) == pytest.approx(naive_block_influence(h[mask], g[mask]), rel=1e-12)
    assert block_influence(h, h) == pytest.approx(0.0, abs=1e-14)
    assert angular_distance(h, 2 * h) == pytest.approx(0.0, abs=1e-7)  # arccos near 1 is steep
    assert block_influence(h, -h) == pytest.approx(2.0, rel=1e-14)


def test_angular_distance_of_orthogonal_and_opposite_vectors():
    e = np.eye(3)
    assert angular_distance(e[:2], e[1:]) == pytest.approx(0.5, rel=1e-15)
    assert angular_distance(e, -e) == pytest.approx(1.0, rel=1e-15)
    assert block_influence(e[:2], e[1:]) == pytest.approx(1.0, rel=1e-15)


def test_zero_states_need_a_mask():
    h = np.array([[1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(LayerscopeError, match="mask"):
        block_influence(h, h)
    assert block_influence(h, h, mask=np.array([True, False])) == 0.0
