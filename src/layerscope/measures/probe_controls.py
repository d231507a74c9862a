"""The probes' shallow readers and control task: a bag-of-tokens baseline and Hewitt & Liang's control labels.

    F = surface_features(token_ids)                      # (n, V + 1): counts of each token type, then the length
    surface = surface_baseline(F, labels, groups, folds=5, seed=0)   # the logistic probe's procedure on F
    surface.correct, surface.accuracy, surface.c         # (n,) out-of-fold hits, their mean, (folds,) C per fold
    control = control_labels(units, labels, seed=0, n_seeds=10)      # (10, n) control labels, keyed to units
    share = control_recurrence(units, fold)              # rows whose unit also occurs in another fold

Surface baseline: a state whose probe does not beat a probe on F shows nothing the tokens did not already carry;
:func:`~layerscope.measures.probes.probe_states` takes it (``surface=``) and calls a state decodable only where its
accuracy beats the better of this baseline and the state-0 probe (gain interval above 0).

Control task (Hewitt & Liang 2019, "Designing and interpreting probes with control tasks"): every distinct unit
(a word type in their paper; here what recurs across texts, e.g. the first token that differs within a pair, or a
template id) gets a random class drawn with the task's class proportions over units (each unit counted once, with
its rows' label shares), and every row takes its unit's class. Such labels carry no linguistic property, only the
identity of the unit, so a probe can learn them only by memorising units it saw in training: the control
accuracy measures that capacity, and selectivity (accuracy - control accuracy) what the probe reads beyond it. A
unit that occurs in one fold only cannot be memorised, hence ``control_recurrence``. Seeds: control seed k draws
from ``np.random.SeedSequence(seed).spawn(3)[0].spawn(n_seeds)[k]`` (the first of probe_states' three streams),
units in sorted order (first appearance when they do not sort).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from .probe_fits import logreg_oof, nested_plan
from .probe_folds import check_folds, check_task, group_codes, make_folds


@dataclass
class SurfaceBaseline:
    """The logistic probe on surface features: ``correct`` (n,) bool out-of-fold hits, ``accuracy`` their mean,
    ``c`` (folds,) the C chosen in each fold, ``fold`` (n,) the folds it used (probe_states checks they are its)."""

    correct: np.ndarray
    accuracy: float
    c: np.ndarray
    fold: np.ndarray


def surface_features(token_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """token_ids: per text its token ids -> (n, V + 1) float64: the count of each of the V token types that occur
    (in increasing id order), then the text's token count."""
    texts = [np.asarray(ids, dtype=np.int64).ravel() for ids in token_ids]
    if not texts:
        raise ValueError("no texts: give one sequence of token ids per text")
    types, inverse = np.unique(np.concatenate(texts), return_inverse=True)
    row = np.repeat(np.arange(len(texts)), [len(t) for t in texts])
    F = np.zeros((len(texts), len(types) + 1))
    np.add.at(F, (row, inverse.ravel()), 1.0)
    F[:, -1] = [len(t) for t in texts]
    return F


def surface_baseline(F, labels, groups, *, folds: int = 5, seed: int = 0) -> SurfaceBaseline:
    """F (n, f) surface features (e.g. :func:`surface_features`), labels and groups as probe_states takes them ->
    the logistic probe's out-of-fold hits on F: the same folds as probe_states for these labels, groups, folds and
    seed, features standardised per training fold, the same nested C search."""
    F = np.asarray(F, dtype=np.float64)
    if F.ndim != 2 or not np.isfinite(F).all():
        raise ValueError(f"F is a {F.ndim}-D array of shape {F.shape}; the surface baseline needs finite (n rows, f "
                         "features), e.g. surface_features(token_ids)")
    y, g, classes = check_task(labels, groups, folds, len(F))
    fold = make_folds(y, g, folds, seed)
    check_folds(fold, y, classes)
    with threadpool_limits(limits=1):
        pred, _, cs = logreg_oof(F, y, nested_plan(y, g, fold), len(classes))
    correct = pred == y
    return SurfaceBaseline(correct=correct, accuracy=float(correct.mean()), c=cs, fold=fold)


def control_labels(units, labels, seed: int = 0, n_seeds: int = 10) -> np.ndarray:
    """units (n,) hashables, labels (n,) -> (n_seeds, n) control labels (values of ``labels``): per seed, each
    distinct unit's class drawn with the task's class proportions over units, each row its unit's class."""
    values, y = np.unique(np.asarray(labels), return_inverse=True)
    return values[_control_codes(group_codes(list(units)), y.ravel(), len(values), seed, n_seeds)]


def _control_codes(u: np.ndarray, y: np.ndarray, n_classes: int, seed: int, n_seeds: int) -> np.ndarray:
    """Unit codes u (n,), label codes y (n,) -> (n_seeds, n) control label codes."""
    n_units = int(u.max()) + 1
    shares = np.zeros((n_units, n_classes))
    np.add.at(shares, (u, y), 1.0)
    proportions = (shares / shares.sum(axis=1, keepdims=True)).mean(axis=0)
    streams = np.random.SeedSequence(seed).spawn(3)[0].spawn(n_seeds)
    drawn = np.stack([np.random.default_rng(s).choice(n_classes, size=n_units, p=proportions) for s in streams])
    return drawn[:, u]


def control_recurrence(units, fold) -> float:
    """The share of rows whose unit also occurs in another fold (fold (n,) as fold_ids gives)."""
    u, fold = group_codes(list(units)), np.asarray(fold)
    n_folds = int(fold.max()) + 1
    present = np.zeros((int(u.max()) + 1, n_folds), dtype=bool)
    present[u, fold] = True
    return float(np.mean(present.sum(axis=1)[u] > 1))  # its unit is in its own fold and another
