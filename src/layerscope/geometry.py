"""Geometry of pooled representations, vectorised over layers.

    uniformity(x)                   # x: (n, L, d) -> (L,) mean pairwise cosine
    centroid_asymmetry(a, b)        # a, b: (n_pairs, L, d) -> (n_pairs, L)

Computed in float64; the small epsilons are the notebooks' own, so their numbers
reproduce.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-10


def uniformity(x: np.ndarray) -> np.ndarray:
    """Mean cosine similarity over all pairs i < j of the n vectors: (n, ..., d) -> (...).

    Uses sum_{i<j} <u_i, u_j> = (||sum_i u_i||^2 - sum_i ||u_i||^2) / 2 on the unit vectors
    u_i = x_i / (||x_i|| + 1e-10), so no n x n kernel is built.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n < 2:
        raise ValueError("uniformity needs at least 2 vectors")
    u = x / (np.linalg.norm(x, axis=-1, keepdims=True) + EPS)
    total = np.square(u.sum(axis=0)).sum(axis=-1)
    self_sim = np.square(u).sum(axis=(0, -1))
    return (total - self_sim) / (n * (n - 1))


def cosine_to(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """cos(x_i, ref) = <x_i, ref> / (||x_i|| ||ref|| + 1e-10): (n, ..., d), (..., d) -> (n, ...)."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    dots = np.einsum("n...d,...d->n...", x, ref)
    return dots / (np.linalg.norm(x, axis=-1) * np.linalg.norm(ref, axis=-1) + EPS)


def centroid_asymmetry(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per pair: cos(a_i, centroid of all a) - cos(b_i, centroid of all b).

    a, b: (n_pairs, ..., d) -> (n_pairs, ...). The centroids include the pair itself,
    as in the notebooks.
    """
    return cosine_to(a, np.mean(a, axis=0, dtype=np.float64)) - cosine_to(b, np.mean(b, axis=0, dtype=np.float64))
