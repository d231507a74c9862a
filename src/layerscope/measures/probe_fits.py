"""The probes' fits: the logistic probe with its nested C search, the fixed-C logistic fits of the nulls and
controls, and the mass-mean probe, each giving out-of-fold predictions.

    plan = nested_plan(y, g, fold)                          # the outer and inner splits (the same for every state)
    pred, scores, cs = logreg_oof(x, y, plan, n_classes)    # x (n, d): out-of-fold predictions, scores, C per fold
    pred = logreg_fixed(x, Y, folds_of, c, n_classes)       # Y (P, n) label rows at one C, features standardised
    pred, scores = mass_mean(x, Y, folds_of, n_classes)     # over all rows; mass-mean: raw space

What :func:`logreg_oof` computes is scikit-learn's nested CV (the contract in :mod:`layerscope.measures.probes`):
per training fold, an inner ``GroupKFold`` (3 splits, fewer if fewer groups; unshuffled), per inner split a
``StandardScaler`` on its training rows and ``LogisticRegression(C)`` (L2, lbfgs, tol 1e-4) for every C of ``CS``;
the C with the most inner hits (ties: the smaller) is refitted on the whole training fold, standardised on it.
How it is computed: every fit is solved in the row space of its standardised training rows when d > m (an L2 fit
lies there, so the probe is the same in m rather than d dimensions): the QR decomposition of [train; test]' gives
z = R[:m, :m]' for the m training rows and R[:m, m:]' for the test rows projected on that basis, R alone computed.
All inner problems of a state run as one batch of :func:`~layerscope.measures.batched_logistic.fit_batched`
(scikit-learn's objective and gradient stopping rule, tol ``TOL``), C ascending, each fit warm-started at the
previous C's solution (as the scikit-learn loop before issue 45 did); the outer refits are one more batch. The
standardisation is ``StandardScaler``'s (:func:`standardiser`). A problem whose training rows lack one of three or
more classes (scikit-learn then fits the classes present) is fitted by scikit-learn itself.

Agreement, measured on SmolLM2-135M-Instruct's pair side (31 states x 5 folds, 308 rows, d = 576): against scikit-learn
solved to tol 1e-10 (the exact optimum), this code chose another C in 10 of 155 folds and predicted 26 of 9548
rows otherwise; scikit-learn at its default tolerance (the code before issue 45) did so in 10 folds and 37 rows.
Each fold where this code differs has C = 10 or 100 on one side: a large C fits separable rows, whose predictions
a tolerance of 1e-4 leaves open. ``TOL`` = 1e-6 matched the exact optimum (0 folds, 1 row) at twice the search's
time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg.lapack import dgeqrf as geqrf
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.preprocessing import StandardScaler

from .batched_logistic import fit_batched

CS = 10.0 ** np.arange(-3, 3)
"""The logistic regression's C grid, searched by the inner CV of each training fold."""
INNER_FOLDS = 3
MAX_ITER = 1000
TOL = 1e-4
"""scikit-learn's default tolerance: max |gradient| of its mean-loss objective."""


@dataclass(frozen=True)
class Split:
    """One fit: the outer ``fold`` it belongs to, its ``train`` and ``test`` row indices."""

    fold: int
    train: np.ndarray
    test: np.ndarray


@dataclass(frozen=True)
class NestedPlan:
    """The splits of a nested CV: ``outer`` (a Split per fold whose training rows hold two classes or more),
    ``inner`` (per such fold, its inner splits whose training rows do), ``constant`` ((fold, test rows, class) for
    a fold whose training rows hold one class: it predicts that class), and ``n_folds``."""

    outer: list[Split]
    inner: list[Split]
    constant: list[tuple[int, np.ndarray, int]]
    n_folds: int


def nested_plan(y: np.ndarray, g: np.ndarray, fold: np.ndarray) -> NestedPlan:
    """The outer folds of ``fold`` (n,) and, inside each training fold, ``GroupKFold(min(3, its groups))`` on its
    groups, as :func:`logreg_oof` searches C."""
    outer, inner, constant = [], [], []
    for f in range(int(fold.max()) + 1):
        train, test = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
        if len(present := np.unique(y[train])) < 2:
            constant.append((f, test, int(present[0])))
            continue
        outer.append(Split(f, train, test))
        splitter = GroupKFold(n_splits=min(INNER_FOLDS, len(np.unique(g[train]))))
        for tr, te in splitter.split(train, y[train], g[train]):
            if len(np.unique(y[train[tr]])) >= 2:
                inner.append(Split(f, train[tr], train[te]))
    return NestedPlan(outer, inner, constant, int(fold.max()) + 1)


def logreg_oof(x: np.ndarray, y: np.ndarray, plan: NestedPlan, n_classes: int, c=None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (n, d) float64, y (n,) codes -> out-of-fold predictions (n,), scores ((n,) decision values for two
    classes, else (n, K) probabilities) and the C of each fold (folds,) (CS[0] for a one-class fold). ``c``: a
    float or (folds,) to fit at instead of searching."""
    cs = np.full(plan.n_folds, CS[0])
    if c is None:
        hits = np.zeros((plan.n_folds, len(CS)))
        inner, theta = _Batch(x, y, plan.inner, n_classes), None
        for i, value in enumerate(CS):  # ascending C, each fit warm-started at the last
            pred, _, theta = inner.fit(np.full(len(plan.inner), value), theta)
            for split, p in zip(plan.inner, pred, strict=True):
                hits[split.fold, i] += np.sum(p == y[split.test])
        cs = CS[np.argmax(hits, axis=1)]  # the first maximum: the smaller C
    else:
        cs[:] = c
    pred, scores = np.empty(len(y), dtype=np.intp), np.zeros(len(y) if n_classes == 2 else (len(y), n_classes))
    for f, test, k in plan.constant:
        pred[test], cs[f] = k, CS[0]
    outer_pred, outer_scores, _ = _Batch(x, y, plan.outer, n_classes).fit(cs[[s.fold for s in plan.outer]], None)
    for split, p, sc in zip(plan.outer, outer_pred, outer_scores, strict=True):
        pred[split.test], scores[split.test] = p, sc
    return pred, scores, cs


class _Batch:
    """Splits of one state x, standardised and projected once, to fit at any C: ``fit(cs, theta0)`` -> per split
    (t,) test predictions and scores, and the batch's coefficients (to warm-start the next C)."""

    def __init__(self, x, y, splits: list[Split], n_classes: int):
        self.x, self.y, self.splits, self.n_classes = x, y, splits, n_classes
        self.batched = [i for i, s in enumerate(splits) if n_classes == 2 or len(np.unique(y[s.train])) == n_classes]
        parts = [_row_space(x, splits[i].train, splits[i].test) for i in self.batched]
        m, r = max((len(p[0]) for p in parts), default=0), max((p[0].shape[1] for p in parts), default=0)
        t = max((len(p[1]) for p in parts), default=0)
        self.Z, self.Zt = np.zeros((len(parts), m, r)), np.zeros((len(parts), t, r))
        self.Y, self.W = np.zeros((len(parts), m), dtype=np.intp), np.zeros((len(parts), m))
        for j, (i, (ztr, zte)) in enumerate(zip(self.batched, parts, strict=True)):
            self.Z[j, :len(ztr), :ztr.shape[1]], self.Zt[j, :len(zte), :zte.shape[1]] = ztr, zte
            self.Y[j, :len(ztr)], self.W[j, :len(ztr)] = y[splits[i].train], 1.0

    def fit(self, cs: np.ndarray, theta0):
        splits, n_classes = self.splits, self.n_classes
        pred: list = [None] * len(splits)
        scores: list = [None] * len(splits)
        theta = None
        if self.batched:
            theta = fit_batched(self.Z, self.Y, cs[self.batched], n_classes, weights=self.W, tol=TOL,
                                max_iter=MAX_ITER, theta0=theta0)
            eta = self.Zt @ theta[:, :-1] + theta[:, -1:]  # (P, t, k)
            for j, i in enumerate(self.batched):
                e = eta[j, :len(splits[i].test)]
                pred[i] = (e[:, 0] > 0).astype(np.intp) if n_classes == 2 else e.argmax(axis=1)
                scores[i] = e[:, 0] if n_classes == 2 else _softmax(e)
        for i in sorted(set(range(len(splits))) - set(self.batched)):  # a class of three or more missing: sklearn
            split, x, y = splits[i], self.x, self.y
            scaler = StandardScaler().fit(x[split.train])
            model = LogisticRegression(C=cs[i], tol=TOL, max_iter=MAX_ITER)
            model.fit(scaler.transform(x[split.train]), y[split.train])
            xte = scaler.transform(x[split.test])
            pred[i], scores[i] = model.predict(xte), np.zeros((len(split.test), n_classes))
            scores[i][:, model.classes_] = model.predict_proba(xte)
        return pred, scores, theta


def _row_space(x: np.ndarray, train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Standardise on the training rows (m of them); when d > m, the coordinates of both in an orthonormal basis of
    the training rows' row space: the first m rows of R in the QR decomposition of [train; test]' (Householder, the
    training rows first, so Q's first m columns span them): (m, m) z = R[:m, :m]' and (t, m) R[:m, m:]', the test
    rows projected on that basis. R alone is computed, Q never formed."""
    mean, scale = standardiser(x[train])
    xtr, xte = (x[train] - mean) / scale, (x[test] - mean) / scale
    m = len(xtr)
    if xtr.shape[1] <= m:
        return xtr, xte
    packed, _, _, info = geqrf(np.vstack([xtr, xte]).T, overwrite_a=True)  # R in the upper triangle
    if info != 0:
        raise RuntimeError(f"LAPACK geqrf failed (info {info}) on the standardised rows")
    r = np.triu(packed[:m])
    return r[:, :m].T, r[:, m:].T


def standardiser(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x (m, d) -> (d,) mean and scale as ``StandardScaler().fit(x)`` has them: the standard deviation (ddof 0,
    two-pass), 1 for a feature that cannot be told from a constant (variance <= m eps var + (m mean eps)^2, the
    error bound of the two-pass algorithm, Chan, Golub & LeVeque 1983, as scikit-learn tests it)."""
    mean = x.mean(axis=0)
    var = ((x - mean) ** 2).mean(axis=0)
    eps = np.finfo(np.float64).eps
    m = len(x)
    return mean, np.where(var <= m * eps * var + (m * mean * eps) ** 2, 1.0, np.sqrt(var))


def _softmax(eta: np.ndarray) -> np.ndarray:
    e = np.exp(eta - eta.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def logreg_fixed(x: np.ndarray, Y: np.ndarray, folds_of: np.ndarray, c: float, n_classes: int) -> np.ndarray:
    """x (n, d), label codes Y (P, n) and folds (P, n) -> (P, n) out-of-fold predictions, all at C = c, on features
    standardised over all rows (label-free) so that every label row shares them, its training rows as weights. A
    label row whose training rows hold one class predicts it."""
    u, s, _ = np.linalg.svd(StandardScaler().fit_transform(x), full_matrices=False)
    keep = s > s[0] * 1e-10  # the row space: an L2 fit lies in it, so this basis gives the same probe
    z = u[:, keep] * s[keep]
    pred = np.empty(Y.shape, dtype=np.intp)
    for f in range(folds_of.max() + 1):
        train, test = folds_of != f, folds_of == f
        low, high = np.where(train, Y, n_classes).min(axis=1), np.where(train, Y, -1).max(axis=1)
        weights = train * (low != high)[:, None].astype(np.float64)  # one class: nothing to fit
        theta = fit_batched(z, Y, c, n_classes, weights=weights)  # (P, r + 1, k)
        eta = np.einsum("nj,pjk->pnk", np.hstack([z, np.ones((len(z), 1))]), theta)
        fitted = (eta[..., 0] > 0 if n_classes == 2 else eta.argmax(axis=2))
        pred[test] = np.where((low == high)[:, None], low[:, None], fitted)[test]
    return pred


def mass_mean(x: np.ndarray, Y: np.ndarray, folds_of: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
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
