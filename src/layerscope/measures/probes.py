"""Linear probes per hidden state, with grouped cross-validation, shallow baselines and the field's controls.

    profile = probe_states(X, labels, groups, method="logreg", surface=surface_baseline(F, labels, groups),
                           units=units)                   # X (n, S, d): row i at state s (0 = embeddings)
    profile.accuracy, profile.q, profile.gain_ci, profile.decodable, profile.decodable_from, profile.selectivity
    fold = fold_ids(labels, groups, folds=5, seed=0)      # (n,) each row's fold, the same for every state
    control = control_labels(units, labels, seed=0, n_seeds=10)  # the control task's labels, (seeds, n)
    s = plateau_from(profile.accuracy, profile.accuracy, profile.accuracy_ci)

Conventions (what a report quotes):

- Folds: ``StratifiedGroupKFold(folds, shuffle=True, random_state=seed)`` when every group has one label, else
  ``GroupKFold(folds, shuffle=True, random_state=seed)`` (groups with several labels, e.g. a pair's sides A and B).
  A group's rows are never split; one set of folds serves every state, the surface baseline and the control task.
- ``logreg``: per training fold, ``StandardScaler`` fitted on the training rows, then scikit-learn's
  ``LogisticRegression`` (L2, lbfgs, tol 1e-4; multinomial for several classes) with C from ``CS`` (10^-3 .. 10^2)
  chosen by an inner ``GroupKFold`` (3 splits, fewer if fewer groups) of the training rows only: the most inner
  out-of-fold hits (ties: the smaller C), refit on the whole training fold (``fixed_c``: that C, no search). Scores:
  decision function (binary), else probabilities. Computed as :mod:`layerscope.measures.probe_fits` says (each fit in
  its training rows' row space, one L-BFGS batch per state, warm starts over C): scikit-learn's objective and
  stopping rule, so the predictions are scikit-learn's to its tolerance.
- ``mass_mean`` (Marks & Tegmark), raw space, no standardisation: two classes, w = mean(class 1) - mean(class 0) of
  the training rows, class 1 when w.x > w.(mu0 + mu1) / 2, score w.x - w.(mu0 + mu1) / 2; several classes, the
  nearest class mean (Euclidean), scores minus the distances to the class means.
- Accuracy and AUROC from the pooled out-of-fold predictions and scores: AUROC of the positive class (the second of
  the sorted classes) or the macro mean of the one-vs-rest AUROCs; ties count one half.
- Bootstrap: groups resampled with replacement, every statistic recomputed from the out-of-fold hits of the
  resampled rows (no refit): accuracy, AUROC, the surface baseline's, the control's, and the differences (gain,
  selectivity) paired, both sides on the same resample. Percentile intervals at ``ci_level``; a resample where AUROC
  is undefined (a class missing) is left out of the AUROC interval.
- Permutation p of accuracy per state: ``n_permutations`` relabellings (one label per group: the groups permuted,
  each taking another's label with its fold, so every fold keeps the real task's class counts: permuting the labels
  alone over fixed stratified folds unbalances the training folds, and a probe fitted on unbalanced folds predicts
  its test fold's minority class, anti-learning that drags the null below chance; logreg's p fell below 0.05 on 9
  of 100 pure-noise sets that way, on 5 with carried folds; several labels in a group: each group's labels
  permuted within it, in the same folds), each refitted; p = (1 + #{null >= observed})
  / (1 + n_permutations), ties counted. ``p_floor`` = 1 / (1 + n_permutations) is the smallest p possible
  (``at_floor``: p there, so q cannot go lower with these permutations). q: Benjamini-Hochberg over states.
  ``logreg`` shortcut: the null fits use one C per state (``chosen_c``, the one chosen most often over the real
  task's folds, ties the smaller), no inner search, features standardised over all rows (label-free), batched
  (:mod:`layerscope.measures.batched_logistic`); the observed accuracy in p is refitted the same way, so p tests that
  fitted probe family, not the C search.
- Shallow readers: the bag-of-tokens baseline (``surface``, :func:`surface_baseline`: the logistic probe on token
  counts and length, same folds) and the state-0 probe of the same method; ``best_surface`` is the one with the
  higher observed accuracy (ties: state 0). ``gain`` = accuracy - its accuracy, ``gain_ci`` paired.
- ``decodable[s]``: q[s] < ``level`` and gain_ci[s, 0] > 0 (state 0 never is without a surface baseline: its gain
  is 0 on every resample). ``decodable_from``: the first state s with every t >= s decodable (None when the last
  is not).
- ``plateau_from`` (the rule called decodable_from before issue 45): the smallest s with accuracy[t] >= the lower
  end of the best state's interval for all t >= s. ``plateau_ci``: the same rule on each resample's profile, with
  that profile's own maximum less the original margin; the lower and higher order statistics at ``ci_level``; None
  when nothing qualifies in more than (1 - ci_level) / 2 of the resamples.
- Control task (Hewitt & Liang 2019; :mod:`layerscope.measures.probe_controls`): ``control_seeds`` draws of a
  random class per unit (``units``), every row its unit's class, in the real task's folds; fitted by the same
  family: ``mass_mean`` exactly as the real task, ``logreg`` at each state's ``chosen_c`` on features standardised
  over all rows, batched over the seeds (the permutation null's shortcut). ``control_accuracy``: the mean over
  seeds; its interval and ``selectivity_ci`` from the per-row mean over seeds of the control hits, paired with the
  real hits. Only where units recur: ``control_recurrence`` (rows whose unit also occurs in another fold) >= 0.5,
  else (or without ``units``) ``control_possible`` is False and the control fields are NaN. Units are not groups,
  so the control's class counts differ between folds: where the real label dominates the features and a unit's rows
  mix labels, a probe can score below chance on it (anti-learning); read it against selectivity, not chance.

``seed`` fixes the folds and, through ``np.random.SeedSequence(seed).spawn(3)``, the control task (its first
stream, spawned once more per control seed), the permutations and the group resamples (``rng.integers(0, G,
(n_bootstrap, G))`` on the group codes, sorted), so both methods share them on one input. States run in
``n_jobs`` worker processes (joblib's loky) or in this one, BLAS single-threaded; the results do not depend on it.

Speed (SmolLM2-135M-Instruct's pair side, X (308, 31, 576), logreg, 5 folds, 100 permutations, 1000 resamples, a 2-core
EPYC): 27-29 s before issue 45 (a scikit-learn fit per inner split and C), 9 s now in one process (10 s with a
10-seed control task); two workers took 7 s on the otherwise idle machine but 10-15 s while another job kept a core
busy, so ``N_JOBS`` is 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from joblib import Parallel, delayed
from scipy.stats import false_discovery_control
from threadpoolctl import threadpool_limits

from .probe_controls import (  # noqa: F401  (re-exported)
    SurfaceBaseline,
    _control_codes,
    control_labels,
    control_recurrence,
    surface_baseline,
    surface_features,
)
from .probe_fits import CS, logreg_fixed, logreg_oof, mass_mean, nested_plan  # noqa: F401  (CS re-exported)
from .probe_folds import (  # noqa: F401  (re-exported)
    auroc,
    check_folds,
    check_task,
    decodable_start,
    fold_ids,
    group_codes,
    group_weights,
    interval,
    make_folds,
    plateau_from,
    plateau_interval,
    relabel,
    weighted_mean,
)
from .probe_transfer import TransferProfile, transfer_states  # noqa: F401  (re-exported)

METHODS = ("logreg", "mass_mean")
RECURRENCE = 0.5
"""The least share of rows whose unit recurs in another fold for the control task to be fitted."""
N_JOBS = 1
"""Worker processes for the states when probe_states is given no n_jobs (measured: see the module docstring)."""


@dataclass
class ProbeProfile:
    """One method over all states; arrays indexed by state 0 .. S - 1, intervals (S, 2) as (low, high).

    accuracy, accuracy_ci, auroc, auroc_ci: out-of-fold accuracy and AUROC with group-bootstrap intervals.
    p, q: permutation p of accuracy and its Benjamini-Hochberg q over states; p_floor = 1 / (n_permutations + 1),
    the smallest p possible; at_floor (S,) bool: p at that floor (more permutations could lower it, q cannot).
    chosen_c (S,): the C chosen most often over the outer folds (ties: the smaller; logreg, else NaN), the C of the
    null and control fits.
    surface_accuracy, surface_ci: the bag-of-tokens baseline (NaN without one); best_surface: "bag of tokens" or
    "state 0", the shallow reader with the higher accuracy; gain, gain_ci: accuracy less the best surface's, paired.
    decodable (S,) bool: q < level and gain_ci[:, 0] > 0; decodable_from: the first state from which every state is
    decodable (None when the last is not); decodable_ci: None (kept for old readers: the new rule reads q, which
    has no resamples; the old rule's interval is plateau_ci).
    plateau_from, plateau_ci: the old rule (accuracy stays at or above the lower end of the best state's interval)
    and its bootstrap interval (None when the resamples reach past the last state).
    control_accuracy, control_ci, selectivity, selectivity_ci: Hewitt & Liang's control task (mean over
    control_seeds) and accuracy less it; NaN unless control_possible (units given, control_recurrence >= 0.5).
    n, n_groups, classes, chance (the majority class's share of the rows), level (for decodable).
    """

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
    surface_accuracy: float
    surface_ci: np.ndarray
    best_surface: str
    gain: np.ndarray
    gain_ci: np.ndarray
    decodable: np.ndarray
    plateau_from: int | None
    plateau_ci: tuple[int, int] | None
    p_floor: float
    at_floor: np.ndarray
    chosen_c: np.ndarray
    control_recurrence: float
    control_possible: bool
    control_seeds: int
    level: float


def probe_states(X, labels, groups, *, method: str = "logreg", folds: int = 5, n_bootstrap: int = 1000,
                 n_permutations: int = 200, seed: int = 0, ci_level: float = 0.95,
                 surface: SurfaceBaseline | None = None, units=None, control_seeds: int = 10, fixed_c=None,
                 level: float = 0.05, n_jobs: int | None = None) -> ProbeProfile:
    """X (n, S, d) float (any float dtype; float64 inside, one state at a time), labels (n,) of str or int,
    groups (n,) of hashables: rows of one group are never split across folds; surface: :func:`surface_baseline`
    on the same labels, groups, folds and seed; units (n,) hashables for the control task; fixed_c (logreg): a C
    (float or (S,)) instead of the search; n_jobs: worker processes (default ``N_JOBS``) -> a :class:`ProbeProfile`."""
    if method not in METHODS:
        raise ValueError(f"unknown probe method {method!r}; use one of {', '.join(METHODS)}")
    X, y, g, classes = _check(X, labels, groups, folds, n_bootstrap, n_permutations, ci_level, level, control_seeds)
    n, n_states = X.shape[:2]
    fold = make_folds(y, g, folds, seed)
    check_folds(fold, y, classes)
    fixed = _fixed_c(fixed_c, method, n_states)
    control_ss, perm_ss, boot_ss = np.random.SeedSequence(seed).spawn(3)
    Y_null, folds_null = relabel(y, g, fold, np.random.default_rng(perm_ss), n_permutations)
    recurrence = float("nan") if units is None else _recurrence(units, fold, n)
    possible = bool(recurrence >= RECURRENCE)
    Y_control = (_control_codes(group_codes(list(units)), y, len(classes), seed, control_seeds) if possible
                 else np.empty((0, n), dtype=y.dtype))
    shared = dict(y=y, plan=nested_plan(y, g, fold) if method == "logreg" else None, fold=fold, Y_null=Y_null,
                  folds_null=folds_null, Y_control=Y_control, method=method, n_classes=len(classes))
    jobs = N_JOBS if n_jobs is None else n_jobs
    if jobs > 1 and n_states > 1:
        states = Parallel(n_jobs=min(jobs, n_states), backend="loky")(
            delayed(_state)(X[:, s], fixed[s], **shared) for s in range(n_states))
    else:
        states = [_state(X[:, s], fixed[s], **shared) for s in range(n_states)]
    correct = np.stack([st["pred"] == y for st in states])             # (S, n)
    weights = group_weights(g, n_bootstrap, np.random.default_rng(boot_ss))  # (B, n)
    acc_boot = weighted_mean(weights, correct)                           # (B, S)
    accuracy, accuracy_ci = correct.mean(axis=1), interval(acc_boot, ci_level)
    auroc_boot = np.stack([auroc(st["scores"], y, weights) for st in states], axis=1)
    p = np.array([(1 + np.sum(st["null"] >= st["observed"] - 1e-12)) / (1 + n_permutations) for st in states])
    q = false_discovery_control(p, method="bh")
    out = dict(method=method, accuracy=accuracy, accuracy_ci=accuracy_ci,
               auroc=np.array([auroc(st["scores"], y, np.ones((1, n)))[0] for st in states]),
               auroc_ci=interval(auroc_boot, ci_level), p=p, q=q, n=n, n_groups=int(g.max()) + 1, classes=classes,
               chance=float(np.bincount(y).max() / n), p_floor=1 / (n_permutations + 1),
               at_floor=p <= 1 / (n_permutations + 1) + 1e-12, chosen_c=np.array([st["c"] for st in states]),
               control_recurrence=recurrence, control_possible=possible, control_seeds=control_seeds, level=level)
    out |= _control_fields(states, weights, acc_boot, accuracy, ci_level, possible, n_states)
    out |= _surface_fields(surface, fold, weights, acc_boot, accuracy, q, ci_level, level, n)
    first = plateau_from(accuracy, accuracy, accuracy_ci)
    out |= dict(plateau_from=first, decodable_ci=None,
                plateau_ci=None if first is None else plateau_interval(acc_boot, accuracy, accuracy_ci, ci_level))
    return ProbeProfile(**out)


def _state(x, fixed, *, y, plan, fold, Y_null, folds_null, Y_control, method, n_classes) -> dict:
    """One state x (n, d) -> pred (n,), scores, c (the null's and control's C), observed (accuracy of the fit the
    null repeats), null (P,) accuracies, control (seeds, n) hits."""
    x = np.asarray(x, dtype=np.float64)
    seeds = len(Y_control)
    Y = np.vstack([y[None], Y_null, Y_control])
    folds_of = np.vstack([fold[None], folds_null, np.broadcast_to(fold, Y_control.shape)])
    with threadpool_limits(limits=1):
        if method == "mass_mean":
            pred, scores = mass_mean(x, Y, folds_of, n_classes)
            c, observed, fitted = float("nan"), pred[0], pred
            pred, scores = pred[0], scores[0]
        else:
            pred, scores, cs = logreg_oof(x, y, plan, n_classes, c=fixed)
            values, counts = np.unique(cs, return_counts=True)
            c = float(values[np.argmax(counts)])
            fitted = logreg_fixed(x, Y, folds_of, c, n_classes)
            observed = fitted[0]
    null_hits = fitted[1:len(Y) - seeds] == Y_null
    return dict(pred=pred, scores=scores, c=c, observed=np.mean(observed == y), null=null_hits.mean(axis=1),
                control=fitted[len(Y) - seeds:] == Y_control)


def _control_fields(states, weights, acc_boot, accuracy, ci_level, possible, n_states) -> dict:
    if not possible:
        nan, nan_ci = np.full(n_states, np.nan), np.full((n_states, 2), np.nan)
        return dict(control_accuracy=nan, control_ci=nan_ci, selectivity=nan.copy(), selectivity_ci=nan_ci.copy())
    hits = np.stack([st["control"].sum(axis=0) for st in states])   # (S, n) per-row control hits over the seeds
    seeds = len(states[0]["control"])
    control_boot = weighted_mean(weights, hits) / seeds              # integer sums, so duplicates change nothing
    control_accuracy = hits.mean(axis=1) / seeds
    return dict(control_accuracy=control_accuracy, control_ci=interval(control_boot, ci_level),
                selectivity=accuracy - control_accuracy, selectivity_ci=interval(acc_boot - control_boot, ci_level))


def _surface_fields(surface, fold, weights, acc_boot, accuracy, q, ci_level, level, n) -> dict:
    if surface is None:
        surface_accuracy, surface_ci, best, surface_boot = float("nan"), np.full(2, np.nan), "state 0", None
    else:
        if len(surface.correct) != n or not np.array_equal(surface.fold, fold):
            raise ValueError("the surface baseline was fitted on other rows or folds; call surface_baseline(F, "
                             "labels, groups, folds=..., seed=...) with probe_states' labels, groups, folds and seed")
        surface_boot = weighted_mean(weights, np.asarray(surface.correct, dtype=np.float64)[None])[:, 0]
        surface_accuracy, surface_ci = float(surface.accuracy), interval(surface_boot[:, None], ci_level)[0]
        best = "bag of tokens" if surface_accuracy > accuracy[0] else "state 0"
    best_boot = surface_boot if best == "bag of tokens" else acc_boot[:, 0]
    gain = accuracy - (surface_accuracy if best == "bag of tokens" else accuracy[0])
    gain_ci = interval(acc_boot - best_boot[:, None], ci_level)
    decodable = (q < level) & (gain_ci[:, 0] > 0)
    return dict(surface_accuracy=surface_accuracy, surface_ci=surface_ci, best_surface=best, gain=gain,
                gain_ci=gain_ci, decodable=decodable, decodable_from=decodable_start(decodable))


def _fixed_c(fixed_c, method, n_states) -> list:
    if fixed_c is None:
        return [None] * n_states
    if method != "logreg":
        raise ValueError(f"fixed_c={fixed_c!r} with method={method!r}: only the logistic probe has a C; drop fixed_c")
    c = np.broadcast_to(np.asarray(fixed_c, dtype=np.float64), (n_states,))
    if not np.all(c > 0):
        raise ValueError(f"fixed_c={fixed_c!r}: give one positive C, or one per state ({n_states})")
    return [float(v) for v in c]


def _recurrence(units, fold, n) -> float:
    if len(units) != n:
        raise ValueError(f"units has {len(units)} entries for {n} rows; give one unit per row of X (e.g. the first "
                         "token that differs within a pair, or a template id)")
    return control_recurrence(units, fold)


def _check(X, labels, groups, folds, n_bootstrap, n_permutations, ci_level, level, control_seeds):
    X = np.asarray(X)
    if X.ndim != 3 or X.dtype.kind not in "fiu":
        raise ValueError(f"X is a {X.ndim}-D {X.dtype} array of shape {X.shape}; probes need a 3-D float array "
                         "(n rows, S states, d features), e.g. np.stack(per_state_vectors, axis=1)")
    if not np.isfinite(X).all():
        row, state = np.argwhere(~np.isfinite(X))[0][:2]
        raise ValueError(f"X holds NaN or inf (first at row {row}, state {state}); probes need finite states, so "
                         "extract in float32 and check the model's weights, or drop those rows")
    if (int(folds) != folds or folds < 2 or n_bootstrap < 1 or n_permutations < 1 or not 0 < ci_level < 1
            or not 0 < level < 1 or control_seeds < 1):
        raise ValueError(f"folds={folds}, n_bootstrap={n_bootstrap}, n_permutations={n_permutations}, "
                         f"ci_level={ci_level}, level={level}, control_seeds={control_seeds}: use folds >= 2, "
                         "n_bootstrap, n_permutations and control_seeds >= 1, 0 < ci_level < 1, 0 < level < 1")
    y, g, classes = check_task(labels, groups, folds, len(X))
    return X, y, g, classes
