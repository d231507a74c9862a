"""The contrasts a probe study reads: each a set of texts with a label and a group per text.

    sets = label_sets(config, pairs)     # [LabelTask("side", ...), LabelTask("category", ...), ...]
    task.texts, task.labels, task.groups, task.steerable

- ``side``: a pair dataset's A and B statements; a pair is one group (its two texts are never split across
  folds); steering pushes along A minus B.
- ``category``: a pair's category, both of its texts; a pair is one group.
- ``language``: the language of each text of a languages file (the ablation study's; default: the bundled one);
  each text is its own group.
- a user's labels file (``--labels FILE``, CSV or JSONL ``text,label[,group]``): named by the file's stem.

A task with exactly two classes is ``steerable``: steering pushes along the first sorted class minus the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...data import PairDataset
from ...data.labels import load_labels
from ...data.languages import load_languages
from ...study.settings import ConfigError

BUILT_IN_SETS = ("side", "category", "language")


@dataclass(frozen=True)
class LabelTask:
    name: str
    texts: tuple[str, ...]
    labels: np.ndarray
    """(n,) str."""
    groups: np.ndarray
    """(n,) str: rows of one group are never split across folds."""
    source: str

    @property
    def steerable(self) -> bool:
        """Exactly two classes: steering pushes along the first sorted class minus the other (the side: A - B)."""
        return len(set(self.labels.tolist())) == 2


def parse_sets(value: str) -> tuple[str, ...]:
    """``"side,category"`` -> ``("side", "category")``; a ``ConfigError`` naming the choices otherwise."""
    names = tuple(dict.fromkeys(n.strip() for n in str(value).split(",") if n.strip()))
    unknown = [n for n in names if n not in BUILT_IN_SETS]
    if unknown or not names:
        what = f"unknown label set {unknown[0]!r}" if unknown else "no label set given"
        raise ConfigError(f"{what}; use any of {', '.join(BUILT_IN_SETS)}, comma-separated (and --labels FILE for "
                          "your own)")
    return names


def pair_tasks(pairs: PairDataset, names: tuple[str, ...]) -> list[LabelTask]:
    """The ``side`` and ``category`` tasks of a pair dataset, texts in :meth:`PairDataset.texts` order."""
    texts = tuple(pairs.texts())
    n = pairs.n_pairs
    groups = np.repeat([f"pair{i}" for i in range(n)], 2)
    out = []
    if "side" in names:
        out.append(LabelTask("side", texts, np.tile(np.array(["A", "B"]), n), groups, pairs.source))
    if "category" in names:
        cats = np.array([c.name for c in pairs.categories])[pairs.pair_categories()]
        out.append(LabelTask("category", texts, np.repeat(cats, 2), groups, pairs.source))
    return out


def language_task(path: str | None) -> LabelTask:
    langs = load_languages(path)
    rows = langs.texts()
    return LabelTask("language", tuple(t for _, _, t in rows), np.array([c for c, _, _ in rows]),
                     np.array([f"{c}{i}" for c, i, _ in rows]), langs.source)


def file_task(path: str, folds: int) -> LabelTask:
    labels = load_labels(path, folds=folds, allow_mixed_groups=True)
    return LabelTask(labels.name, labels.texts, np.array(labels.labels), np.array(labels.groups), str(path))


def label_tasks(names: tuple[str, ...], pairs: PairDataset, texts_file: str | None, labels_file: str | None,
                folds: int) -> list[LabelTask]:
    """Every task the config asks for, the pair tasks first."""
    tasks = pair_tasks(pairs, names)
    if "language" in names:
        tasks.append(language_task(texts_file))
    if labels_file:
        tasks.append(file_task(labels_file, folds))
    return tasks
