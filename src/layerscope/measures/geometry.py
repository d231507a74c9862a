"""Geometry of pooled representations, vectorised over layers.

    uniformity(x)                   # x: (n, L, d) -> (L,) mean pairwise cosine
    centroid_asymmetry(a, b)        # a, b: (n_pairs, L, d) -> (n_pairs, L)
    centroid_asymmetry(a, b, leave_one_out=True)   # pair i against the centroids of the other pairs

Computed in float64; the small epsilons are the notebooks' own, so their numbers
reproduce.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-10


def uniformity(x: np.ndarray) -> np.ndarray:
    """Mean cosine similarity over all pairs i < j of the n vectors: (n, ..., d) -> (...).

    Uses sum_{i<j} <u_i, u_j> = (||sum_i u_i||^2 - sum_i ||u_i||^2) / 2 on the unit vectors
    u_i = x_i / (||x_i|| + 1e-10), so no n x n kernel is built. The sums run in one fixed order (over d per
    vector, then over the vectors in turn), so one layer alone, (n, d), gives the same bits as that layer's
    entry of an (n, L, d) stack.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n < 2:
        raise ValueError("uniformity needs at least 2 vectors")
    u = x / (np.linalg.norm(x, axis=-1, keepdims=True) + EPS)
    total = np.square(u.sum(axis=0)).sum(axis=-1)
    self_sim = np.add.accumulate(np.square(u).sum(axis=-1), axis=0)[-1]  # in order, as a (n, L, d) reduction adds
    return (total - self_sim) / (n * (n - 1))


def cosine_to(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """cos(x_i, ref) = <x_i, ref> / (||x_i|| ||ref|| + 1e-10): (n, ..., d), (..., d) -> (n, ...)."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    dots = np.einsum("n...d,...d->n...", x, ref)
    return dots / (np.linalg.norm(x, axis=-1) * np.linalg.norm(ref, axis=-1) + EPS)


def centroid_asymmetry(a: np.ndarray, b: np.ndarray, leave_one_out: bool = False) -> np.ndarray:
    """Per pair: cos(a_i, centroid of the A vectors) - cos(b_i, centroid of the B vectors).

    a, b: (n_pairs, ..., d) -> (n_pairs, ...). By default the centroids include the pair itself,
    as in the notebooks; with ``leave_one_out`` pair i is compared with the centroids of the
    other n - 1 pairs, so it does not pull its own reference towards itself.
    """
    return centroid_cosine(a, leave_one_out) - centroid_cosine(b, leave_one_out)


def centroid_cosine(x: np.ndarray, leave_one_out: bool = False) -> np.ndarray:
    """cos(x_i, centroid): (n, ..., d) -> (n, ...); the centroid of all n, or with ``leave_one_out``
    of the n - 1 others, (sum - x_i) / (n - 1)."""
    if not leave_one_out:
        return cosine_to(x, np.mean(x, axis=0, dtype=np.float64))
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n < 2:
        raise ValueError("leave-one-out centroids need at least 2 vectors")
    others = (x.sum(axis=0) - x) / (n - 1)
    dots = np.einsum("n...d,n...d->n...", x, others)
    return dots / (np.linalg.norm(x, axis=-1) * np.linalg.norm(others, axis=-1) + EPS)
