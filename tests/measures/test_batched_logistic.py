"""measures.batched_logistic with one problem per label row (its own features, training rows and C, zero-padded)
and warm starts, against scikit-learn's LogisticRegression fitted problem by problem."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from layerscope.measures.batched_logistic import fit_batched


@pytest.mark.parametrize("n_classes", [2, 3])
def test_one_problem_per_row_with_its_own_rows_and_c_equals_scikit_learn(n_classes):
    rng = np.random.default_rng(9)
    sizes, widths, cs = [30, 45, 38], [5, 8, 3], np.array([0.05, 1.0, 20.0])
    Z, Y, W = np.zeros((3, 45, 8)), np.zeros((3, 45), dtype=int), np.zeros((3, 45))
    problems = []
    for p, (m, r) in enumerate(zip(sizes, widths, strict=True)):
        z = rng.normal(size=(m, r))
        y = (np.arange(m) % n_classes)[rng.permutation(m)]
        z[:, 0] += y
        Z[p, :m, :r], Y[p, :m], W[p, :m] = z, y, 1.0
        problems.append((z, y))
    theta = fit_batched(Z, Y, cs, n_classes, weights=W, tol=1e-9, max_iter=5000)
    warm = fit_batched(Z, Y, cs, n_classes, weights=W, tol=1e-9, max_iter=5000,
                       theta0=fit_batched(Z, Y, cs / 10, n_classes, weights=W, tol=1e-9, max_iter=5000))
    for p, (z, y) in enumerate(problems):
        model = LogisticRegression(C=cs[p], tol=1e-12, max_iter=100_000).fit(z, y)
        r = z.shape[1]
        for got in (theta, warm):  # a cold start and a warm start at a smaller C reach the same coefficients
            np.testing.assert_allclose(got[p, :r].T, model.coef_, atol=2e-5)
            np.testing.assert_allclose(got[p, -1], model.intercept_, atol=2e-5)
            assert np.all(got[p, r:-1] == 0)  # padded columns stay at zero
