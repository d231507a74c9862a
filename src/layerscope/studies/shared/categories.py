"""Category-level inputs and tests of the pair studies (divergence, scaling): the dataset checked for enough
categories, each category's uniformity asymmetry (UA) and mean preference, and r over the categories.

    pairs = study_pairs(config.dataset, config.drop_category)   # >= 4 categories, also without the dropped one
    cats, n_cat = pairs.pair_categories(), len(pairs.categories)
    ua = category_ua(run.a("mean"), run.b("mean"), cats, n_cat, layers)   # (n_cat, len(layers)), a layer at a time
    pref = category_pref(run.pref, cats, n_cat)                              # (n_cat,)
    tests = category_tests(ua, pref, Significance())   # per column (tested layer): r as "value", p, p_perm, CI
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...data import PairDataset, load_pairs
from ...data.pairs import CATEGORY_RULE, MIN_CATEGORIES, check_categories
from ...measures.geometry import uniformity
from ...modes import NOTEBOOKS
from ...stats import pearson
from ...study.settings import ConfigError
from .correlation import Significance, pearson_tests
from .inputs import without_category


def study_pairs(dataset: str | None, drop_category: str | None = None) -> PairDataset:
    """``pairs = study_pairs(config.dataset, config.drop_category)``: the dataset every pair study (and a suite's
    input check) reads, with at least ``MIN_CATEGORIES`` categories, also once ``drop_category`` is left out.

    ``DatasetError`` for a bad file or too few categories; ``ConfigError`` for an unknown ``drop_category`` or one
    that leaves too few.
    """
    pairs = check_categories(load_pairs(dataset))
    if drop_category is not None:
        kept = len(without_category(pairs, drop_category).categories)
        if kept < MIN_CATEGORIES:
            raise ConfigError(f"--drop-category {drop_category!r} leaves {kept} categories of {pairs.source}; "
                              f"{CATEGORY_RULE}, so drop none or add categories to the dataset")
    return pairs


def category_ua(a, b, cats: np.ndarray, n_cat: int, layers: Sequence[int]) -> np.ndarray:
    """UA per category at each of ``layers``: uniformity of its A statements minus that of its B statements.

    ``category_ua(run.a("mean"), run.b("mean"), cats, n_cat, [0, 4, 8])``. a, b: (n_pairs, n_layers + 1, d)
    :class:`~layerscope.engine.cache.layers.LayerStack` (or arrays), read one layer at a time (``a[:, l]``: (n_pairs,
    d)), so only ``layers`` are ever read; cats: (n_pairs,) category index -> (n_cat, len(layers)), column j = layer
    ``layers[j]``.
    """
    ua = np.empty((n_cat, len(layers)))
    for column, layer in enumerate(layers):
        a_l, b_l = a[:, layer], b[:, layer]  # (n_pairs, d) each
        ua[:, column] = [uniformity(a_l[cats == c]) - uniformity(b_l[cats == c]) for c in range(n_cat)]
    return ua


def category_pref(pref: np.ndarray, cats: np.ndarray, n_cat: int) -> np.ndarray:
    """Mean output preference NLL(B) - NLL(A) per category: pref (n_pairs,), cats (n_pairs,) -> (n_cat,)."""
    return np.array([pref[cats == c].mean() for c in range(n_cat)])


def category_tests(ua: np.ndarray, pref: np.ndarray, sig: Significance) -> list[dict]:
    """Per column of ``ua`` (n_cat, k): r with ``pref`` (n_cat,) as ``value`` and its ``p``; by default also
    ``p_perm`` and the Fisher-z ``ci_lo``, ``ci_hi`` (q is added per family, over the tested layers)."""
    if sig.compat == NOTEBOOKS:
        return [dict(zip(("value", "p"), pearson(column, pref), strict=False)) for column in ua.T]
    return pearson_tests(ua, pref, sig.n_permutations, sig.seed, sig.level)
