"""The null relabelings, plain functions on data (see :mod:`layerscope.validation.nulls`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from ...data import PairDataset
from ...studies.shared.inputs import PairRun

TEXT_LABELS = ("lang", "sample", "resource")
"""The columns of the ablation's per-text scores that name a text and its group."""


# -- the relabelings --------------------------------------------------------------------------------------------

def check_rng(rng: Any) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, e.g. np.random.default_rng(0); got {type(rng).__name__}")
    return rng


def shuffle_preferences(prefs, rng: np.random.Generator) -> np.ndarray:
    """``prefs`` (n_pairs,), one output preference per pair, permuted across the pairs: ``prefs[rng.permutation(n)]``
    (a copy; ``shuffle_preferences(np.arange(n), rng)`` is the permutation itself)."""
    check_rng(rng)
    prefs = np.asarray(prefs)
    if prefs.ndim != 1:
        raise ValueError(f"prefs must hold one value per pair, shape (n_pairs,); got shape {prefs.shape}")
    return prefs[rng.permutation(len(prefs))]


def with_pair_order(run: PairRun, order) -> PairRun:
    """``run`` whose pair i carries the scores (summed NLL and scored tokens, of its A and its B) of pair
    ``order[i]``, so ``with_pair_order(run, order).pref == run.pref[order]``; vectors, token counts, texts and
    categories stay where they are."""
    n = run.pairs.n_pairs
    order = np.asarray(order)
    if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        raise ValueError(f"order must be a permutation of the {n} pair positions 0..{n - 1}; got shape "
                         f"{order.shape}")
    rows = np.stack([2 * order, 2 * order + 1], axis=1).ravel()
    acts = dataclasses.replace(run.acts, nll_sum=run.acts.nll_sum[rows], n_scored=run.acts.n_scored[rows])
    return dataclasses.replace(run, acts=acts)


def shuffled_run(run: PairRun, rng: np.random.Generator) -> PairRun:
    """``run`` with its preferences shuffled across pairs (:func:`shuffle_preferences`, one draw of ``rng``): its
    ``pref`` equals ``shuffle_preferences(run.pref, rng)`` for an ``rng`` in the same state."""
    return with_pair_order(run, shuffle_preferences(np.arange(run.pairs.n_pairs), rng))


def permute_languages(per_text: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """The ablation's per-text scores (``Scores.per_text``: a row per configuration, variant and text) with the
    texts' labels permuted: text t (a (lang, sample) key) takes the ``lang``, ``sample`` and ``resource`` of text
    ``order[t]`` (``order = rng.permutation(n_texts)``, texts in file order) on every one of its rows; its scores
    stay. Rows are put back in the runner's order (per configuration, texts in file order of their new labels)."""
    check_rng(rng)
    missing = [c for c in (*TEXT_LABELS, "config", "variant") if c not in per_text.columns]
    if missing:
        raise ValueError(f"per_text lacks the column(s) {', '.join(missing)}; pass the ablation runner's "
                         "Scores.per_text (score_configs(...).per_text)")
    keys = per_text.drop_duplicates(["lang", "sample"])[list(TEXT_LABELS)].reset_index(drop=True)
    order = rng.permutation(len(keys))
    position = pd.MultiIndex.from_frame(keys[["lang", "sample"]]).get_indexer(
        pd.MultiIndex.from_frame(per_text[["lang", "sample"]]))  # each row's text, by its place in file order
    out = per_text.copy()
    for column in TEXT_LABELS:
        out[column] = keys[column].to_numpy()[order][position]
    block = pd.factorize(per_text["variant"].astype(str) + "\0" + per_text["config"].astype(str))[0]
    return out.iloc[np.lexsort((order[position], block))].reset_index(drop=True)


def coin_flips(n_pairs: int, rng: np.random.Generator) -> np.ndarray:
    """(n_pairs,) bool: a fair coin per pair (True: swap its A and B)."""
    check_rng(rng)
    return rng.random(int(n_pairs)) < 0.5


def flip_pairs(pairs: PairDataset, flips) -> PairDataset:
    """``pairs`` with A and B swapped in every pair where ``flips`` (n_pairs,) is True (pairs in
    :meth:`PairDataset.texts` order); categories, their order and descriptions kept."""
    flips = np.asarray(flips, dtype=bool)
    if flips.shape != (pairs.n_pairs,):
        raise ValueError(f"flips must hold one bool per pair, shape ({pairs.n_pairs},); got shape {flips.shape}")
    start, categories = 0, []
    for cat in pairs.categories:
        mine = flips[start:start + len(cat.pairs)]
        categories.append(dataclasses.replace(cat, pairs=tuple((b, a) if f else (a, b)
                                                               for (a, b), f in zip(cat.pairs, mine, strict=True))))
        start += len(cat.pairs)
    return PairDataset(categories=tuple(categories), source=pairs.source)


def coin_flip_pairs(pairs: PairDataset, rng: np.random.Generator) -> PairDataset:
    """``pairs`` with A and B of each pair swapped by a fair coin, pair by pair: ``flip_pairs(pairs,
    coin_flips(pairs.n_pairs, rng))``."""
    return flip_pairs(pairs, coin_flips(pairs.n_pairs, rng))


def flipped_rows(flips) -> np.ndarray:
    """(2 n_pairs,) where each text of the flipped dataset sits in the original's :meth:`PairDataset.texts`:
    ``original_vectors[flipped_rows(flips)]`` are the flipped texts' vectors."""
    flips = np.asarray(flips, dtype=bool)
    rows = np.stack([2 * np.arange(len(flips)), 2 * np.arange(len(flips)) + 1], axis=1)
    rows[flips] = rows[flips][:, ::-1]
    return rows.ravel()


def split_pairs(pairs: PairDataset, n_splits: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The pair positions (:meth:`PairDataset.texts` order) of ``n_splits`` disjoint parts covering every pair: each
    category's pairs shuffled (``rng.permutation``, categories in order) and dealt in turn, so part k holds
    positions k, k + n_splits, ... of the shuffled order and every part has every category."""
    check_rng(rng)
    if isinstance(n_splits, bool) or int(n_splits) != n_splits or n_splits < 2:
        raise ValueError(f"n_splits must be a whole number of at least 2; got {n_splits!r}")
    n_splits = int(n_splits)
    small = [c.name for c in pairs.categories if len(c.pairs) < 2 * n_splits]
    if small:
        raise ValueError(f"category {small[0]!r} has fewer than 2 x {n_splits} pairs, so a part would hold fewer than "
                         "2 of its statements per side; use fewer splits or a dataset with more pairs per category")
    parts: list[list[int]] = [[] for _ in range(n_splits)]
    start = 0
    for cat in pairs.categories:
        shuffled = start + rng.permutation(len(cat.pairs))
        for k in range(n_splits):
            parts[k] += shuffled[k::n_splits].tolist()
        start += len(cat.pairs)
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
