import math

import numpy as np
import pytest

from layerscope.measures.spectrum import (
    anisotropy_metrics,
    cos_to_mean,
    covariance_spectrum,
    metrics_from_spectrum,
    outlier_dims,
)


def four_points():
    """±3 e1 and ±1 e2 in d = 4: covariance eigenvalues 2*9/3 = 6, 2/3, 0, 0."""
    e = np.eye(4)
    return np.array([3 * e[0], -3 * e[0], e[1], -e[1]])


def test_spectrum_metrics_by_hand():
    eig, top = covariance_spectrum(four_points(), top_vector=True)
    np.testing.assert_allclose(eig, [6.0, 2 / 3, 1e-10, 1e-10], rtol=1e-12, atol=1e-15)
    assert abs(top[0]) == pytest.approx(1.0)
    assert covariance_spectrum(four_points())[1] is None
    m = metrics_from_spectrum(eig)
    total = 6 + 2 / 3 + 2e-10
    assert m["top1_ratio"] == pytest.approx(6 / total, rel=1e-12)  # 0.9
    assert m["eigenvalue_variance"] == pytest.approx(np.mean(np.square(eig - total / 4)), rel=1e-12)
    p = np.array([6, 2 / 3, 1e-10, 1e-10]) / total
    assert m["effective_rank"] == pytest.approx(math.exp(-np.sum(p * np.log(p + 1e-10))), rel=1e-9)
    assert m["effective_rank"] == pytest.approx(math.exp(-(0.9 * math.log(0.9) + 0.1 * math.log(0.1))), rel=1e-6)
    assert m["var_top10"] == pytest.approx(1.0) and m["var_top50"] == pytest.approx(1.0)  # d = 4 < 10


def test_cos_to_mean_by_hand():
    assert cos_to_mean(four_points()) == 0.0  # the mean is the zero vector
    x = np.array([[1.0, 0.0], [0.0, 1.0]])  # mean (0.5, 0.5): both at 45 degrees
    assert cos_to_mean(x) == pytest.approx(1 / math.sqrt(2), rel=1e-9)


def reference_metrics(x):
    """The notebook's path: the d x d covariance and its eigendecomposition."""
    centered = x - x.mean(axis=0)
    cov = centered.T @ centered / (len(x) - 1)
    eig = np.maximum(np.sort(np.linalg.eigvalsh(cov))[::-1], 1e-10)
    return metrics_from_spectrum(eig), eig


@pytest.mark.parametrize("n, d", [(40, 120), (300, 64), (64, 64)])
def test_gram_and_svd_paths_equal_the_d_by_d_eigendecomposition(n, d):
    rng = np.random.default_rng(n + d)
    x = rng.normal(size=(n, d)) * np.geomspace(30, 0.1, d) + rng.normal(size=d) * 5
    expected, eig = reference_metrics(x)
    ours = anisotropy_metrics(x)
    for name, value in expected.items():
        assert ours[name] == pytest.approx(value, rel=1e-6), name
    k = min(n - 1, d)
    np.testing.assert_allclose(ours["eigenvalues"][:k], eig[:k], rtol=1e-6)


def test_outlier_dimensions_and_their_share_of_the_top_direction():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 20))
    x[:, 7] += rng.choice([-1, 1], size=50) * 500  # one massive dimension
    assert outlier_dims(x).tolist() == [7]
    m = anisotropy_metrics(x)
    assert m["n_outlier_dims"] == 1 and m["outlier_dims"] == [7]
    assert m["outlier_share_top1"] > 0.99 and m["top1_ratio"] > 0.99
    assert m["top1_ratio_without_outliers"] == pytest.approx(
        reference_metrics(np.delete(x, 7, axis=1))[0]["top1_ratio"])
    assert outlier_dims(rng.normal(size=(50, 20))).tolist() == []


@pytest.mark.parametrize("n, d", [(30, 50), (80, 20)])
def test_top_vector_is_the_leading_eigenvector_of_the_covariance(n, d):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, d)) * np.geomspace(10, 1, d)
    centered = x - x.mean(0)
    _, vectors = np.linalg.eigh(centered.T @ centered)
    _, top = covariance_spectrum(x, top_vector=True)
    assert abs(top @ vectors[:, -1]) == pytest.approx(1.0, abs=1e-8)


def test_top_vector_on_a_large_gram_uses_the_iterative_solver():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 400)) * np.geomspace(10, 1, 400)
    centered = x - x.mean(0)
    _, vectors = np.linalg.eigh(centered.T @ centered)
    assert abs(covariance_spectrum(x, top_vector=True)[1] @ vectors[:, -1]) == pytest.approx(1.0, abs=1e-8)


@pytest.mark.parametrize("n, d", [(40, 120), (120, 40)])
def test_top1_without_dims_equals_recomputing_on_the_remaining_dims(n, d):
    from layerscope.measures.spectrum import top1_ratio_without

    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, d)) * np.geomspace(20, 1, d)
    dims = np.array([0, 5, 9])
    expected = reference_metrics(np.delete(x, dims, axis=1))[0]["top1_ratio"]
    assert top1_ratio_without(x, dims) == pytest.approx(expected, rel=1e-9)
