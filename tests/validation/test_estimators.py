"""The estimator checks of :mod:`layerscope.validation.estimators`, recomputed rather than trusted: every row's
estimate again from the same seeded draws by a hand-written formula (the unbiased HSIC of Song et al. 2012 for
debiased CKA, Kornblith et al.'s linear CKA, TwoNN from a k-d tree's neighbours), each target checked on the
recomputed number; the synthetic manifolds' geometry; and the project's TwoNN against scikit-dimension's."""

import math

import numpy as np
import pytest
import skdim
from scipy.spatial import cKDTree

from layerscope.measures.intrinsic import twonn_dimension
from layerscope.validation.estimators import MANIFOLDS, manifold_points, random_cka_rows, twonn_rows

NS, DS = (80, 250, 1000), (576, 2048, 4096)
REPEATS = {80: 13, 250: 2, 1000: 1}
"""The fewest draws R with sqrt(2) / (n sqrt(R)) <= 0.005, by hand: 2 / (n 0.005)^2 = 12.5, 1.28, 0.08."""
DIMS, AMBIENT, N_POINTS = (2, 5, 10, 20), 100, 2000


# -- debiased CKA of two independent clouds ----------------------------------------------------------------------

def unbiased_hsic(k, l):  # noqa: E741 (the paper's name)
    """Song et al. 2012's unbiased HSIC of two (n, n) kernel matrices, K~ and L~ with zero diagonals:
    [tr(K~ L~) + (1' K~ 1)(1' L~ 1) / ((n - 1)(n - 2)) - 2 / (n - 2) 1' K~ L~ 1] / (n (n - 3))."""
    n = len(k)
    kt, lt = k - np.diag(np.diag(k)), l - np.diag(np.diag(l))
    one = np.ones(n)
    trace = np.sum(kt * lt.T)  # tr(K~ L~) = sum_ij K~_ij L~_ji
    return (trace + (one @ kt @ one) * (one @ lt @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * ((one @ kt) @ (lt @ one))) / (n * (n - 3))


def hand_cka(x, y):
    """(debiased, linear) CKA of x and y: the unbiased HSIC of the raw linear kernels over the root of the two
    self-HSICs (Nguyen et al. 2021), and <H K H, H L H>_F / (||H K H||_F ||H L H||_F) with H = I - 11'/n, the
    centring matrix (Kornblith et al. 2019, in its n x n form: d is the larger here)."""
    k, l = x @ x.T, y @ y.T  # noqa: E741
    debiased = unbiased_hsic(k, l) / math.sqrt(unbiased_hsic(k, k) * unbiased_hsic(l, l))
    h = np.eye(len(x)) - 1.0 / len(x)
    kc, lc = h @ k @ h, h @ l @ h
    linear = np.sum(kc * lc) / (np.linalg.norm(kc) * np.linalg.norm(lc))
    return debiased, linear


def test_debiased_cka_of_independent_clouds_is_within_0_02_of_0_and_linear_cka_is_not():
    rows = random_cka_rows(seed=0)
    assert [(r["n"], r["d"]) for r in rows] == [(n, d) for n in NS for d in DS]
    for row in rows:
        n, d = row["n"], row["d"]
        rng = np.random.default_rng([0, n, d])  # the documented seeding: X, then Y, per repeat
        values = [hand_cka(rng.standard_normal((n, d)), rng.standard_normal((n, d))) for _ in range(REPEATS[n])]
        debiased = float(np.mean([v[0] for v in values]))
        linear = float(np.mean([v[1] for v in values]))
        assert row["repeats"] == REPEATS[n] and row["truth"] == 0.0 and row["target"] == 0.02
        assert row["estimate"] == pytest.approx(debiased, rel=1e-9, abs=1e-12), (n, d)
        assert abs(debiased) <= 0.02, (n, d, debiased)  # the target, on the recomputed value
        assert row["error"] == pytest.approx(abs(debiased), rel=1e-9, abs=1e-12) and row["holds"] is True
        assert row["null_se"] == pytest.approx(math.sqrt(2) / (n * math.sqrt(REPEATS[n]))) and row["null_se"] <= 0.005
        # the contrast: the biased CKA of the same draws is far from 0, near d / (d + n) (the Wishart moments)
        assert row["linear"] == pytest.approx(linear, rel=1e-9)
        assert linear > 0.3 and linear == pytest.approx(d / (d + n), abs=0.005), (n, d, linear)
        assert row["linear_null"] == d / (d + n)


def test_a_row_that_misses_the_cka_target_says_so():
    # one draw of 4 points: the unbiased HSIC scatters by about sqrt(2) / 4 there, far past 0.02
    rows = random_cka_rows(seed=1, ns=(4,), ds=(576,), repeats=1)
    rng = np.random.default_rng([1, 4, 576])
    debiased, _ = hand_cka(rng.standard_normal((4, 576)), rng.standard_normal((4, 576)))
    assert abs(debiased) > 0.02
    assert rows[0]["estimate"] == pytest.approx(debiased, rel=1e-9) and rows[0]["holds"] is False


# -- TwoNN on manifolds of known dimension -----------------------------------------------------------------------

def hand_twonn(x):
    """(mle, facco) TwoNN of the rows of x by hand: r1, r2 from a k-d tree (exact distances), mu = r2 / r1;
    N / sum(log mu); and the slope through the origin of -log(1 - i / N) on the sorted log mu, i = 1..floor(0.9 N)."""
    distances, _ = cKDTree(x).query(x, k=3)  # column 0: the point itself
    mu = np.sort(distances[:, 2] / distances[:, 1])
    n = len(mu)
    kept = (9 * n) // 10
    log_mu = np.log(mu[:kept])
    slope, *_ = np.linalg.lstsq(log_mu[:, None], -np.log(1 - np.arange(1, kept + 1) / n), rcond=None)
    return n / np.log(mu).sum(), float(slope[0])


@pytest.fixture(scope="module")
def twonn():
    """The rows at their defaults, and by hand {(manifold, m): (mle, facco)} on the same points."""
    rows = twonn_rows(seed=0)
    points = {(kind, m): manifold_points(kind, N_POINTS, m, AMBIENT, seed=0) for kind in MANIFOLDS for m in DIMS}
    return rows, points, {key: hand_twonn(x) for key, x in points.items()}


def test_twonn_rows_are_the_hand_estimates(twonn):
    rows, _, hand = twonn
    assert len(rows) == len(MANIFOLDS) * len(DIMS) * 2
    for row in rows:
        want = hand[row["manifold"], row["true_dim"]][("mle", "facco").index(row["estimator"])]
        assert row["estimate"] == pytest.approx(want, rel=1e-9), row
        assert row["error"] == pytest.approx(abs(want - row["true_dim"]) / row["true_dim"], rel=1e-9)
        assert row["holds"] is (row["error"] <= 0.10) and row["n"] == row["n_used"] == N_POINTS


MISSES = {("cube", 10): "-15 %", ("cube", 20): "-23 %", ("gaussian", 20): "-12 % (mle), -13 % (facco)",
          ("sphere", 20): "-14 %"}
"""Where the project's TwoNN (both estimators) falls more than 10 % below the truth at the defaults (seed 0,
2000 points, R^100): the known finite-sample shortfall at high m, worst with the cube's boundary."""


@pytest.mark.parametrize("estimator", ["mle", "facco"])
@pytest.mark.parametrize(("manifold", "m"), [
    pytest.param(kind, m, marks=pytest.mark.xfail(strict=True, reason=f"TwoNN misses by {MISSES[kind, m]}")
                 if (kind, m) in MISSES else ()) for kind in MANIFOLDS for m in DIMS])
def test_twonn_is_within_10_percent_of_the_true_dimension(twonn, manifold, m, estimator):
    estimate = twonn[2][manifold, m][("mle", "facco").index(estimator)]  # recomputed, not the row's
    assert abs(estimate - m) / m <= 0.10, (manifold, m, estimator, estimate)


@pytest.mark.parametrize("m", [2, 5])
def test_the_manifolds_have_their_claimed_geometry(m):
    """Covariance eigenvalues of the embedded points: m of them near the latent variance (uniform: 1/12,
    standard normal: 1, unit sphere S^m in R^(m+1): 1/(m+1) over m + 1 directions), every other one 0; the
    sphere's points at distance 1 from the origin (an orthonormal embedding keeps norms)."""
    for kind, width, variance in (("cube", m, 1 / 12), ("gaussian", m, 1.0), ("sphere", m + 1, 1 / (m + 1))):
        x = manifold_points(kind, N_POINTS, m, AMBIENT, seed=0)
        assert x.shape == (N_POINTS, AMBIENT)
        values = np.sort(np.linalg.eigvalsh(np.cov(x, rowvar=False)))[::-1]
        np.testing.assert_allclose(values[:width], variance, rtol=0.15, err_msg=kind)
        assert values[width:].max() < 1e-12, kind
        if kind == "sphere":
            np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-12)


# -- the project's TwoNN against scikit-dimension ----------------------------------------------------------------

def test_facco_is_scikit_dimensions_twonn(twonn):
    """skdim.id.TwoNN's default (method "linear", discard_fraction 0.1) is the same fit as ``estimator="facco"``,
    read in skdim/id/_TwoNN.py (0.5.0): keep the int(N * 0.9) smallest mu, F_i = i / N over all N points, least
    squares of -log(1 - F) on log mu through the origin (LinearRegression(fit_intercept=False)). The two differ
    only where these points have nothing to differ on: skdim finds r1, r2 from sklearn's chunked
    ||a||^2 + ||b||^2 - 2 a.b distances above 25 features (layerscope re-measures the nearest candidates from
    the differences), and on duplicate rows (below)."""
    _, points, _ = twonn
    for key, x in points.items():
        assert twonn_dimension(x, estimator="facco") == pytest.approx(skdim.id.TwoNN().fit(x).dimension_,
                                                                     rel=1e-10), key


def test_mle_is_scikit_dimensions_unbiased_mle_scaled_by_n_over_n_minus_1(twonn):
    """skdim's ``method="mle"`` with ``discard_fraction=0`` is the unbiased Pareto-shape estimate
    (N - 1) / sum(log mu); layerscope's ``"mle"`` is the maximum-likelihood N / sum(log mu): the same sum, so the
    ratio is N / (N - 1) exactly."""
    _, points, _ = twonn
    for key in [("cube", 5), ("gaussian", 10), ("sphere", 20)]:
        x = points[key]
        with np.errstate(divide="ignore"):  # skdim also returns -log(1 - F), infinite at F = 1 with no discard
            unbiased = skdim.id.TwoNN(method="mle", discard_fraction=0.0).fit(x).dimension_
        assert twonn_dimension(x) == pytest.approx(unbiased * N_POINTS / (N_POINTS - 1), rel=1e-10), key


def test_on_duplicate_rows_layerscope_drops_the_copies_and_skdim_the_points():
    """layerscope removes repeated rows first (np.unique) and measures the distinct points; skdim measures every
    row, then drops each point with r1 = 0 (both copies) but keeps its neighbours' mu, whose r1 and r2 may both be
    a distance to the two copies (mu = 1). Like is compared with like on the distinct rows."""
    x = manifold_points("gaussian", 500, 3, AMBIENT, seed=0)
    doubled = np.concatenate([x, x[:100]])
    ours = twonn_dimension(doubled, estimator="facco")
    assert ours == pytest.approx(skdim.id.TwoNN().fit(x).dimension_, rel=1e-10)
    with pytest.warns(UserWarning, match="duplicate points"):
        theirs = skdim.id.TwoNN().fit(doubled).dimension_
    assert abs(theirs - ours) > 1e-3
