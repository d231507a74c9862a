"""The label sets a probe study reads: each a set of texts with a label and a group per text.

    tasks, skipped = label_tasks(("side", "category"), pairs, None, None, folds=5)
    task.name, task.texts, task.labels, task.groups, task.kind, task.partners, task.domains
    units = control_units(task, token_ids(tokenizer, task.texts))   # Hewitt & Liang's recurring unit per text

- ``side:<category>``: one category's A and B statements; a pair is one group. One contrast (A means digits in
  one category and hedged in another, so each category is its own): probed, and tested causally (``kind``
  "contrast").
- ``side``: the A and B statements of every category pooled: a mixture of the categories' contrasts (``kind``
  "mixture"), probed, with leave-one-category-out transfer (``domains``), never steered.
- ``category``: a pair's category, both of its texts; a pair is one group.
- ``language``: the language of each text of a languages file (the ablation study's; default: the bundled one);
  each text is its own group.
- a user's labels file (``--labels FILE``, CSV or JSONL ``text,label[,group]``): named by the file's stem.

A task with exactly two classes is a contrast and is tested causally, class A the first sorted class (the side's A)
and class B the other; with more classes it is probed only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...data import PairDataset
from ...data.labels import load_labels
from ...data.languages import load_languages
from ...study.settings import ConfigError

BUILT_IN_SETS = ("side", "category", "language")
KINDS = ("contrast", "mixture", "classes")


@dataclass(frozen=True)
class LabelTask:
    name: str
    texts: tuple[str, ...]
    labels: np.ndarray
    """(n,) str."""
    groups: np.ndarray
    """(n,) str: rows of one group are never split across folds."""
    source: str
    kind: str = "classes"
    """``contrast`` (two classes, tested causally), ``mixture`` (the side pooled over categories) or ``classes``."""
    partners: np.ndarray | None = None
    """(n,) int: the row of each text's pair partner (A's B, B's A), -1 for none; None when no text has one."""
    domains: np.ndarray | None = None
    """(n,) str: each row's category, for leave-one-category-out transfer (the pooled side)."""
    contrast: str = ""
    """What the contrast is, in words (a category's description), for the report."""
    pair_rows: np.ndarray | None = None
    """(n,) int: where each text sits in :meth:`PairDataset.texts` (a pair task), so one extraction of the pairs
    serves every pair task; None for other texts."""

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(sorted({str(c) for c in self.labels.tolist()}))

    @property
    def causal(self) -> bool:
        """Tested by removal and steering: a contrast of exactly two classes."""
        return self.kind == "contrast"


def parse_sets(value: str) -> tuple[str, ...]:
    """``"side,category"`` -> ``("side", "category")``; a ``ConfigError`` naming the choices otherwise."""
    names = tuple(dict.fromkeys(n.strip() for n in str(value).split(",") if n.strip()))
    unknown = [n for n in names if n not in BUILT_IN_SETS]
    if unknown or not names:
        what = f"unknown label set {unknown[0]!r}" if unknown else "no label set given"
        raise ConfigError(f"{what}; use any of {', '.join(BUILT_IN_SETS)}, comma-separated (and --labels FILE for "
                          "your own)")
    return names


def pair_tasks(pairs: PairDataset, names: tuple[str, ...], folds: int) -> tuple[list[LabelTask], dict[str, str]]:
    """The ``side:<category>``, ``side`` and ``category`` tasks of a pair dataset, texts in
    :meth:`PairDataset.texts` order; and {task name: why} for the per-category contrasts too small to probe."""
    out, skipped = [], {}
    start = np.cumsum([0] + [2 * len(c.pairs) for c in pairs.categories])
    every = np.arange(2 * pairs.n_pairs)
    if "side" in names:
        for k, cat in enumerate(pairs.categories):
            name = f"side:{cat.name}"
            if len(cat.pairs) < 2 * folds:
                skipped[name] = (f"category {cat.name!r} has {len(cat.pairs)} pair{'s' * (len(cat.pairs) != 1)}; a "
                                 f"per-category contrast needs at least 2 x folds = {2 * folds} pairs (add pairs or "
                                 "lower --folds); it still counts in the pooled side")
                continue
            texts = tuple(t for pair in cat.pairs for t in pair)
            out.append(_side(name, texts, len(cat.pairs), pairs.source, "contrast", None, cat.description,
                             np.arange(start[k], start[k + 1])))
        if len(pairs.categories) > 1:
            cats = np.array([c.name for c in pairs.categories])[pairs.pair_categories()]
            out.append(_side("side", tuple(pairs.texts()), pairs.n_pairs, pairs.source, "mixture",
                             np.repeat(cats, 2), f"a mixture of {len(pairs.categories)} categories' contrasts",
                             every))
    if "category" in names:
        cats = np.array([c.name for c in pairs.categories])[pairs.pair_categories()]
        out.append(LabelTask("category", tuple(pairs.texts()), np.repeat(cats, 2),
                             np.repeat([f"pair{i}" for i in range(pairs.n_pairs)], 2), pairs.source,
                             kind="contrast" if len(pairs.categories) == 2 else "classes",
                             partners=_partners(pairs.n_pairs), pair_rows=every))
    return out, skipped


def _side(name, texts, n_pairs, source, kind, domains, contrast, rows) -> LabelTask:
    return LabelTask(name, texts, np.tile(np.array(["A", "B"]), n_pairs),
                     np.repeat([f"pair{i}" for i in range(n_pairs)], 2), source, kind=kind,
                     partners=_partners(n_pairs), domains=domains, contrast=contrast, pair_rows=rows)


def _partners(n_pairs: int) -> np.ndarray:
    """(2 n,) the partner row of texts A0, B0, A1, B1, ...: 1, 0, 3, 2, ..."""
    return np.arange(2 * n_pairs) ^ 1


def language_task(path: str | None) -> LabelTask:
    langs = load_languages(path)
    rows = langs.texts()
    labels = np.array([c for c, _, _ in rows])
    return LabelTask("language", tuple(t for _, _, t in rows), labels, np.array([f"{c}{i}" for c, i, _ in rows]),
                     langs.source, kind="contrast" if len(set(labels.tolist())) == 2 else "classes")


def file_task(path: str, folds: int) -> LabelTask:
    labels = load_labels(path, folds=folds, allow_mixed_groups=True)
    return LabelTask(labels.name, labels.texts, np.array(labels.labels), np.array(labels.groups), str(path),
                     kind="contrast" if len(labels.classes) == 2 else "classes")


def label_tasks(names: tuple[str, ...], pairs: PairDataset, texts_file: str | None, labels_file: str | None,
                folds: int) -> tuple[list[LabelTask], dict[str, str]]:
    """Every task the config asks for, the pair tasks first, and {name: why} for those too small to probe."""
    tasks, skipped = pair_tasks(pairs, names, folds)
    if "language" in names:
        tasks.append(language_task(texts_file))
    if labels_file:
        tasks.append(file_task(labels_file, folds))
    return tasks, skipped


def token_ids(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids as the tokenizer gives them (a BOS included when it adds one)."""
    return [list(tokenizer(text)["input_ids"]) for text in texts]


def differing_start(ids: Sequence[int], partner: Sequence[int]) -> int:
    """The length of the longest common token prefix of two texts: the position where they part."""
    k = 0
    while k < min(len(ids), len(partner)) and ids[k] == partner[k]:
        k += 1
    return k


def control_units(task: LabelTask, ids: list[list[int]], bos_id: int | None = None) -> np.ndarray:
    """(n,) int: the recurring unit each text's control label is keyed to (Hewitt & Liang 2019: a word type). With
    a pair partner, the text's first token where it parts from its partner (the differing word type; its last
    token when it is a prefix of the partner); without, its first token after a BOS."""
    out = np.empty(len(ids), dtype=np.int64)
    for i, x in enumerate(ids):
        if task.partners is not None and task.partners[i] >= 0:
            k = differing_start(x, ids[task.partners[i]])
            out[i] = x[min(k, len(x) - 1)]
        else:
            start = 1 if bos_id is not None and len(x) > 1 and x[0] == bos_id else 0
            out[i] = x[start]
    return out
