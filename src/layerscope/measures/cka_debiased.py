"""Debiased CKA: linear CKA from the unbiased HSIC estimator, so that unrelated representations score near 0.

    debiased_cka(x, y)                          # x: (n, d1), y: (n, d2), the same n >= 4 inputs -> float
    debiased_cka_matrix(layers)                 # layers: L arrays (n, d) -> (L, L), symmetric
    debiased_cka_matrix(layers_a, layers_b)     # two models on the same n inputs -> (La, Lb)
    k = gram(x); debiased_cka_from_grams(k[np.ix_(u, u)], l[np.ix_(u, u)])    # a subset u of the inputs
    random_cka_baseline(n=60, d=576, seed=0)    # what linear (biased) CKA gives two independent random clouds

Linear CKA (:mod:`layerscope.measures.similarity`) is biased upwards when the width d is large next to the number
of inputs n: two independent isotropic Gaussian clouds of 60 points in 576 dimensions score about 0.9. The
unbiased HSIC estimator of Song et al. 2012 ("Feature Selection via Dependence Maximization", JMLR 13) removes
that bias; its CKA is the "debiased CKA" of Nguyen, Raghu & Kornblith 2021 ("Do Wide and Deep Networks Learn the
Same Things?"). With K and L the linear Gram matrices and K~, L~ the same with a zero diagonal,

    HSIC_u(K, L) = [tr(K~ L~) + (1' K~ 1)(1' L~ 1) / ((n - 1)(n - 2)) - 2 / (n - 2) 1' K~ L~ 1] / (n (n - 3))
    debiased CKA = HSIC_u(K, L) / sqrt(HSIC_u(K, K) HSIC_u(L, L))

It needs n >= 4, can be slightly negative, and is NaN when either self-HSIC is not positive. HSIC_u is unchanged by
shifting every input by the same vector, so :func:`gram` centres the columns first (float64) for accuracy.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import check_finite_rows


def gram(x: np.ndarray) -> np.ndarray:
    """(n, n) float64 linear Gram matrix of the column-centred rows of x (n, d)."""
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=0)
    return centred @ centred.T


def _hsic_parts(k: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """K~ (zero diagonal), its row sums and its total: what HSIC_u needs of one Gram matrix."""
    tilde = np.array(k, dtype=np.float64, copy=True)
    np.fill_diagonal(tilde, 0.0)
    rows = tilde.sum(axis=1)
    return tilde, rows, float(rows.sum())


def _hsic(a: tuple[np.ndarray, np.ndarray, float], b: tuple[np.ndarray, np.ndarray, float]) -> float:
    (ka, ra, sa), (kb, rb, sb) = a, b
    n = len(ka)
    return float((np.vdot(ka, kb) + sa * sb / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * ra @ rb) / (n * (n - 3)))


def _ratio(ab: float, aa: float, bb: float) -> float:
    return ab / np.sqrt(aa * bb) if aa > 0 and bb > 0 else float("nan")


def debiased_cka_from_grams(k: np.ndarray, l: np.ndarray) -> float:  # noqa: E741 (the papers' name)
    """Debiased CKA of two (n, n) Gram matrices of the same n >= 4 inputs (module docstring)."""
    if k.shape != l.shape or k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"Gram matrices of shapes {k.shape} and {l.shape}; pass two (n, n) matrices of the same n")
    if len(k) < 4:
        raise ValueError(f"{len(k)} inputs; the unbiased HSIC needs at least 4, so pass more texts")
    a, b = _hsic_parts(k), _hsic_parts(l)
    return _ratio(_hsic(a, b), _hsic(a, a), _hsic(b, b))


def debiased_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Debiased CKA of x (n, d1) and y (n, d2), row i the same input in both; float64, n >= 4."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y):
        raise ValueError(f"x has shape {x.shape} and y {y.shape}; pass two 2-D arrays with the same rows (inputs)")
    check_finite_rows(x, "x", "CKA")
    check_finite_rows(y, "y", "CKA")
    return debiased_cka_from_grams(gram(x), gram(y))


def debiased_cka_matrix(layers_a: Iterable[np.ndarray], layers_b: Iterable[np.ndarray] | None = None,
                        max_texts: int | None = None, seed: int = 0) -> np.ndarray:
    """Debiased CKA between every layer of ``layers_a`` and every layer of ``layers_b`` (default: ``layers_a``
    itself): (La, Lb) float64. Each layer is an (n, d) array of the same n inputs in the same order; with
    ``max_texts`` a seeded subset (``np.random.default_rng(seed)``) of that many rows is used in every layer, as
    in :func:`layerscope.measures.similarity.cka_matrix`. Holds one n x n matrix per layer."""
    parts_a, rows = _parts(layers_a, None, max_texts, seed)
    parts_b = parts_a if layers_b is None else _parts(layers_b, rows, max_texts, seed)[0]
    if len(parts_b[0][0]) != len(parts_a[0][0]):
        raise ValueError("the two models' layers hold different numbers of inputs; pass states of the same texts")
    self_a = [_hsic(a, a) for a in parts_a]
    self_b = self_a if layers_b is None else [_hsic(b, b) for b in parts_b]
    return np.array([[_ratio(_hsic(a, b), sa, sb) for b, sb in zip(parts_b, self_b, strict=True)]
                     for a, sa in zip(parts_a, self_a, strict=True)])


def _parts(layers: Iterable[np.ndarray], rows: np.ndarray | None, max_texts: int | None,
           seed: int) -> tuple[list[tuple[np.ndarray, np.ndarray, float]], np.ndarray | None]:
    parts = []
    for index, layer in enumerate(layers):
        x = np.asarray(layer, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"layer {index} has shape {x.shape}; pass (n inputs, d features) arrays")
        if not parts and rows is None and max_texts is not None and len(x) > max_texts:
            rows = np.sort(np.random.default_rng(seed).choice(len(x), size=max_texts, replace=False))
        x = x if rows is None else x[rows]
        if parts and len(x) != len(parts[0][0]):
            raise ValueError(f"layer {index} has {len(x)} rows, the first {len(parts[0][0])}; pass the same inputs")
        if len(x) < 4:
            raise ValueError(f"{len(x)} inputs; the unbiased HSIC needs at least 4, so pass more texts")
        check_finite_rows(x, f"layer {index}", "CKA")
        parts.append(_hsic_parts(gram(x)))
    if not parts:
        raise ValueError("no layers given; pass at least one (n, d) array")
    return parts, rows


def random_cka_baseline(n: int, d: int, seed: int = 0, repeats: int = 5) -> tuple[float, float]:
    """(linear CKA, debiased CKA) of two independent standard Gaussian clouds of ``n`` points in ``d`` dimensions,
    averaged over ``repeats`` seeded draws: the value a CKA of unrelated representations shows at this n and d."""
    from .similarity import linear_cka

    rng = np.random.default_rng(seed)
    pairs = [(rng.standard_normal((n, d)), rng.standard_normal((n, d))) for _ in range(repeats)]
    return (float(np.mean([linear_cka(x, y) for x, y in pairs])),
            float(np.mean([debiased_cka(x, y) for x, y in pairs])))
