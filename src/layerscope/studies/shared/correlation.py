"""The tests every correlation of a pair study gets by default: a permutation p, a Fisher-z interval, a
Benjamini-Hochberg q over the tested layers and a Spearman rho beside it.

    sig = Significance(level=0.95, seed=42, n_permutations=10_000)   # how each r is tested (compat: "notebooks")
    tests = pearson_tests(x, y, sig.n_permutations, sig.seed, sig.level)   # x: (n, k) -> k dicts
    add_q(tests, "p_perm", sig.level)        # each gains q (BH over the k) and significant (q < 0.05)
    rho = add_q(spearman_tests(x, y), "p", sig.level)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...stats import bh_qvalues, fisher_z_ci, pearson, permutation_pvalues, spearman


@dataclass(frozen=True)
class Significance:
    """How a pair study tests each r: ``Significance(compat=None, level=0.95, seed=42, n_permutations=10_000)``."""

    compat: str | None = None
    """``"seed"``: r and its t-test p only, as the notebooks; None: the permutation p, interval and q as well."""
    level: float = 0.95
    """Confidence level of the intervals; an r is significant when its q < 1 - level."""
    seed: int = 42
    """Seeds the permutation orderings."""
    n_permutations: int = 10_000
    """Orderings for the permutation p (all n! of them when n! is no more)."""


def pearson_tests(x, y, n_permutations: int, seed: int, level: float | None = None) -> list[dict]:
    """Per column of ``x`` (n, k): Pearson r with ``y`` (n,) as ``value``, its ``p`` and the permutation
    ``p_perm`` (exact when n! <= n_permutations, else that many orderings seeded from ``seed``); with
    ``level`` also the Fisher-z interval ``ci_lo``, ``ci_hi``."""
    x = np.asarray(x, dtype=np.float64)
    p_perm = permutation_pvalues(x, y, n_permutations, np.random.default_rng(seed))
    tests = []
    for column, pp in zip(x.T, p_perm, strict=False):
        r, p = pearson(column, y)
        test = {"value": r, "p": p, "p_perm": float(pp)}
        if level is not None:
            test["ci_lo"], test["ci_hi"] = fisher_z_ci(r, len(column), level)
        tests.append(test)
    return tests


def spearman_tests(x, y) -> list[dict]:
    """Per column of ``x`` (n, k): Spearman rho with ``y`` (n,) as ``value`` and its ``p``."""
    return [dict(zip(("value", "p"), spearman(column, y), strict=False)) for column in np.asarray(x).T]


def add_q(tests: list[dict], key: str, level: float) -> list[dict]:
    """Add ``q``, Benjamini-Hochberg over ``tests`` of ``test[key]``, and ``significant`` = q < 1 - level."""
    for test, q in zip(tests, bh_qvalues([test[key] for test in tests]), strict=False):
        test["q"] = float(q)
        test["significant"] = bool(q < 1 - level)
    return tests
