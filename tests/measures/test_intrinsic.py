import math

import numpy as np
import pytest

import layerscope.measures.intrinsic as intrinsic
from layerscope.errors import LayerscopeError
from layerscope.measures.intrinsic import two_nearest, twonn_dimension


def subspace_points(n=2000, dim=5, ambient=100, noise=1e-4, seed=0):
    """Gaussian coordinates in a random dim-dimensional linear subspace of R^ambient, plus small noise."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(ambient, dim)))[0].T  # (dim, ambient), orthonormal rows
    return rng.normal(size=(n, dim)) @ basis + noise * rng.normal(size=(n, ambient))


def naive_twonn(x):
    """A plain O(n^2) loop over pairs: r1, r2 per point, then N / sum(log(r2 / r1))."""
    points = [tuple(row) for row in x.tolist()]
    r1, r2 = [], []
    for i, p in enumerate(points):
        distances = sorted(math.dist(p, q) for j, q in enumerate(points) if j != i)
        r1.append(distances[0])
        r2.append(distances[1])
    return r1, r2, len(points) / sum(math.log(b / a) for a, b in zip(r1, r2, strict=True))


def test_twonn_finds_a_five_dimensional_subspace():
    dimension, used = twonn_dimension(subspace_points(), return_n=True)
    assert used == 2000
    assert abs(dimension - 5.0) < 0.5


def test_duplicates_are_removed_first():
    x = subspace_points(n=300, dim=3, ambient=20, seed=1)
    twice = np.concatenate([x, x[::-1]])
    assert twonn_dimension(twice, return_n=True) == (twonn_dimension(x), 300)


def test_chunked_neighbours_equal_a_naive_loop(monkeypatch):
    x = subspace_points(n=200, dim=4, ambient=30, noise=1e-2, seed=2) + 50.0  # far from the origin
    r1, r2, expected = naive_twonn(x)
    assert twonn_dimension(x) == pytest.approx(expected, rel=1e-10)
    monkeypatch.setattr(intrinsic, "BLOCK_BYTES", 8 * 200 * 7)  # blocks of 7 rows, the last one shorter
    got1, got2 = two_nearest(x)
    np.testing.assert_allclose(got1, r1, rtol=1e-12)
    np.testing.assert_allclose(got2, r2, rtol=1e-12)
    assert twonn_dimension(x) == pytest.approx(expected, rel=1e-10)


def test_too_few_points_and_bad_values():
    with pytest.raises(ValueError, match="at least 3 distinct"):
        twonn_dimension(np.array([[0.0, 1.0], [2.0, 3.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="same distance"):
        twonn_dimension(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))  # a square: r2 = r1 = 1
    x = subspace_points(n=20, dim=2, ambient=4)
    x[3, 0] = np.inf
    with pytest.raises(LayerscopeError, match="row 3"):
        twonn_dimension(x)


def test_three_points_by_hand():
    # on a line at 0, 1, 3: mu = 3/1, 2/1, 3/2 -> d = 3 / log(9)
    assert twonn_dimension(np.array([[0.0], [1.0], [3.0]])) == pytest.approx(3 / math.log(9), rel=1e-14)


def naive_facco(x, discard=0.1):
    """Facco et al.'s fit by hand: mu sorted, F_i = i / N, the first floor(0.9 N) kept, slope through the origin
    of -log(1 - F) on log(mu) from the normal equation sum(x y) / sum(x x)."""
    r1, r2, _ = naive_twonn(x)
    mu = sorted(b / a for a, b in zip(r1, r2, strict=True))
    n = len(mu)
    kept = math.floor(n * (1 - discard))
    xs = [math.log(m) for m in mu[:kept]]
    ys = [-math.log(1 - (i + 1) / n) for i in range(kept)]
    return sum(a * b for a, b in zip(xs, ys, strict=True)) / sum(a * a for a in xs)


def test_facco_estimator_matches_the_hand_fit_and_finds_the_subspace():
    x = subspace_points(n=120, dim=4, ambient=30, seed=2)
    assert twonn_dimension(x, estimator="facco") == pytest.approx(naive_facco(x), rel=1e-10)
    assert abs(twonn_dimension(subspace_points(), estimator="facco") - 5.0) < 0.5
    with pytest.raises(ValueError, match="choose one of mle, facco"):
        twonn_dimension(x, estimator="levina")


def test_estimates_from_a_distance_matrix_match_the_points_on_any_subset():
    from layerscope.measures.intrinsic import pairwise_distances, twonn_from_distances

    x = subspace_points(n=200, dim=3, ambient=12, seed=4)
    distances = pairwise_distances(x)
    u = np.random.default_rng(0).choice(200, size=90, replace=False)
    for estimator in ("mle", "facco"):
        assert twonn_from_distances(distances[np.ix_(u, u)], estimator) == pytest.approx(
            twonn_dimension(x[u], estimator=estimator), rel=1e-9)
    doubled = np.concatenate([x[:50], x[:2]])  # two points with a twin: both copies are left out
    assert twonn_from_distances(pairwise_distances(doubled)) == pytest.approx(twonn_dimension(x[2:50]), rel=1e-9)
