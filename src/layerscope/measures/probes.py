"""Linear probes per hidden state, with grouped cross-validation and the field's controls.

    profile = probe_states(X, labels, groups, method="logreg")  # X (n, S, d): row i at state s (0 = embeddings)
    profile.accuracy, profile.accuracy_ci, profile.q, profile.selectivity, profile.decodable_from
    fold = fold_ids(labels, groups, folds=5, seed=0)            # (n,) each row's fold, the same for every state
    control, control_fold = control_task(labels, groups, folds=5, seed=0)  # the control task's labels and folds
    s = decodable_from(profile.accuracy, profile.accuracy, profile.accuracy_ci)

Conventions (what a report quotes):

- Folds: ``StratifiedGroupKFold(folds, shuffle=True, random_state=seed)`` when every group has one label, else
  ``GroupKFold(folds, shuffle=True, random_state=seed)`` (groups with several labels, e.g. a pair's sides A and B).
  A group's rows are never split; one set of folds serves every state; relabellings carry it along (below).
- ``logreg``: per training fold, ``StandardScaler`` fitted on the training rows, then scikit-learn's
  ``LogisticRegression`` (L2, lbfgs; multinomial for several classes) with C from ``CS`` (10^-3 .. 10^2) chosen by an
  inner ``GroupKFold`` (3 splits, fewer if fewer groups) of the training rows only: the most inner out-of-fold hits
  (ties: the smaller C), refit on the whole training fold. Scores: decision function (binary), else probabilities.
- ``mass_mean`` (Marks & Tegmark), raw space, no standardisation: two classes, w = mean(class 1) - mean(class 0) of
  the training rows, class 1 when w.x > w.(mu0 + mu1) / 2, score w.x - w.(mu0 + mu1) / 2 (w.x, shifted so that the
  pooled folds share the decision point 0); several classes, the nearest class mean (Euclidean), scores minus the
  distances to the class means.
- Accuracy and AUROC from the pooled out-of-fold predictions and scores: AUROC of the positive class (the second of
  the sorted classes) or the macro mean of the one-vs-rest AUROCs; ties count one half.
- Bootstrap: groups resampled with replacement, accuracy and AUROC recomputed from the out-of-fold predictions of
  the resampled rows (no refit); percentile intervals at ``ci_level``. A resample where AUROC is undefined (a class
  missing) is left out of the AUROC interval.
- Relabelling (the permutations and the control task): with one label per group, the groups are permuted and each
  group takes another's label together with its fold, so every fold keeps the real task's class counts (permuting
  the labels alone over fixed stratified folds unbalances the training folds, and a probe fitted on unbalanced
  folds predicts its test fold's minority class: anti-learning, which drags the null below chance; logreg's p fell
  below 0.05 on 9 of 100 pure-noise sets that way, on 5 with carried folds); with several labels in a group, each
  group's labels are permuted within it (a pair: A and B swapped with probability 1/2), in the same folds.
- Permutation p of accuracy per state: each of ``n_permutations`` relabellings refitted; p = (1 + #{null >=
  observed}) / (1 + n_permutations), ties counted (conservative for a discrete accuracy); q: Benjamini-Hochberg over
  states (scipy's, as ``layerscope.stats.bh_qvalues``, which measures may not import). ``logreg`` shortcut: the null
  fits use one C per state, the one chosen most often over the real task's folds (ties: the smaller), no inner
  search, and features standardised over all rows (label-free) instead of per training fold, so that all
  relabellings share them; a batched L-BFGS fits them (:mod:`layerscope.measures.batched_logistic`, scikit-learn's
  objective to its tolerance). The observed accuracy in p is refitted the same way on the real labels, so observed
  and null are computed alike: p tests that fitted probe family, not the C search, and its observed accuracy can
  differ slightly from ``accuracy``.
- Control task (Hewitt & Liang 2019): one seeded relabelling as above (one label per group: the class frequencies
  over groups are the real task's), probed by the same procedure (for ``logreg`` with its own C search) in its
  carried folds; selectivity = accuracy - control accuracy, its interval from the same group resamples for both.
- ``decodable_from``: the smallest s with accuracy[t] >= the lower end of the best state's interval for all t >= s
  (None when the last state falls below). Its interval: the same rule on each resample's profile, with that
  profile's own maximum less the original margin (accuracy - interval low at the original best state); the lower
  and higher order statistics at ``ci_level``; None when nothing qualifies in more than (1 - ci_level) / 2 of the
  resamples (the interval would reach past the last state).

``seed`` fixes the folds and, through ``np.random.SeedSequence(seed).spawn(3)``, the control task, the permutations
and the group resamples, so both methods share all four on one input. BLAS runs single-threaded inside.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.stats import false_discovery_control
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold, StratifiedGroupKFold
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from .batched_logistic import fit_batched

CS = 10.0 ** np.arange(-3, 3)
"""The logistic regression's C grid, searched by the inner CV of each training fold."""
INNER_FOLDS = 3
MAX_ITER = 1000
METHODS = ("logreg", "mass_mean")


@dataclass
class ProbeProfile:
    """One method over all states; arrays indexed by state 0 .. S - 1, intervals (S, 2) as (low, high)."""

    method: str
    accuracy: np.ndarray
    accuracy_ci: np.ndarray
    auroc: np.ndarray
    auroc_ci: np.ndarray
    p: np.ndarray
    q: np.ndarray
    control_accuracy: np.ndarray
    control_ci: np.ndarray
    selectivity: np.ndarray
    selectivity_ci: np.ndarray
    decodable_from: int | None
    decodable_ci: tuple[int, int] | None
    n: int
    n_groups: int
    classes: tuple[str, ...]
    chance: float
    """The majority class's share of the rows."""


def probe_states(X, labels, groups, *, method: str = "logreg", folds: int = 5, n_bootstrap: int = 1000,
                 n_permutations: int = 200, seed: int = 0, ci_level: float = 0.95) -> ProbeProfile:
    """X (n, S, d) float (any float dtype; float64 inside, one state at a time), labels (n,) of str or int,
    groups (n,) of hashables: rows of one group are never split across folds -> a :class:`ProbeProfile`."""
    if method not in METHODS:
        raise ValueError(f"unknown probe method {method!r}; use one of {', '.join(METHODS)}")
    X, y, g, classes = _check(X, labels, groups, folds, n_bootstrap, n_permutations, ci_level)
    fold = _folds(y, g, folds, seed)
    _check_folds(fold, y, classes)
    control_rng, perm_rng, boot_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    tasks = [_relabel(y, g, fold, rng, count) for rng, count in ((control_rng, 1), (perm_rng, n_permutations))]
    Y = np.vstack([y] + [relabelled for relabelled, _ in tasks])  # (2 + P, n): real, control, permutations
    folds_of = np.vstack([fold] + [f for _, f in tasks])
    with threadpool_limits(limits=1):
        states = [_state(X[:, s].astype(np.float64), Y, folds_of, g, method, len(classes)) for s in range(X.shape[1])]
    correct = np.stack([st[0] == y for st in states])             # (S, n)
    control = np.stack([st[2] == Y[1] for st in states])
    weights = _group_weights(g, n_bootstrap, boot_rng)            # (B, n)
    acc_boot, control_boot = _weighted_mean(weights, correct), _weighted_mean(weights, control)  # (B, S)
    auroc_boot = np.stack([_auroc(st[1], y, weights) for st in states], axis=1)
    accuracy, control_accuracy = correct.mean(axis=1), control.mean(axis=1)
    accuracy_ci = _interval(acc_boot, ci_level)
    p = np.array([(1 + np.sum(st[4] >= st[3] - 1e-12)) / (1 + n_permutations) for st in states])
    first = decodable_from(accuracy, accuracy, accuracy_ci)
    return ProbeProfile(
        method=method, accuracy=accuracy, accuracy_ci=accuracy_ci,
        auroc=np.array([_auroc(st[1], y, np.ones((1, len(y))))[0] for st in states]),
        auroc_ci=_interval(auroc_boot, ci_level), p=p, q=false_discovery_control(p, method="bh"),
        control_accuracy=control_accuracy, control_ci=_interval(control_boot, ci_level),
        selectivity=accuracy - control_accuracy, selectivity_ci=_interval(acc_boot - control_boot, ci_level),
        decodable_from=first,
        decodable_ci=None if first is None else _decodable_interval(acc_boot, accuracy, accuracy_ci, ci_level),
        n=len(y), n_groups=int(g.max()) + 1, classes=classes, chance=float(np.bincount(y).max() / len(y)))


def decodable_from(accuracy_boot: np.ndarray, accuracy: np.ndarray, ci: np.ndarray) -> int | None:
    """The first state s of the profile ``accuracy_boot`` (S,) from which it stays at or above max(accuracy_boot)
    less the margin accuracy[b] - ci[b, 0] at b = argmax(accuracy) ((S,) and (S, 2), the observed profile and its
    interval); None when its last state falls below. On the observed profile, ``decodable_from(accuracy, accuracy,
    ci)``, the threshold is the lower end of the best state's interval; on a bootstrap resample's profile it is that
    resample's own maximum less the same margin."""
    profile, accuracy, ci = (np.asarray(a, dtype=np.float64) for a in (accuracy_boot, accuracy, ci))
    best = int(np.argmax(accuracy))
    threshold = profile.max() - (accuracy[best] - ci[best, 0])
    below = np.flatnonzero(~(profile >= threshold - 1e-12))
    if len(below) and below[-1] == len(profile) - 1:
        return None
    return int(below[-1] + 1) if len(below) else 0


def fold_ids(labels, groups, folds: int = 5, seed: int = 0) -> np.ndarray:
    """(n,) the fold (0 .. folds - 1) of every row, as :func:`probe_states` splits them."""
    y, g = _codes(labels)[0], _group_codes(groups)
    return _folds(y, g, folds, seed)


def control_task(labels, groups, folds: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The control task as :func:`probe_states` draws it for ``seed``: (n,) labels (values of ``labels``) and (n,)
    folds."""
    y, g = _codes(labels)[0], _group_codes(groups)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[0])
    control, fold = _relabel(y, g, _folds(y, g, folds, seed), rng, 1)
    return np.unique(np.asarray(labels))[control[0]], fold[0]


def _check(X, labels, groups, folds, n_bootstrap, n_permutations, ci_level):
    X = np.asarray(X)
    if X.ndim != 3 or X.dtype.kind not in "fiu":
        raise ValueError(f"X is a {X.ndim}-D {X.dtype} array of shape {X.shape}; probes need a 3-D float array "
                         "(n rows, S states, d features), e.g. np.stack(per_state_vectors, axis=1)")
    labels, groups = np.asarray(labels), list(groups)
    if not len(labels) == len(groups) == len(X):
        raise ValueError(f"X has {len(X)} rows, labels {len(labels)} and groups {len(groups)}; "
                         "give one label and one group per row of X")
    if not np.isfinite(X).all():
        row, state = np.argwhere(~np.isfinite(X))[0][:2]
        raise ValueError(f"X holds NaN or inf (first at row {row}, state {state}); probes need finite states, so "
                         "extract in float32 and check the model's weights, or drop those rows")
    if int(folds) != folds or folds < 2 or n_bootstrap < 1 or n_permutations < 1 or not 0 < ci_level < 1:
        raise ValueError(f"folds={folds}, n_bootstrap={n_bootstrap}, n_permutations={n_permutations}, "
                         f"ci_level={ci_level}: use folds >= 2, n_bootstrap and n_permutations >= 1, 0 < ci_level < 1")
    y, classes = _codes(labels)
    g = _group_codes(groups)
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
    return X, y, g, classes


def _codes(labels) -> tuple[np.ndarray, tuple[str, ...]]:
    values, y = np.unique(np.asarray(labels), return_inverse=True)
    return y.ravel(), tuple(str(v) for v in values)


def _group_codes(groups) -> np.ndarray:
    """(n,) each row's group index: in sorted order when the groups sort (as scikit-learn numbers them, so that its
    splitters called on the raw groups give the same folds), else in order of first appearance."""
    first: dict = {}
    codes = np.array([first.setdefault(x, len(first)) for x in groups], dtype=np.intp)
    try:
        order = sorted(range(len(first)), key=list(first).__getitem__)
    except TypeError:
        return codes
    rank = np.empty(len(order), dtype=np.intp)
    rank[order] = np.arange(len(order))
    return rank[codes]


def _single_label(y: np.ndarray, g: np.ndarray) -> bool:
    group_label = np.empty(g.max() + 1, dtype=y.dtype)
    group_label[g] = y
    return bool((group_label[g] == y).all())


def _folds(y: np.ndarray, g: np.ndarray, folds: int, seed: int) -> np.ndarray:
    kind = StratifiedGroupKFold if _single_label(y, g) else GroupKFold
    fold = np.empty(len(y), dtype=np.intp)
    for f, (_, test) in enumerate(kind(n_splits=folds, shuffle=True, random_state=seed).split(fold, y, g)):
        fold[test] = f
    return fold


def _check_folds(fold: np.ndarray, y: np.ndarray, classes: tuple[str, ...]) -> None:
    for f in range(fold.max() + 1):
        if missing := [classes[k] for k in range(len(classes)) if not np.any(y[fold != f] == k)]:
            raise ValueError(f"the training rows of fold {f} hold no row of class {missing[0]!r} (its groups all "
                             "fell in that fold); lower folds, change seed or add groups of that class")


def _relabel(y, g, fold, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(count, n) relabellings and their (count, n) folds. One label per group: a permutation of the groups, each
    group taking another's label and fold, so every fold keeps its class counts; else each group's labels permuted
    within it, in the same folds."""
    if _single_label(y, g):
        group_label, group_fold = np.empty(g.max() + 1, dtype=y.dtype), np.empty(g.max() + 1, dtype=fold.dtype)
        group_label[g], group_fold[g] = y, fold
        moves = np.stack([rng.permutation(len(group_label)) for _ in range(count)])
        return group_label[moves][:, g], group_fold[moves][:, g]
    by_group = np.argsort(g, kind="stable")
    out = np.empty((count, len(y)), dtype=y.dtype)
    for row in out:
        row[by_group] = y[np.lexsort((rng.random(len(y)), g))]  # the same group sizes, shuffled within each
    return out, np.broadcast_to(fold, out.shape)


def _state(x, Y, folds_of, g, method, n_classes):
    """One state x (n, d); label rows Y (2 + P, n) and their folds: the real task, the control, the permutations ->
    (pred, scores, control pred, observed accuracy for p, (P,) null accuracies)."""
    if method == "mass_mean":
        pred, scores = _mass_mean(x, Y, folds_of, n_classes)
        return pred[0], scores[0], pred[1], np.mean(pred[0] == Y[0]), (pred[2:] == Y[2:]).mean(axis=1)
    pred, scores, cs = _logreg(x, Y[0], folds_of[0], g, n_classes)
    control = _logreg(x, Y[1], folds_of[1], g, n_classes)[0]
    values, counts = np.unique(cs, return_counts=True)
    rows = np.r_[0, 2:len(Y)]
    null = _logreg_null(x, Y[rows], folds_of[rows], float(values[np.argmax(counts)]), n_classes)
    return pred, scores, control, np.mean(null[0] == Y[0]), (null[1:] == Y[2:]).mean(axis=1)


def _mass_mean(x: np.ndarray, Y: np.ndarray, folds_of: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """x (n, d), label codes Y (P, n) and folds (P, n) -> out-of-fold predictions (P, n) and scores, (P, n) for two
    classes else (P, n, K). A class absent from a training fold (possible in a relabelling) is never predicted."""
    P, n = Y.shape
    x = x - x.mean(axis=0)  # distances are shift-invariant; centring keeps them precise
    onehot = Y[..., None] == np.arange(n_classes)                                     # (P, n, K)
    pred = np.empty((P, n), dtype=np.intp)
    scores = np.empty((P, n) if n_classes == 2 else (P, n, n_classes))
    for f in range(folds_of.max() + 1):
        train = (onehot & (folds_of != f)[..., None]).transpose(0, 2, 1).astype(np.float64)  # (P, K, n)
        counts = train.sum(axis=2)                                                         # (P, K)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = (train.reshape(-1, n) @ x).reshape(P, n_classes, -1) / counts[..., None]  # (P, K, d)
        sq = ((x**2).sum(axis=1)[None, :, None] - 2 * (means @ x.T).transpose(0, 2, 1)
              + (means**2).sum(axis=2)[:, None, :])                                       # (P, n, K)
        sq = np.where(counts[:, None, :] > 0, np.maximum(sq, 0.0), np.inf)
        test = folds_of == f
        pred[test] = sq.argmin(axis=2)[test]
        with np.errstate(invalid="ignore"):
            scores[test] = ((sq[..., 0] - sq[..., 1]) / 2 if n_classes == 2 else -np.sqrt(sq))[test]
    return pred, scores


def _logreg(x, y, fold, g, n_classes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Out-of-fold predictions (n,), scores ((n,) or (n, K)) and the C chosen in each fold (folds,)."""
    pred = np.empty(len(y), dtype=np.intp)
    scores = np.zeros(len(y) if n_classes == 2 else (len(y), n_classes))
    cs = np.empty(fold.max() + 1)
    for f in range(len(cs)):
        train, test = fold != f, fold == f
        if len(present := np.unique(y[train])) < 2:  # a relabelling left one class in training: predict it
            pred[test], cs[f] = present[0], CS[0]
            continue
        cs[f] = _choose_c(x[train], y[train], g[train])
        scaler = StandardScaler().fit(x[train])
        model = LogisticRegression(C=cs[f], max_iter=MAX_ITER).fit(scaler.transform(x[train]), y[train])
        xte = scaler.transform(x[test])
        pred[test] = model.predict(xte)
        if n_classes == 2:
            scores[test] = model.decision_function(xte)
        else:
            scores[np.ix_(test, model.classes_)] = model.predict_proba(xte)
    return pred, scores, cs


def _choose_c(x: np.ndarray, y: np.ndarray, g: np.ndarray) -> float:
    """The C of ``CS`` with the most hits over an inner grouped CV of these (training) rows; ties: the smaller."""
    hits = np.zeros(len(CS))
    for train, test in GroupKFold(n_splits=min(INNER_FOLDS, len(np.unique(g)))).split(x, y, g):
        if len(np.unique(y[train])) < 2:
            continue
        scaler = StandardScaler().fit(x[train])
        xtr, xte = scaler.transform(x[train]), scaler.transform(x[test])
        model = LogisticRegression(max_iter=MAX_ITER, warm_start=True)  # ascending C: each fit starts at the last
        for i, c in enumerate(CS):
            hits[i] += np.sum(model.set_params(C=c).fit(xtr, y[train]).predict(xte) == y[test])
    return float(CS[int(np.argmax(hits))])


def _logreg_null(x, Y, folds_of, c, n_classes) -> np.ndarray:
    """x (n, d), label codes Y (P, n) and folds (P, n) -> (P, n) out-of-fold predictions, all at C = c, on features
    standardised over all rows (label-free) so that every label row shares them, its training rows as weights."""
    u, s, vt = np.linalg.svd(StandardScaler().fit_transform(x), full_matrices=False)
    keep = s > s[0] * 1e-10  # the row space: an L2 fit lies in it, so this basis gives the same probe
    z = u[:, keep] * s[keep]
    pred = np.empty(Y.shape, dtype=np.intp)
    for f in range(folds_of.max() + 1):
        theta = fit_batched(z, Y, c, n_classes, weights=(folds_of != f).astype(np.float64))  # (P, r + 1, k)
        eta = np.einsum("nj,pjk->pnk", np.hstack([z, np.ones((len(z), 1))]), theta)
        test = folds_of == f
        pred[test] = (eta[..., 0] > 0 if n_classes == 2 else eta.argmax(axis=2))[test]
    return pred


def _group_weights(g: np.ndarray, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """(B, n): how often each row's group is drawn when the groups are resampled with replacement."""
    n_groups = int(g.max()) + 1
    draws = rng.integers(0, n_groups, size=(n_bootstrap, n_groups)) + n_groups * np.arange(n_bootstrap)[:, None]
    counts = np.bincount(draws.ravel(), minlength=n_bootstrap * n_groups).reshape(n_bootstrap, n_groups)
    return counts[:, g].astype(np.float64)


def _weighted_mean(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(B, n) weights, (S, n) values -> (B, S)."""
    return (weights @ values.T) / weights.sum(axis=1, keepdims=True)


def _auroc(scores: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
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


def _interval(samples: np.ndarray, level: float) -> np.ndarray:
    """(B, S) resampled statistics -> (S, 2) equal-tailed percentile intervals, NaN resamples left out."""
    alpha = 1.0 - level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: no interval
        return np.nanpercentile(samples, [alpha / 2 * 100, (1 - alpha / 2) * 100], axis=0).T


def _decodable_interval(acc_boot, accuracy, ci, level) -> tuple[int, int] | None:
    n_states, alpha = len(accuracy), 1.0 - level
    firsts = [decodable_from(profile, accuracy, ci) for profile in acc_boot]
    values = np.array([n_states if s is None else s for s in firsts])  # None: past the last state
    low = int(np.percentile(values, alpha / 2 * 100, method="lower"))
    high = int(np.percentile(values, (1 - alpha / 2) * 100, method="higher"))
    return None if high >= n_states else (low, high)
