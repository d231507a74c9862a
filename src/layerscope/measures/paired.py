"""Paired effects over texts: how much an intervention changes each text, with an interval and a test.

    mean, lo, hi, p = paired_effects(diffs, n_boot=2000, n_perm=2000, seed=0)   # diffs: (m, n_texts)
    effect, p, n = placement_test(costs, chosen=[9, 19], candidates=range(1, 29), n_perm=5000, seed=0)

``paired_effects``: for each row of per-text differences (intervened minus intact), the mean over texts, its
percentile bootstrap interval (texts resampled with replacement, one set of resamples shared by every row so
rows stay comparable) and the two-sided sign-flip permutation p of the paired test (under the null of no
effect each text's difference is as likely positive as negative): (1 + #{|mean(s * d)| >= |mean(d)|}) /
(1 + n_perm), exact over all 2^n sign patterns when they number at most ``n_perm``.

``placement_test``: is the mean cost at the ``chosen`` positions larger than at the other ``candidates``? The
statistic is mean(chosen) - mean(rest); the null places the same number of positions uniformly among the
candidates (every placement when they number at most ``n_perm``); one-sided p = (1 + #{null >= observed}) /
(1 + n_draws), or the exact fraction when every placement is counted.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import numpy as np


def paired_effects(diffs: np.ndarray, n_boot: int, n_perm: int, seed: int, level: float = 0.95
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(m, n) per-text differences -> (m,) mean, CI low, CI high and sign-flip p each."""
    diffs = np.atleast_2d(np.asarray(diffs, dtype=np.float64))
    m, n = diffs.shape
    rng = np.random.default_rng(seed)
    means = diffs.mean(axis=1)
    idx = rng.integers(0, n, size=(n_boot, n))
    boot = np.stack([diffs[:, rows].mean(axis=1) for rows in idx], axis=1)  # (m, n_boot)
    ci = _percentile_interval(boot, level)
    if 2**n <= n_perm:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        null = np.abs(diffs @ signs.T) / n  # (m, 2^n), the observed pattern among them
        p = (null >= np.abs(means)[:, None] - 1e-12).mean(axis=1)
    else:
        signs = rng.choice((1.0, -1.0), size=(n_perm, n))
        null = np.abs(diffs @ signs.T) / n
        p = (1 + (null >= np.abs(means)[:, None] - 1e-12).sum(axis=1)) / (1 + n_perm)
    return means, ci[:, 0], ci[:, 1], p


def placement_test(costs: np.ndarray, chosen: Iterable[int], candidates: Iterable[int], n_perm: int,
                   seed: int) -> tuple[float, float, int]:
    """``costs`` indexed by position; ``chosen`` a subset of ``candidates`` -> (observed mean(chosen) -
    mean(rest), one-sided p, placements compared)."""
    costs = np.asarray(costs, dtype=np.float64)
    candidates = sorted(set(int(c) for c in candidates))
    chosen = sorted(set(int(c) for c in chosen))
    if not set(chosen) <= set(candidates) or not 0 < len(chosen) < len(candidates):
        raise ValueError(f"chosen positions {chosen} must be a non-empty proper subset of the candidates")
    values = costs[candidates]
    k, total = len(chosen), values.sum()
    observed = _difference(costs[chosen].sum(), total, k, len(values))
    if math.comb(len(values), k) <= n_perm:
        sums = np.array([values[list(c)].sum() for c in itertools.combinations(range(len(values)), k)])
        null = _difference(sums, total, k, len(values))
        return float(observed), float((null >= observed - 1e-12).mean()), len(null)
    rng = np.random.default_rng(seed)
    draws = np.argsort(rng.random((n_perm, len(values))), axis=1)[:, :k]
    null = _difference(values[draws].sum(axis=1), total, k, len(values))
    return float(observed), float((1 + (null >= observed - 1e-12).sum()) / (1 + n_perm)), n_perm


def _percentile_interval(boot: np.ndarray, level: float) -> np.ndarray:
    """(m, n_boot) resampled statistics -> (m, 2) equal-tailed percentile intervals (numpy's linear rule)."""
    alpha = 1.0 - level
    return np.percentile(boot, [alpha / 2 * 100, (1 - alpha / 2) * 100], axis=1).T


def _difference(chosen_sum, total, k: int, n: int):
    return chosen_sum / k - (total - chosen_sum) / (n - k)


def group_difference(values: np.ndarray, low: np.ndarray, n_boot: int, n_perm: int, seed: int,
                     level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(m, n) per-text values and (n,) bool group labels -> per row the difference of group means (True minus
    False), its bootstrap interval (texts resampled within each group) and the two-sided p of a permutation
    of the labels over texts: (1 + #{|null| >= |observed|}) / (1 + n_perm)."""
    values = np.atleast_2d(np.asarray(values, dtype=np.float64))
    low = np.asarray(low, dtype=bool)
    if low.all() or not low.any():
        raise ValueError("a group difference needs texts in both groups")
    rng = np.random.default_rng(seed)

    def diff(labels: np.ndarray) -> np.ndarray:  # labels (r, n) -> (m, r)
        w_low = labels / labels.sum(axis=1, keepdims=True)
        w_high = ~labels / (~labels).sum(axis=1, keepdims=True)
        return values @ (w_low - w_high).T

    observed = diff(low[None, :])[:, 0]
    a, b = np.flatnonzero(low), np.flatnonzero(~low)
    boot = np.stack([values[:, rng.choice(a, len(a))].mean(axis=1) - values[:, rng.choice(b, len(b))].mean(axis=1)
                     for _ in range(n_boot)], axis=1)
    ci = _percentile_interval(boot, level)
    shuffled = np.array([rng.permutation(low) for _ in range(n_perm)])
    null = diff(shuffled)
    p = (1 + (np.abs(null) >= np.abs(observed)[:, None] - 1e-12).sum(axis=1)) / (1 + n_perm)
    return observed, ci[:, 0], ci[:, 1], p


def rank_sum_p(ranks: list[int], sizes: list[int]) -> float:
    """One-sided p of a rule that ranks ``ranks[i]`` (1 = cheapest) among ``sizes[i]`` candidates at each of
    several independent comparisons: P(sum of independent uniforms on 1..sizes[i] <= sum of ranks), exact by
    convolution. The null: at each comparison the rule's choice is one more random draw."""
    dist = np.array([1.0])  # dist[s]: probability that the sum of the ranks so far is s + (number so far)
    for size in sizes:
        dist = np.convolve(dist, np.full(size, 1.0 / size))
    observed = sum(ranks) - len(ranks)
    return float(min(1.0, dist[: observed + 1].sum()))
