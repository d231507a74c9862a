"""Hand-computed geometry: uniformity, UA and centroid asymmetry on 2-D vectors."""

import math

import numpy as np
import pytest

from layerscope.geometry import centroid_asymmetry, cosine_to, uniformity
from layerscope.studies.categories import category_ua


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
    ua = category_ua(a, b, cats, 2)
    assert ua.shape == (2, 1)
    assert ua[0, 0] == pytest.approx(math.sqrt(2) / 3 - 1 / 3, abs=1e-9)
    assert ua[1, 0] == pytest.approx(1.0 - 0.0, abs=1e-9)  # A: identical vectors; B: orthogonal


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
