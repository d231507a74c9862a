"""Where pushing the residual stream along a contrast moves the output: the steering half of the probe study.

    out = steer_states(lm, X, texts, labels, groups, options)   # X (n, S, d); labels (n,) of exactly two classes
    out["effect"][s], out["ci_lo"][s], out["band_lo"][s], out["p"][s], out["q"][s], out["effect_neg"][s]

Conventions (the report writes them out):

- Any label with exactly two classes: a pair dataset's side (texts A0, B0, A1, B1, ..., a pair one group), a
  category or languages set with two classes, a labels file with two. Class A is the first of the sorted classes
  (the side's "A"), class B the other.
- The direction at state s is v_s = the mean over the training groups' class-A rows of h minus the mean over their
  class-B rows (for pairs: the mean over the training pairs of h_A - h_B), h the pooled vector the probes read
  (``mean``: a leading BOS left out); state s is the stream entering block s (0: the embeddings' output, L: the
  last block's output, before the final norm).
- alpha * v_s is added at every position of state s of the held-out groups' texts; the preference is the mean NLL
  over the held-out class-B texts minus that over the class-A texts, each text's NLL the mean per scored token (for
  pairs: the mean over pairs of NLL(B) - NLL(A)); the effect is preference(steered) - preference(intact), with a
  percentile bootstrap interval that resamples held-out groups (both means recomputed per resample; a resample
  without one of the classes is left out). Pushing along A - B should make A likelier, so a direction the model
  uses gives a positive effect and -alpha a negative one.
- Control: ``n_random`` directions per state, Gaussian, each scaled to the norm of v_s (seeded); the null band is
  their effects' central ``ci_level`` interval. p asks whether the effect could be one more random direction's: a
  prediction t-test against their effects (:func:`prediction_p`), BH over the states steered. The rank p,
  (1 + #{|random| >= |effect|}) / (1 + n_random), is kept beside it (``p_rank``): with 20 directions it cannot go
  below 1/21, too coarse to survive BH over a dozen states. The random band and p are for the first alpha.
- States: 0, ``every``, 2 * ``every``, ... and L (``--steer-every``; 1: every state).
- Held-out groups (pairs, for a pair dataset): a seeded share ``holdout`` of the groups, at most ``max_pairs``,
  stratified by the classes a group holds so that both classes are among the held-out and the training rows
  (:func:`split_groups`); ``holdout`` 0 fits and measures on every group (in-sample: marked so in the table's
  ``split`` column and the report).
- ``prefix_reuse``: a pass steered at s starts at block s from the intact stream (:mod:`layerscope.engine.steering`);
  off, every pass is whole (the same numbers, for checking). The wall time of the steering is added to
  ``timings["steering_s"]`` when ``timings`` is given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from ...engine.steering import Steering
from ...progress import steps
from ...stats import bh_qvalues, percentile_ci, resample_indices


@dataclass(frozen=True)
class SteerOptions:
    alphas: tuple[float, ...]
    n_random: int
    holdout: float
    max_pairs: int
    """At most this many held-out groups (pairs, for a pair dataset)."""
    n_bootstrap: int
    ci_level: float
    seed: int
    every: int = 1
    """Steer at states 0, every, 2 * every, ... and always at the last state L."""
    batch_size: int | None = None
    max_length: int | None = None
    prefix_reuse: bool = True
    """Start each steered pass at the state steered, from the intact stream kept there (False: whole passes)."""
    timings: dict[str, float] | None = field(default=None, compare=False, repr=False)
    """Where the steering's wall time is added up (``steering_s``), e.g. a study's manifest timings."""


def contrast_classes(labels) -> tuple[str, str]:
    """(class A, class B) of a two-class label: the sorted classes; ``ValueError`` for any other number."""
    classes = tuple(sorted({str(c) for c in np.asarray(labels).tolist()}))
    if len(classes) != 2:
        raise ValueError(f"steering needs a label with exactly two classes, got {len(classes)}: "
                         f"{', '.join(classes[:5])}")
    return classes[0], classes[1]


def group_codes(groups) -> np.ndarray:
    """(n,) int: each row's group, numbered in order of first appearance (pair i of a pair dataset is group i)."""
    names = [str(g) for g in np.asarray(groups).tolist()]
    number = {g: i for i, g in enumerate(dict.fromkeys(names))}
    return np.array([number[g] for g in names], dtype=np.int64)


def split_groups(holds: np.ndarray, holdout: float, max_groups: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training groups, held-out groups), each sorted, from ``holds`` (G, 2) bool: whether group g holds a row of
    class A, of class B. ``holdout`` 0: every group in both (in-sample). Otherwise n_test = min(max_groups,
    max(2, round(holdout * G)), G - 2) groups are held out, stratified by the classes a group holds: one seeded
    permutation orders the groups, and each stratum gives its first q groups in that order, the quotas q the
    nearest (in summed distance) to the proportional shares that leave both classes among the held-out and among
    the training groups. Pairs (every group holds both): the permutation's first n_test groups."""
    n = len(holds)
    if holdout == 0:
        every = np.arange(n)
        return every, every
    order = np.random.default_rng(seed).permutation(n)
    n_test = int(min(max_groups, max(2, round(holdout * n)), n - 2))
    kinds = holds[order]
    keys = sorted({tuple(bool(x) for x in k) for k in kinds}, reverse=True)
    members = [order[(kinds == np.array(key)).all(axis=1)] for key in keys]
    quota = stratum_quota(np.array([len(m) for m in members]), np.array(keys), n_test)
    test = np.concatenate([m[:q] for m, q in zip(members, quota, strict=True)])
    return np.setdiff1d(np.arange(n), test), np.sort(test)


def stratum_quota(sizes: np.ndarray, holds: np.ndarray, n_test: int) -> np.ndarray:
    """(m,) held-out groups per stratum (sizes (m,), holds (m, 2) bool): summing to n_test, both classes on both
    sides, nearest to n_test * sizes / sum(sizes) (ties: the first in lexicographic order)."""
    if len(sizes) == 1:
        candidates = np.array([[n_test]])
    else:
        grids = np.meshgrid(*[np.arange(min(s, n_test) + 1) for s in sizes[:-1]], indexing="ij")
        head = np.stack([g.ravel() for g in grids], axis=1)
        candidates = np.concatenate([head, n_test - head.sum(axis=1, keepdims=True)], axis=1)
    candidates = candidates[(candidates[:, -1] >= 0) & (candidates[:, -1] <= sizes[-1])]
    on_test = ((candidates > 0).astype(int) @ holds.astype(int)) > 0
    on_train = (((sizes - candidates) > 0).astype(int) @ holds.astype(int)) > 0
    fine = candidates[on_test.all(axis=1) & on_train.all(axis=1)]
    if not len(fine):
        raise ValueError("steering holds out groups of both classes and fits on groups of both: each class needs "
                         "two groups or more (or use --steer-holdout 0, in-sample)")
    share = n_test * sizes / sizes.sum()
    return fine[int(np.argmin(np.abs(fine - share).sum(axis=1)))]


def directions(X: np.ndarray, is_a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(S, d) float64: per state, the mean of the class-A rows among ``rows`` of X minus that of the class-B ones."""
    a, b = X[rows[is_a[rows]]].astype(np.float64), X[rows[~is_a[rows]]].astype(np.float64)
    return a.mean(axis=0) - b.mean(axis=0)


def random_like(v: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, d) Gaussian directions, each with the norm of ``v``."""
    r = rng.standard_normal((n, v.shape[-1]))
    return r * (np.linalg.norm(v) / np.linalg.norm(r, axis=1, keepdims=True))


def effect_of(delta: np.ndarray, is_a: np.ndarray) -> np.ndarray:
    """(...,) preference(steered) - preference(intact) from ``delta`` (..., n) = steered - intact mean NLL per text:
    the mean of the class-B texts' delta less that of the class-A texts'."""
    return delta[..., ~is_a].mean(axis=-1) - delta[..., is_a].mean(axis=-1)


def boot_ci(delta: np.ndarray, is_a: np.ndarray, group: np.ndarray, n_bootstrap: int, level: float,
            rng: np.random.Generator) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`effect_of` ``delta`` (n,), resampling the groups (``group`` (n,):
    0..G-1) with replacement: each resample weighs a text by its group's count, both class means recomputed; a
    resample without one of the classes is left out. Pairs: the interval of the mean over resampled pairs."""
    n_groups = int(group.max()) + 1
    idx = resample_indices(n_groups, n_bootstrap, rng)                       # (R, G)
    counts = np.zeros((n_bootstrap, n_groups))
    np.add.at(counts, (np.arange(n_bootstrap)[:, None], idx), 1.0)
    w = counts[:, group]                                                     # (R, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        b = (w[:, ~is_a] @ delta[~is_a]) / w[:, ~is_a].sum(axis=1) - (w[:, is_a] @ delta[is_a]) / w[:, is_a].sum(axis=1)
    return percentile_ci(b[np.isfinite(b)], level)


def prediction_p(effect: float, null: np.ndarray) -> float:
    """Two-sided p that ``effect`` comes from the distribution the random directions' effects ``null`` (n,) are a
    sample of: a prediction t-test, t = (effect - mean) / (sd * sqrt(1 + 1/n)) on n - 1 degrees of freedom."""
    n, sd = len(null), float(np.std(null, ddof=1))
    if sd == 0:
        return 1.0 if effect == null[0] else 0.0
    t = (effect - float(np.mean(null))) / (sd * np.sqrt(1 + 1 / n))
    return float(2 * stats.t.sf(abs(t), n - 1))


def steer_states(lm, X: np.ndarray, texts: list[str], labels, groups, options: SteerOptions) -> dict:
    """Steering at every state along a two-class label's contrast (class A minus class B): see the module
    docstring. X (n, S, d) the texts' pooled states; labels and groups (n,)."""
    start = time.perf_counter()
    n_states = X.shape[1]
    labels = np.array([str(c) for c in np.asarray(labels).tolist()])
    classes = contrast_classes(labels)
    is_a, group = labels == classes[0], group_codes(groups)
    n_groups = int(group.max()) + 1
    holds = np.zeros((n_groups, 2), dtype=bool)
    holds[group[is_a], 0] = holds[group[~is_a], 1] = True
    train, test = split_groups(holds, options.holdout, options.max_pairs, options.seed)
    v = directions(X, is_a, np.flatnonzero(np.isin(group, train)))
    rows = np.flatnonzero(np.isin(group, test))                              # held-out texts, in file order
    test_a, test_group = is_a[rows], np.searchsorted(test, group[rows])      # held-out groups as 0..n_test-1
    steering = Steering(lm, [texts[i] for i in rows], batch_size=options.batch_size, max_length=options.max_length)
    intact = steering.intact()
    rng = np.random.default_rng(options.seed + 1)
    alphas = tuple(options.alphas)
    out = {k: np.full((n_states, len(alphas)), np.nan) for k in ("effect", "ci_lo", "ci_hi", "effect_neg")}
    out.update({k: np.full(n_states, np.nan) for k in ("band_lo", "band_hi", "p", "p_rank")})
    out["norm"] = np.linalg.norm(v, axis=1)
    chosen = sorted({*range(0, n_states, options.every), n_states - 1})
    reuse = {"prefix_reuse": options.prefix_reuse}
    for s in steps(chosen, "probe: steering per state", "state"):
        signed = (*alphas, *(-a for a in alphas))
        delta = steering.steered(s, v[s][None], alphas=signed, **reuse)[0] - intact   # (2 * n_alphas, n_texts)
        effects = effect_of(delta, test_a)                                            # (2 * n_alphas,)
        for j in range(len(alphas)):
            out["effect"][s, j] = effects[j]
            out["ci_lo"][s, j], out["ci_hi"][s, j] = boot_ci(delta[j], test_a, test_group, options.n_bootstrap,
                                                             options.ci_level, rng)
            out["effect_neg"][s, j] = effects[len(alphas) + j]
        random = steering.steered(s, random_like(v[s], options.n_random, rng), alphas=alphas[:1], **reuse)
        null = effect_of(random[:, 0] - intact, test_a)                               # (n_random,)
        out["band_lo"][s], out["band_hi"][s] = percentile_ci(null, options.ci_level)
        out["p"][s] = prediction_p(out["effect"][s, 0], null)
        out["p_rank"][s] = (1 + np.sum(np.abs(null) >= abs(out["effect"][s, 0]))) / (1 + len(null))
        steering.drop(s)
    out["q"] = bh_qvalues(out["p"])  # NaN (not steered) stays NaN: BH over the states steered
    out.update(alphas=alphas, n_test=len(test), n_train=len(train), in_sample=options.holdout == 0, states=chosen,
               classes=classes, blocks_run=getattr(steering, "blocks_run", None))
    if options.timings is not None:
        options.timings["steering_s"] = round(options.timings.get("steering_s", 0.0) + time.perf_counter() - start, 3)
    return out
