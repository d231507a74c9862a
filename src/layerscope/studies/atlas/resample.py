"""The atlas's boundary profiles on resamples of the texts, from one pass's per-text sums.

    weights = draw_weights(n_texts, n_resamples=200, seed=42)     # (R + 1, n): row 0 all ones, the full data
    profiles = resampled_profiles(p, weights, token_set=0)         # {measure: (layers, values (R + 1, L))}

A resample draws the texts with replacement (``weights[r, i]``: how often text i was drawn). Measures that are sums
over texts (the lens, and the tuned lens when the pass had one, block influence, angular distance, norm, prompt
entropy) weight each text by its count; the massive ratio is the weighted median. Measures computed over all texts
at once (debiased CKA with the next layer, TwoNN, dataset entropy) take each drawn text once: a repeated text is a
duplicate point, which TwoNN cannot use and the unbiased HSIC would count as a pair. The covariance top-1 share of a
resample is its Rayleigh-Ritz value (:mod:`layerscope.engine.atlas.sums`); row 0 is always the pass's exact value.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...engine.atlas.stream import AtlasPass
from ...measures.cka_debiased import debiased_cka_from_grams, gram
from ...measures.entropy import gram_entropy, matrix_entropy
from ...measures.intrinsic import pairwise_distances, twonn_from_distances
from ...progress import steps

MAX_RESAMPLED_TEXTS = 2000
"""Texts the all-at-once measures resample from (a seeded subset beyond it): three n x n matrices per layer."""


def draw_weights(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """``(n_resamples + 1, n)`` counts: row 0 ones (the full data), then one bootstrap draw of ``n`` texts per row."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(n_resamples, n))
    counts = np.zeros((n_resamples, n))
    np.add.at(counts, (np.repeat(np.arange(n_resamples), n), draws.ravel()), 1)
    return np.vstack([np.ones((1, n)), counts])


def resampled_profiles(p: AtlasPass, weights: np.ndarray, token_set: int = 0, twonn: str = "mle",
                       seed: int = 0) -> dict[str, tuple[list[int], np.ndarray]]:
    """{measure: (layers, values (R + 1, len(layers)))} for every boundary measure of ``token_set`` (0: every
    token; 1: without position 0 and the massive tokens, where the massive ratio has no meaning and is left out);
    ratios and norms on a log10 scale, as the boundaries read them."""
    t, s, w = p.texts, token_set, np.asarray(weights, dtype=np.float64)
    layers, steps = p.layers, p.transitions
    with np.errstate(invalid="ignore", divide="ignore"):
        lens = np.einsum("rn,nlk->rlk", w, t.lens[s]) / (w @ t.scored[s])[:, None, None]
        tokens = (w @ t.tokens[s])[:, None]
        out = {"lens_kl": (layers, lens[..., 2]), "lens_top1_agree": (layers, lens[..., 3]),
               "block_influence": (steps, (w @ t.influence[s]) / tokens),
               "angular_distance": (steps, weighted_nanmean(t.angular[s], w)),
               "norm": (layers, np.log10((w @ t.norm[s]) / tokens)),
               "prompt_entropy": (layers, weighted_nanmean(t.entropy[s], w))}
        if t.tuned_lens is not None:
            tuned = np.einsum("rn,nlk->rlk", w, t.tuned_lens[s]) / (w @ t.scored[s])[:, None, None]
            out |= {"tuned_lens_kl": (layers, tuned[..., 2]), "tuned_lens_top1_agree": (layers, tuned[..., 3])}
        if s == 0:
            out["massive_ratio"] = (layers, np.log10(weighted_median(t.massive_ratio, w)))
    top1 = ritz_top1(p, s, w)
    top1[0] = (p.spectrum if s == 0 else p.spectrum_kept)["top1_ratio"]
    out["top1_ratio"] = (layers, top1)
    out.update(pooled_profiles(p, w, s, twonn, seed))
    return out


def weighted_nanmean(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(R + 1, X): per row of ``w`` (R + 1, n) the count-weighted mean over texts of ``values`` (n, X), NaN left out."""
    ok = np.isfinite(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ np.where(ok, values, 0.0)) / (w @ ok)


def weighted_median(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(R + 1, X): per row of ``w`` (R + 1, n) the median (``np.median``'s: the mean of the two middle values for
    an even count) of ``values`` (n, X) with text i repeated ``w[r, i]`` times."""
    out = np.empty((len(w), values.shape[1]))
    for x in range(values.shape[1]):
        order = np.argsort(values[:, x], kind="stable")
        sorted_values, cumulative = values[order, x], np.cumsum(w[:, order], axis=1)  # (n,), (R + 1, n)
        total = cumulative[:, -1]
        for r in range(len(w)):
            low, high = np.searchsorted(cumulative[r], [(total[r] - 1) // 2, total[r] // 2], side="right")
            out[r, x] = (sorted_values[low] + sorted_values[high]) / 2
    return out


def ritz_top1(p: AtlasPass, s: int, w: np.ndarray) -> np.ndarray:
    """(R + 1, L): each resample's covariance top-1 share from the Rayleigh-Ritz sums of token set ``s``."""
    t = p.texts
    n_tokens = w @ t.tokens[s]  # (R + 1,)
    out = np.full((len(w), len(p.layers)), np.nan)
    for j in range(len(p.layers)):
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (w @ t.first[s, :, j].astype(np.float64)) / n_tokens[:, None]  # (R + 1, d), shifted
            projected = mean @ t.basis[s, j]  # (R + 1, k)
            k = projected.shape[1]
            second = (w @ t.ritz[s, :, j].reshape(len(t.tokens[s]), k * k).astype(np.float64)).reshape(-1, k, k)
            scale = n_tokens[:, None, None]
            covariance = (second - scale * projected[:, :, None] * projected[:, None, :]) / (scale - 1)
            trace = (w @ t.square[s, :, j] - n_tokens * (mean * mean).sum(axis=1)) / (n_tokens - 1)
        usable = n_tokens >= 2
        if usable.any():
            out[usable, j] = np.linalg.eigvalsh(covariance[usable])[:, -1] / trace[usable]
    return out


def pooled_profiles(p: AtlasPass, w: np.ndarray, s: int, twonn: str,
                    seed: int) -> dict[str, tuple[list[int], np.ndarray]]:
    """Debiased CKA with the next layer, TwoNN and dataset entropy per resample, each drawn text once."""
    pooled = p.texts.pooled[s]  # (n, L, d) float32, NaN rows where the set holds no token of a text
    valid = np.flatnonzero(np.isfinite(pooled).all(axis=(1, 2)))
    if len(valid) > MAX_RESAMPLED_TEXTS:
        valid = np.sort(np.random.default_rng(seed).choice(valid, MAX_RESAMPLED_TEXTS, replace=False))
    subsets = [np.flatnonzero(row[valid] > 0) for row in w]  # positions in `valid` of each resample's texts
    n_l = len(p.layers)
    cka, twonn_id, entropy = (np.full((len(w), n_l), np.nan) for _ in range(3))
    previous = None
    for j in steps(range(n_l), f"atlas: {len(w)} resamples of CKA, TwoNN and entropy", "layer"):
        x = pooled[valid, j].astype(np.float64)
        centred = gram(x)
        for r, u in enumerate(subsets):
            if len(u) >= 4 and previous is not None:
                cka[r, j - 1] = debiased_cka_from_grams(previous[np.ix_(u, u)], centred[np.ix_(u, u)])
        twonn_id[:, j] = _each(subsets, pairwise_distances(x), lambda d: twonn_from_distances(d, twonn), 3)
        raw = x @ x.T
        with ThreadPoolExecutor(os.cpu_count()) as pool:  # the eigensolver releases the GIL: one per core
            entropy[:, j] = list(pool.map(lambda u, x=x, raw=raw: _entropy(x, raw, u, p.convention)
                                          if len(u) >= 2 else np.nan, subsets))
        previous = centred
    return {"cka_next": (p.layers[:-1], cka[:, :-1]), "twonn_id": (p.layers, twonn_id),
            "dataset_entropy": (p.layers, entropy)}


def _each(subsets: list[np.ndarray], matrix: np.ndarray, measure: Callable[[np.ndarray], float],
          least: int) -> np.ndarray:
    return np.array([measure(matrix[np.ix_(u, u)]) if len(u) >= least else np.nan for u in subsets])


def _entropy(x: np.ndarray, raw: np.ndarray, u: np.ndarray, convention: str) -> float:
    """The normalised dataset entropy of the pooled vectors ``x[u]`` (m, d) in the pass's convention, from the
    subset of their raw Gram ``raw`` where that is exact (m <= d, or the raw convention); NaN if undefined."""
    if len(u) <= x.shape[1] or convention == "raw":
        return gram_entropy(raw[np.ix_(u, u)], x.shape[1], convention)
    try:
        return matrix_entropy(x[u], convention).normalised_entropy
    except ValueError:
        return float("nan")
