"""Hand-computed geometry: uniformity, UA and centroid asymmetry on 2-D vectors."""

import math

import numpy as np
import pytest

from layerscope.engine.cache.layers import ArraySource, LayerStack
from layerscope.errors import ExtractionError
from layerscope.measures.geometry import centroid_asymmetry, cosine_to, uniformity
from layerscope.studies.shared.categories import category_ua


def test_uniformity_by_hand():
    # cosines: (1,0)-(0,1) = 0, (1,0)-(1,1) = 1/sqrt2, (0,1)-(1,1) = 1/sqrt2
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert uniformity(a) == pytest.approx(math.sqrt(2) / 3, abs=1e-9)
    # cosines: 1, 0, 0; lengths do not matter
    b = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    assert uniformity(b) == pytest.approx(1 / 3, abs=1e-9)


def test_uniformity_equals_the_explicit_kernel_over_layers():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 4, 5))  # 7 vectors, 4 layers, d = 5
    for layer in range(4):
        u = x[:, layer] / np.linalg.norm(x[:, layer], axis=1, keepdims=True)
        kernel = u @ u.T
        assert uniformity(x)[layer] == pytest.approx(kernel[np.triu_indices(7, 1)].mean(), abs=1e-9)


def test_category_ua_is_a_minus_b_within_each_category():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])[:, None, :]
    b = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [0.0, 1.0], [1.0, 0.0]])[:, None, :]
    cats = np.array([0, 0, 0, 1, 1])
    ua = category_ua(a, b, cats, 2, [0])
    assert ua.shape == (2, 1)
    assert ua[0, 0] == pytest.approx(math.sqrt(2) / 3 - 1 / 3, abs=1e-9)
    assert ua[1, 0] == pytest.approx(1.0 - 0.0, abs=1e-9)  # A: identical vectors; B: orthogonal


def test_uniformity_of_one_layer_alone_is_bit_identical_to_its_entry_of_a_stack():
    # the pair studies now read one layer at a time: the same bits as the whole (n, L, d) array gave before
    rng = np.random.default_rng(3)
    for n, n_layers, d in [(7, 4, 5), (40, 3, 257), (13, 9, 64), (150, 2, 1024)]:
        x = (rng.normal(size=(n, n_layers, d)) * rng.uniform(0.1, 50)).astype(np.float32)
        stacked = uniformity(x)
        for layer in range(n_layers):
            assert uniformity(x[:, layer]) == stacked[layer]  # exactly: no last-bit drift
            assert uniformity(np.ascontiguousarray(x[:, layer])) == stacked[layer]


def test_category_ua_reads_only_the_tested_layers_and_matches_the_explicit_kernel():
    rng = np.random.default_rng(4)
    n_pairs, d, tested = 12, 6, [1, 3]
    cats = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3])
    held = rng.normal(size=(2 * n_pairs, len(tested), d)).astype(np.float32)  # only layers 1 and 3 of 0..4
    stack = LayerStack(ArraySource(held, layers=tested, n_states=5))
    ua = category_ua(stack[0::2], stack[1::2], cats, 4, tested)  # reading layer 0, 2 or 4 would raise
    assert ua.shape == (4, 2)

    def mean_pairwise_cosine(v):
        u = v / np.linalg.norm(v, axis=1, keepdims=True)
        return (u @ u.T)[np.triu_indices(len(v), 1)].mean()

    for column in range(2):
        a, b = held[0::2, column].astype(np.float64), held[1::2, column].astype(np.float64)
        for c in range(4):
            expected = mean_pairwise_cosine(a[cats == c]) - mean_pairwise_cosine(b[cats == c])
            assert ua[c, column] == pytest.approx(expected, abs=1e-9)
    with pytest.raises(ExtractionError, match="hidden state 2 was not extracted"):
        category_ua(stack[0::2], stack[1::2], cats, 4, [2])


def test_category_ua_per_layer_is_bit_identical_to_the_whole_array_computation():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2 * 20, 6, 33)).astype(np.float32)  # 20 pairs, 6 layers
    cats = np.repeat(np.arange(4), 5)
    a, b = x[0::2], x[1::2]
    whole = np.stack([uniformity(a[cats == c]) - uniformity(b[cats == c]) for c in range(4)])  # (4, 6), all at once
    stack = LayerStack(x)
    layers = [0, 2, 5]
    np.testing.assert_array_equal(category_ua(stack[0::2], stack[1::2], cats, 4, layers), whole[:, layers])


def test_centroid_asymmetry_by_hand():
    a = np.array([[1.0, 0.0], [0.0, 1.0]])  # centroid (0.5, 0.5): each at 45 degrees
    b = np.array([[1.0, 0.0], [3.0, 0.0]])  # centroid (2, 0): both aligned with it
    np.testing.assert_allclose(centroid_asymmetry(a, b), [1 / math.sqrt(2) - 1] * 2, atol=1e-9)
    a = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])  # centroid (2/3, 2/3)
    np.testing.assert_allclose(cosine_to(a, a.mean(0)), [1 / math.sqrt(2), 1.0, 1 / math.sqrt(2)], atol=1e-9)


def test_leave_one_out_centroid_asymmetry_equals_a_naive_loop():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(6, 3, 4)), rng.normal(size=(6, 3, 4))  # 6 pairs, 3 layers, d = 4

    def cos(u, v):
        return u @ v / (np.linalg.norm(u) * np.linalg.norm(v))

    loo = centroid_asymmetry(a, b, leave_one_out=True)
    assert loo.shape == (6, 3)
    for i in range(6):
        for layer in range(3):
            ca, cb = np.delete(a, i, axis=0)[:, layer].mean(0), np.delete(b, i, axis=0)[:, layer].mean(0)
            assert loo[i, layer] == pytest.approx(cos(a[i, layer], ca) - cos(b[i, layer], cb), abs=1e-9)
    assert not np.allclose(loo, centroid_asymmetry(a, b))  # the pair no longer pulls its own centroid


def test_leave_one_out_centroid_by_hand():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # others of a0: centroid (0.5, 1): cos = 0.5 / sqrt(1.25)
    b = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])  # all on one line: cos = 1 throughout
    assert centroid_asymmetry(a, b, leave_one_out=True)[0] == pytest.approx(0.5 / math.sqrt(1.25) - 1, abs=1e-9)
    with pytest.raises(ValueError, match="at least 2"):
        centroid_asymmetry(a[:1], b[:1], leave_one_out=True)
