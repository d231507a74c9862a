"""Does a probe transfer across domains? Leave one domain out (Marks & Tegmark 2023's generalisation test).

    tp = transfer_states(X, labels, groups, domains, method="logreg")   # X (n, S, d), domains (n,) e.g. categories
    tp.domains (D,), tp.accuracy (D, S), tp.ci (D, S, 2), tp.n (D,), tp.mean (S,), tp.c (D, S)

For each domain: the probe is fitted on every row of the other domains and predicts the held-out domain's rows.
``logreg``: ``StandardScaler`` on those training rows, ``LogisticRegression`` (L2, lbfgs, tol 1e-4) at ``c[s]``
(``c`` (S,) given) or, by default, at the C of the nested search that :func:`~layerscope.measures.probes.probe_states`
runs, inside those training rows (inner ``GroupKFold`` over their groups); computed as
:mod:`layerscope.measures.probe_fits` computes the probes. ``mass_mean``: the training rows' class means, as the
probes. A domain whose label is flipped relative to the others scores below chance: the direction did not
generalise. Interval: percentile bootstrap over the held-out domain's groups (no refit), domain k resampled from
``np.random.SeedSequence(seed).spawn(D)[k]``. ``mean``: the unweighted mean of the domains' accuracies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from .probe_fits import logreg_oof, mass_mean, nested_plan
from .probe_folds import codes, group_codes, group_weights, interval, weighted_mean

METHODS = ("logreg", "mass_mean")


@dataclass
class TransferProfile:
    """Leave-one-domain-out accuracy: ``domains`` (D,) names (sorted), ``accuracy`` (D, S) on each held-out domain,
    ``ci`` (D, S, 2) its group-bootstrap interval, ``n`` (D,) its rows, ``mean`` (S,) over domains, ``c`` (D, S)
    the C each fit used (NaN for mass_mean), ``classes``, ``method``."""

    method: str
    domains: np.ndarray
    accuracy: np.ndarray
    ci: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    c: np.ndarray
    classes: tuple[str, ...]


def transfer_states(X, labels, groups, domains, *, method: str = "logreg", c=None, n_bootstrap: int = 1000,
                    seed: int = 0, ci_level: float = 0.95) -> TransferProfile:
    """X (n, S, d), labels (n,), groups (n,) (each within one domain), domains (n,) -> a
    :class:`TransferProfile`; ``c`` (S,) (logreg) fits at those C instead of the nested search."""
    X = np.asarray(X)
    if method not in METHODS:
        raise ValueError(f"unknown probe method {method!r}; use one of {', '.join(METHODS)}")
    if X.ndim != 3 or not np.isfinite(X).all():
        raise ValueError(f"X is a {X.ndim}-D array of shape {X.shape}; transfer needs a finite (n rows, S states, d "
                         "features) array, e.g. np.stack(per_state_vectors, axis=1)")
    n, n_states = X.shape[:2]
    if not len(labels) == len(groups) == len(domains) == n:
        raise ValueError(f"X has {n} rows, labels {len(labels)}, groups {len(groups)} and domains {len(domains)}; "
                         "give one of each per row of X")
    if not 0 < ci_level < 1 or n_bootstrap < 1:
        raise ValueError(f"ci_level={ci_level}, n_bootstrap={n_bootstrap}: use 0 < ci_level < 1, n_bootstrap >= 1")
    y, classes = codes(labels)
    g = group_codes(list(groups))
    names, dom = np.unique(np.asarray(domains), return_inverse=True)
    dom = dom.ravel()
    _check_domains(y, g, dom, names, classes)
    cs = _per_state_c(c, method, n_states)
    pred, used = np.empty((n_states, n), dtype=np.intp), np.full((len(names), n_states), np.nan)
    plan = nested_plan(y, g, dom) if method == "logreg" else None
    with threadpool_limits(limits=1):
        for s in range(n_states):
            x = X[:, s].astype(np.float64)
            if method == "mass_mean":
                pred[s] = mass_mean(x, y[None], dom[None], len(classes))[0][0]
            else:
                pred[s], _, used[:, s] = logreg_oof(x, y, plan, len(classes), c=cs[s])
    correct = pred == y
    accuracy, ci = np.empty((len(names), n_states)), np.empty((len(names), n_states, 2))
    streams = np.random.SeedSequence(seed).spawn(len(names))
    for k in range(len(names)):
        rows = dom == k
        local = np.unique(g[rows], return_inverse=True)[1].ravel()
        weights = group_weights(local, n_bootstrap, np.random.default_rng(streams[k]))
        accuracy[k] = correct[:, rows].mean(axis=1)
        ci[k] = interval(weighted_mean(weights, correct[:, rows]), ci_level)
    return TransferProfile(method=method, domains=names, accuracy=accuracy, ci=ci,
                           n=np.bincount(dom, minlength=len(names)), mean=accuracy.mean(axis=0), c=used,
                           classes=classes)


def _check_domains(y, g, dom, names, classes) -> None:
    if len(names) < 2:
        raise ValueError(f"{len(names)} domain(s); leaving one out needs at least two, so give rows of another domain")
    if len(classes) < 2:
        raise ValueError(f"the labels hold {len(classes)} class(es); a probe needs two, so add rows of another class")
    spans = np.zeros((int(g.max()) + 1, len(names)), dtype=bool)
    spans[g, dom] = True
    if (wide := np.flatnonzero(spans.sum(axis=1) > 1)).size:
        where = names[spans[wide[0]]]
        raise ValueError(f"a group has rows in domains {list(where)}; a group must lie in one domain (else the "
                         "held-out domain leaks into training), so regroup or give the group one domain")
    for k, name in enumerate(names):
        if len(np.unique(y[dom != k])) < 2:
            raise ValueError(f"without domain {name!r} the training rows hold one class; every class needs rows in "
                             "at least two domains")


def _per_state_c(c, method, n_states) -> list:
    if c is None:
        return [None] * n_states
    if method != "logreg":
        raise ValueError(f"c={c!r} with method={method!r}: only the logistic probe has a C; drop c")
    values = np.broadcast_to(np.asarray(c, dtype=np.float64), (n_states,))
    if not np.all(values > 0):
        raise ValueError(f"c={c!r}: give one positive C per state ({n_states}) or one for all")
    return [float(v) for v in values]
