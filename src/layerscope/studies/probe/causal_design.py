"""What the causal tests remove and push, per contrast and state: the held-out split, the directions and their nulls.

    split = split_contrast(task, holdout=0.5, max_units=0, seed=0)    # training and held-out rows, units, classes
    dirs = state_directions(X[:, s], split, c=1.0, nulls=null_signs(split, 6, seed))   # one state's directions
    dirs.u, dirs.w, dirs.nulls, dirs.target_a, dirs.target_b, dirs.norm

Conventions (the report writes them out):

- Units: a pair (its two texts), or a group of a labels file, category or languages set with two classes. Class A
  is the first sorted class (the side's A). A seeded share ``holdout`` of each contrast's units is held out (at most
  ``max_units``, 0: no cap), stratified by the classes a unit holds so that both classes are held out and fitted
  (:func:`split_groups`); the directions are fitted on the training units only, and every test is measured on the
  held-out ones. ``holdout`` 0: fitted and measured on every unit (in-sample, for checking by hand).
- v_s = the mean of the training rows of class A minus that of class B at state s (pairs: the mean of h_A - h_B),
  u = v_s / |v_s| (the mass-mean direction, Marks & Tegmark 2023). The logistic direction: the weights of an L2
  logistic regression (standardised features, C the probe's choice at s) fitted on the training rows, mapped back
  to the residual space (w / sd), unit length, signed towards A.
- Null directions: the same mass-mean computed after a random relabelling of the training units: a pair's (a
  two-class group's) sides swapped with probability 1/2 (the mean of the pair differences with random signs), the
  one-class groups' labels permuted among them, then the component along u taken out (a relabelled mean keeps a
  share of u when the pairs differ consistently, and a null that holds the direction tested cannot tell it apart).
  They are drawn from the residual stream's own distribution, with its scale and anisotropy; one set of
  relabellings serves every state.
- Interchange targets: the mean over the training rows of class B of h.u (set on a held-out class-A text), and of
  class A (on a class-B text).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from .causal_stats import unit_codes
from .labels import LabelTask


@dataclass(frozen=True)
class Split:
    """One contrast's units and rows: ``train`` and ``test`` index the task's rows."""

    name: str
    is_a: np.ndarray
    """(n,) bool over the task's rows: class A."""
    unit: np.ndarray
    """(n,) int: each row's unit 0..U-1."""
    train: np.ndarray
    test: np.ndarray
    classes: tuple[str, str]
    in_sample: bool

    @property
    def n_train_units(self) -> int:
        return len(np.unique(self.unit[self.train]))

    @property
    def n_test_units(self) -> int:
        return len(np.unique(self.unit[self.test]))


@dataclass(frozen=True)
class Directions:
    """One state's directions for one contrast, (d,) float64 unit vectors unless said."""

    u: np.ndarray
    """The mass-mean direction v / |v|."""
    w: np.ndarray
    """The logistic direction."""
    nulls: np.ndarray
    """(K, d) null directions."""
    norm: float
    """|v|."""
    target_a: float
    """Mean h.u over the training class-A rows (set on held-out class-B texts by the interchange)."""
    target_b: float
    variance_share: float
    """Var(h.u) over the training rows / their total variance: the share of the variance u takes out."""
    null_variance_share: float
    """The same for the null directions, averaged."""


def contrast_classes(labels) -> tuple[str, str]:
    """(class A, class B) of a two-class label: the sorted classes; ``ValueError`` for any other number."""
    classes = tuple(sorted({str(c) for c in np.asarray(labels).tolist()}))
    if len(classes) != 2:
        raise ValueError(f"a causal test needs a label with exactly two classes, got {len(classes)}: "
                         f"{', '.join(classes[:5])}")
    return classes[0], classes[1]


def split_groups(holds: np.ndarray, holdout: float, max_groups: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training groups, held-out groups), each sorted, from ``holds`` (G, 2) bool: whether group g holds a row of
    class A, of class B. ``holdout`` 0: every group in both (in-sample). Otherwise n_test = min(cap, max(2,
    round(holdout * G)), G - 2) groups are held out (cap: ``max_groups``, 0 for none), stratified by the classes a
    group holds: one seeded permutation orders the groups, and each stratum gives its first q groups in that order,
    the quotas q the nearest (in summed distance) to the proportional shares that leave both classes among the
    held-out and among the training groups. Pairs (every group holds both): the permutation's first n_test."""
    n = len(holds)
    if holdout == 0:
        every = np.arange(n)
        return every, every
    order = np.random.default_rng(seed).permutation(n)
    n_test = int(min(max_groups or n, max(2, round(holdout * n)), n - 2))
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
        raise ValueError("a causal test holds out groups of both classes and fits on groups of both: each class "
                         "needs two groups or more (or use --steer-holdout 0, in-sample)")
    share = n_test * sizes / sizes.sum()
    return fine[int(np.argmin(np.abs(fine - share).sum(axis=1)))]


def split_contrast(task: LabelTask, holdout: float, max_units: int, seed: int) -> Split:
    """The held-out split of one two-class task (see the module docstring)."""
    labels = np.array([str(c) for c in task.labels.tolist()])
    classes = contrast_classes(labels)
    is_a, unit = labels == classes[0], unit_codes(task.groups)
    holds = np.zeros((int(unit.max()) + 1, 2), dtype=bool)
    holds[unit[is_a], 0] = holds[unit[~is_a], 1] = True
    train_units, test_units = split_groups(holds, holdout, max_units, seed)
    return Split(task.name, is_a, unit, np.flatnonzero(np.isin(unit, train_units)),
                 np.flatnonzero(np.isin(unit, test_units)), classes, holdout == 0)


def null_labels(split: Split, k: int, seed: int) -> np.ndarray:
    """(k, n_train) bool: class A after k random relabellings of the training units (see the module docstring)."""
    rng = np.random.default_rng(seed)
    is_a, unit = split.is_a[split.train], split.unit[split.train]
    units = np.unique(unit)
    both = np.array([is_a[unit == g].any() and (~is_a[unit == g]).any() for g in units])
    out = np.repeat(is_a[None], k, axis=0)
    for row in out:
        flip = units[both][rng.random(both.sum()) < 0.5]
        swap = np.isin(unit, flip)
        row[swap] = ~row[swap]
        single = units[~both]
        if len(single) > 1:
            label = {g: bool(is_a[unit == g][0]) for g in single}
            moved = dict(zip(single, rng.permutation([label[g] for g in single]), strict=True))
            rows = np.isin(unit, single)
            row[rows] = [moved[g] for g in unit[rows]]
    return out


def mass_mean(x: np.ndarray, is_a: np.ndarray) -> np.ndarray:
    """(d,) mean of the class-A rows of x (m, d) minus that of the class-B rows."""
    return x[is_a].mean(axis=0) - x[~is_a].mean(axis=0)


def unit_vector(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v)
    return v / n if n > 0 else np.zeros_like(v)


def orthogonal(v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """v without its component along the unit vector u; exactly 0 when what is left is rounding (|v| x 1e-9)."""
    rest = v - (v @ u) * u
    return rest if np.linalg.norm(rest) > 1e-9 * np.linalg.norm(v) else np.zeros_like(v)


def logistic_direction(x: np.ndarray, is_a: np.ndarray, c: float) -> np.ndarray:
    """(d,) unit: the L2 logistic regression's weights on standardised x (m, d), in the residual space, towards A."""
    scaler = StandardScaler().fit(x)
    model = LogisticRegression(C=float(c), max_iter=1000).fit(scaler.transform(x), (~is_a).astype(int))
    scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    return unit_vector(-model.coef_[0] / scale)


def variance_share(x: np.ndarray, u: np.ndarray) -> float:
    """Var(x.u) / total variance of x (m, d)."""
    centred = x - x.mean(axis=0)
    total = float((centred**2).sum())
    return float(((centred @ u) ** 2).sum() / total) if total > 0 else float("nan")


def state_directions(x: np.ndarray, split: Split, c: float, nulls: np.ndarray) -> Directions:
    """One state's directions: ``x`` (n, d) the task's pooled rows at that state, ``nulls`` (K, n_train) the
    relabellings of :func:`null_labels`, ``c`` the logistic regression's C."""
    xt = np.asarray(x[split.train], dtype=np.float64)
    is_a = split.is_a[split.train]
    v = mass_mean(xt, is_a)
    u = unit_vector(v)
    null_dirs = np.stack([unit_vector(orthogonal(mass_mean(xt, row), u)) for row in nulls])
    proj = xt @ u
    return Directions(u=u, w=logistic_direction(xt, is_a, c), nulls=null_dirs, norm=float(np.linalg.norm(v)),
                      target_a=float(proj[is_a].mean()), target_b=float(proj[~is_a].mean()),
                      variance_share=variance_share(xt, u),
                      null_variance_share=float(np.mean([variance_share(xt, n) for n in null_dirs])))


def leace_eraser(x: np.ndarray, split: Split) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(left (d,), right (d,), mean (d,)): the rank-1 LEACE eraser of the class from the training rows of ``x``
    (n, d), h - left * (right . (h - mean)), fitted by the concept-erasure package (Belrose et al. 2023)."""
    import torch
    from concept_erasure import LeaceFitter

    xt = torch.as_tensor(np.asarray(x[split.train], dtype=np.float64))
    z = torch.as_tensor(split.is_a[split.train].astype(np.float64))[:, None]
    eraser = LeaceFitter.fit(xt, z, dtype=torch.float64).eraser
    left, right = eraser.proj_left.numpy(), eraser.proj_right.numpy()
    mean = eraser.bias.numpy() if eraser.bias is not None else np.zeros(x.shape[1])
    if left.shape[1] == 0:
        return np.zeros(x.shape[1]), np.zeros(x.shape[1]), mean
    return left[:, 0], right[0], mean
