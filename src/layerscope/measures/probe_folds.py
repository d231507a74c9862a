"""The probes' resampling: folds, relabellings, group-bootstrap weights, percentile intervals, AUROC, and the
state rules read off a profile (plateau, decodable run).

    fold = fold_ids(labels, groups, folds=5, seed=0)          # (n,) each row's fold, the same for every state
    weights = group_weights(g, n_bootstrap=1000, rng=rng)     # (B, n) how often each row's group is drawn
    lo_hi = interval(weighted_mean(weights, correct), 0.95)   # (S, 2) percentile interval of accuracy per state
    s = plateau_from(accuracy, accuracy, accuracy_ci)         # the old "decodable from": stays near the best state
    s = decodable_start(decodable)                            # the first state from which every later one is True

The conventions are :mod:`layerscope.measures.probes`'s (its module docstring is the contract); this module holds
the parts that fit no probe.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.model_selection import GroupKFold, StratifiedGroupKFold


def fold_ids(labels, groups, folds: int = 5, seed: int = 0) -> np.ndarray:
    """(n,) the fold (0 .. folds - 1) of every row, as :func:`~layerscope.measures.probes.probe_states` splits
    them."""
    y, g = codes(labels)[0], group_codes(groups)
    return make_folds(y, g, folds, seed)


def check_task(labels, groups, folds: int, n: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """labels (n,), groups (n,) for ``folds`` folds -> (n,) class codes, (n,) group codes and the class names; a
    ``ValueError`` naming the fix when they cannot be cross-validated so."""
    labels, groups = np.asarray(labels), list(groups)
    if not len(labels) == len(groups) == n:
        raise ValueError(f"X has {n} rows, labels {len(labels)} and groups {len(groups)}; "
                         "give one label and one group per row of X")
    if int(folds) != folds or folds < 2:
        raise ValueError(f"folds={folds}: use folds >= 2")
    y, classes = codes(labels)
    g = group_codes(groups)
    if len(classes) < 2:
        raise ValueError(f"the labels hold {len(classes)} class(es) {classes}; a probe needs at least two classes, "
                         "so add rows of another class")
    n_groups = int(g.max()) + 1
    if n_groups < 2 * folds:
        raise ValueError(f"{n_groups} groups for folds={folds}; grouped cross-validation needs at least 2 * folds "
                         f"groups, so lower folds (at most {n_groups // 2}) or add groups")
    for k, name in enumerate(classes):
        if (count := len(np.unique(g[y == k]))) < folds:
            lower = f" or lower folds to {count}" if count >= 2 else ""
            raise ValueError(f"class {name!r} is in {count} groups, fewer than folds={folds}; every class needs a "
                             f"group in every fold, so add groups of that class{lower}")
    return y, g, classes


def codes(labels) -> tuple[np.ndarray, tuple[str, ...]]:
    """labels (n,) -> (n,) class codes 0 .. K - 1 in sorted order and the K class names."""
    values, y = np.unique(np.asarray(labels), return_inverse=True)
    return y.ravel(), tuple(str(v) for v in values)


def group_codes(groups) -> np.ndarray:
    """(n,) each row's group index: in sorted order when the groups sort (as scikit-learn numbers them, so that its
    splitters called on the raw groups give the same folds), else in order of first appearance."""
    first: dict = {}
    out = np.array([first.setdefault(x, len(first)) for x in groups], dtype=np.intp)
    try:
        order = sorted(range(len(first)), key=list(first).__getitem__)
    except TypeError:
        return out
    rank = np.empty(len(order), dtype=np.intp)
    rank[order] = np.arange(len(order))
    return rank[out]


def single_label(y: np.ndarray, g: np.ndarray) -> bool:
    """Whether every group's rows share one label."""
    group_label = np.empty(g.max() + 1, dtype=y.dtype)
    group_label[g] = y
    return bool((group_label[g] == y).all())


def make_folds(y: np.ndarray, g: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """(n,) folds: ``StratifiedGroupKFold`` when every group has one label, else ``GroupKFold``, both shuffled."""
    kind = StratifiedGroupKFold if single_label(y, g) else GroupKFold
    fold = np.empty(len(y), dtype=np.intp)
    for f, (_, test) in enumerate(kind(n_splits=folds, shuffle=True, random_state=seed).split(fold, y, g)):
        fold[test] = f
    return fold


def check_folds(fold: np.ndarray, y: np.ndarray, classes: tuple[str, ...]) -> None:
    """A ``ValueError`` naming the fix when a training fold lacks a class."""
    for f in range(fold.max() + 1):
        if missing := [classes[k] for k in range(len(classes)) if not np.any(y[fold != f] == k)]:
            raise ValueError(f"the training rows of fold {f} hold no row of class {missing[0]!r} (its groups all "
                             "fell in that fold); lower folds, change seed or add groups of that class")


def relabel(y, g, fold, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(count, n) relabellings and their (count, n) folds. One label per group: a permutation of the groups, each
    group taking another's label and fold, so every fold keeps its class counts; else each group's labels permuted
    within it, in the same folds."""
    if single_label(y, g):
        group_label, group_fold = np.empty(g.max() + 1, dtype=y.dtype), np.empty(g.max() + 1, dtype=fold.dtype)
        group_label[g], group_fold[g] = y, fold
        moves = np.stack([rng.permutation(len(group_label)) for _ in range(count)])
        return group_label[moves][:, g], group_fold[moves][:, g]
    by_group = np.argsort(g, kind="stable")
    out = np.empty((count, len(y)), dtype=y.dtype)
    for row in out:
        row[by_group] = y[np.lexsort((rng.random(len(y)), g))]  # the same group sizes, shuffled within each
    return out, np.broadcast_to(fold, out.shape)


def group_weights(g: np.ndarray, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """(B, n): how often each row's group is drawn when the groups (codes 0 .. G - 1) are resampled with
    replacement: per resample, G draws of ``rng.integers(0, G)``."""
    n_groups = int(g.max()) + 1
    draws = rng.integers(0, n_groups, size=(n_bootstrap, n_groups)) + n_groups * np.arange(n_bootstrap)[:, None]
    counts = np.bincount(draws.ravel(), minlength=n_bootstrap * n_groups).reshape(n_bootstrap, n_groups)
    return counts[:, g].astype(np.float64)


def weighted_mean(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(B, n) weights, (S, n) values -> (B, S)."""
    return (weights @ values.T) / weights.sum(axis=1, keepdims=True)


def interval(samples: np.ndarray, level: float) -> np.ndarray:
    """(B, S) resampled statistics -> (S, 2) equal-tailed percentile intervals, NaN resamples left out."""
    alpha = 1.0 - level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: no interval
        return np.nanpercentile(samples, [alpha / 2 * 100, (1 - alpha / 2) * 100], axis=0).T


def auroc(scores: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC of scores (n,) for class 1, or macro one-vs-rest of scores (n, K), weighting rows by each row of
    weights (B, n) -> (B,); NaN where a class has no weight."""
    if scores.ndim == 1:
        return _binary_auroc(scores, y == 1, weights)
    return np.mean([_binary_auroc(scores[:, k], y == k, weights) for k in range(scores.shape[1])], axis=0)


def _binary_auroc(score: np.ndarray, positive: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted Mann-Whitney: P(score of a positive > score of a negative) + P(tie) / 2, per row of weights."""
    order = np.argsort(score, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(score[order]) != 0])  # blocks of tied scores
    w = weights[:, order]
    pos = np.add.reduceat(w * positive[order], starts, axis=1)
    neg = np.add.reduceat(w * ~positive[order], starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg
    denominator = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (pos * (below + neg / 2)).sum(axis=1) / denominator, np.nan)


def plateau_from(accuracy_boot: np.ndarray, accuracy: np.ndarray, ci: np.ndarray) -> int | None:
    """The first state s of the profile ``accuracy_boot`` (S,) from which it stays at or above max(accuracy_boot)
    less the margin accuracy[b] - ci[b, 0] at b = argmax(accuracy) ((S,) and (S, 2), the observed profile and its
    interval); None when its last state falls below. On the observed profile, ``plateau_from(accuracy, accuracy,
    ci)``, the threshold is the lower end of the best state's interval; on a bootstrap resample's profile it is that
    resample's own maximum less the same margin. (Until issue 45 this was ``decodable_from``.)"""
    profile, accuracy, ci = (np.asarray(a, dtype=np.float64) for a in (accuracy_boot, accuracy, ci))
    best = int(np.argmax(accuracy))
    threshold = profile.max() - (accuracy[best] - ci[best, 0])
    below = np.flatnonzero(~(profile >= threshold - 1e-12))
    if len(below) and below[-1] == len(profile) - 1:
        return None
    return int(below[-1] + 1) if len(below) else 0


def plateau_interval(acc_boot: np.ndarray, accuracy: np.ndarray, ci: np.ndarray, level: float
                     ) -> tuple[int, int] | None:
    """:func:`plateau_from` on each resample's profile (acc_boot (B, S)): the lower and higher order statistics at
    ``level``; None when the higher reaches past the last state (nothing qualifies in more than (1 - level) / 2 of
    the resamples)."""
    n_states, alpha = len(accuracy), 1.0 - level
    firsts = [plateau_from(profile, accuracy, ci) for profile in acc_boot]
    values = np.array([n_states if s is None else s for s in firsts])  # None: past the last state
    low = int(np.percentile(values, alpha / 2 * 100, method="lower"))
    high = int(np.percentile(values, (1 - alpha / 2) * 100, method="higher"))
    return None if high >= n_states else (low, high)


def decodable_start(decodable) -> int | None:
    """decodable (S,) bool -> the first state s with decodable[t] for every t >= s; None when the last state is
    not decodable. [F, T, F, T, T] -> 3."""
    decodable = np.asarray(decodable, dtype=bool)
    if len(decodable) == 0 or not decodable[-1]:
        return None
    off = np.flatnonzero(~decodable)
    return int(off[-1] + 1) if len(off) else 0
