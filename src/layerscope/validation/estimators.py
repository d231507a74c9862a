"""The project's estimators on seeded synthetic data whose answer is known, as tidy rows for the validation card.

    rows = random_cka_rows(seed=0)    # debiased CKA of two independent Gaussian clouds per (n, d): the truth is 0
    rows = twonn_rows(seed=0)         # TwoNN ('mle' and 'facco') on manifolds of known intrinsic dimension
    x = manifold_points("sphere", n=2000, m=5, ambient=100, seed=0)   # the points of one TwoNN row

Every row is a dict with ``check``, ``estimator``, ``n``, ``d`` (the width), ``true_dim``, ``truth``, ``estimate``,
``error`` (the number ``target`` bounds), ``target`` and ``holds`` (``error <= target``), plus the check's own
columns.

**Debiased CKA of unrelated representations** (:mod:`layerscope.measures.cka_debiased`). Two independent standard
Gaussian clouds X and Y (n, d) share nothing: their CKA is 0. The unbiased HSIC of such clouds is centred on 0,
and their debiased CKA scatters around 0 with a standard deviation of about sqrt(2) / n whatever d (the leading
term of the U-statistic's variance: 0.018 at n = 80; 40 seeded draws gave 0.017 to 0.020 at d = 576 to 4096), so
one draw at n = 80 lands beyond +-0.02 about a quarter of the time. A row's ``estimate`` is therefore the mean over
``repeats`` draws (cell (n, d) draws X, then Y, per repeat from ``np.random.default_rng([seed, n, d])``), ``error``
its absolute value, ``target`` 0.02; by default the repeats are the fewest that bring the mean's standard error,
``null_se`` = sqrt(2) / (n sqrt(repeats)), to a quarter of the target or less (13 draws at n = 80, 2 at 250,
1 at 1000): the target is then four standard errors. For contrast each row holds the biased linear CKA
(:func:`layerscope.measures.similarity.linear_cka`) of the same draws, ``linear``, far from 0, and the value it
tends to on such clouds, ``linear_null`` = d / (d + n): with k = n - 1 degrees of freedom after centring,
E<Kc, Lc> = d^2 k and E||Kc||^2 = d k (d + k + 1) (the Wishart moments), whose ratio is d / (d + n).

**TwoNN on manifolds of known dimension** (:mod:`layerscope.measures.intrinsic`, both estimators): ``n`` points
on an ``m``-dimensional manifold, linearly embedded in R^ambient by a random orthonormal basis (distances are the
manifold's own): ``cube``, uniform on [0, 1]^m (flat, with a boundary); ``gaussian``, standard normal in R^m
(flat, density falling off); ``sphere``, uniform on the unit sphere S^m in R^(m + 1) (curved, no boundary). Each
(manifold, m) draws from ``np.random.default_rng([seed, MANIFOLDS.index(manifold), m])``. ``error`` =
|estimate - m| / m, ``target`` 0.10. TwoNN falls below the truth as m grows at a fixed n (a point's two nearest
neighbours then sample its neighbourhood poorly), more so with a boundary; the rows say where the 10 % target
holds and where it does not (at the defaults: not at m = 20 on any of the three, nor on the 10-cube).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..measures.cka_debiased import debiased_cka
from ..measures.intrinsic import ESTIMATORS, twonn_dimension
from ..measures.similarity import linear_cka

CKA_TARGET = 0.02
"""Largest |mean debiased CKA| of two independent clouds that passes."""
CKA_STANDARD_ERROR = CKA_TARGET / 4
"""The default repeats bring sqrt(2) / (n sqrt(repeats)), the mean's standard error under the null, to this: the
target is four standard errors."""
TWONN_TARGET = 0.10
"""Largest |estimate - m| / m of a TwoNN dimension that passes."""
MANIFOLDS = ("cube", "gaussian", "sphere")


def default_repeats(n: int) -> int:
    """The fewest draws whose mean debiased CKA has a null standard error sqrt(2) / (n sqrt(R)) of at most
    :data:`CKA_STANDARD_ERROR`."""
    return max(1, math.ceil(2.0 / (n * CKA_STANDARD_ERROR) ** 2))


def random_cka_rows(seed: int = 0, ns: Sequence[int] = (80, 250, 1000), ds: Sequence[int] = (576, 2048, 4096),
                    repeats: int | None = None) -> list[dict]:
    """One row per (n, d): the debiased CKA of two independent standard Gaussian clouds (n, d), the mean of
    ``repeats`` draws (default :func:`default_repeats`), against the truth 0 (module docstring)."""
    rows = []
    for n in ns:
        for d in ds:
            r = default_repeats(n) if repeats is None else int(repeats)
            if r < 1:
                raise ValueError(f"repeats must be at least 1; got {repeats}")
            rng = np.random.default_rng([seed, n, d])
            debiased, linear = [], []
            for _ in range(r):
                x = rng.standard_normal((n, d))
                y = rng.standard_normal((n, d))
                debiased.append(debiased_cka(x, y))
                linear.append(linear_cka(x, y))
            estimate = float(np.mean(debiased))
            rows.append({"check": "random_cka", "estimator": "debiased", "n": n, "d": d, "true_dim": None,
                         "truth": 0.0, "estimate": estimate, "error": abs(estimate), "target": CKA_TARGET,
                         "holds": abs(estimate) <= CKA_TARGET, "repeats": r,
                         "sd": float(np.std(debiased, ddof=1)) if r > 1 else float("nan"),
                         "max_abs": float(np.max(np.abs(debiased))), "null_se": math.sqrt(2.0) / (n * math.sqrt(r)),
                         "linear": float(np.mean(linear)), "linear_null": d / (d + n)})
    return rows


def manifold_points(manifold: str, n: int, m: int, ambient: int, seed: int = 0) -> np.ndarray:
    """(n, ambient) float64: ``n`` points of the ``m``-dimensional ``manifold`` (one of :data:`MANIFOLDS`) in a
    random orthonormal embedding, seeded as the module docstring says."""
    if manifold not in MANIFOLDS:
        raise ValueError(f"manifold {manifold!r}; choose one of {', '.join(MANIFOLDS)}")
    width = m + 1 if manifold == "sphere" else m
    if ambient < width:
        raise ValueError(f"ambient {ambient} cannot hold a {manifold} of dimension {m} (it needs {width})")
    rng = np.random.default_rng([seed, MANIFOLDS.index(manifold), m])
    if manifold == "cube":
        z = rng.uniform(size=(n, m))
    else:
        z = rng.standard_normal((n, width))
        if manifold == "sphere":
            z /= np.linalg.norm(z, axis=1, keepdims=True)
    basis = np.linalg.qr(rng.standard_normal((ambient, width)))[0]  # (ambient, width), orthonormal columns
    return z @ basis.T


def twonn_rows(seed: int = 0, n: int = 2000, dims: Sequence[int] = (2, 5, 10, 20), ambient: int = 100,
               manifolds: Sequence[str] = MANIFOLDS, estimators: Sequence[str] = ESTIMATORS) -> list[dict]:
    """One row per manifold, dimension m and TwoNN estimator: the estimate on :func:`manifold_points` against m
    (module docstring)."""
    rows = []
    for manifold in manifolds:
        for m in dims:
            x = manifold_points(manifold, n, m, ambient, seed)
            for estimator in estimators:
                estimate, used = twonn_dimension(x, return_n=True, estimator=estimator)
                error = abs(estimate - m) / m
                rows.append({"check": "twonn", "estimator": estimator, "manifold": manifold, "n": n, "d": ambient,
                             "true_dim": m, "truth": float(m), "estimate": float(estimate), "error": error,
                             "target": TWONN_TARGET, "holds": error <= TWONN_TARGET, "n_used": used})
    return rows
