"""What the tuned lens may train on and what it is scored on: a split by groups, and unseen prefixes.

    train, held = split_holdout(texts, 0.1, seed=0, groups=groups)   # a group's texts all on one side
    keep = unseen_positions([ids[i] for i in train], [ids[i] for i in held])
    keep[j]           # (len(ids[held[j]]) - 1,) bool: position t scored only if ids[:t + 1] starts no training text

Why both: a causal model gives identical states and next-token distributions on a shared token prefix, so a
held-out text that opens like a training text would be scored partly on copies of training rows. ``groups`` keeps
texts that share an opening by construction together (a pair's two statements, a model-written sample and the
text it started from); the prefix rule drops whatever else is shared (the position of a lone "The", a prompt that
repeats a training text's first words). A position ``t`` of a held-out text is scored when its prefix
``ids[:t + 1]`` (the tokens the state and the target depend on) is not the prefix of any training text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def split_holdout(texts: Sequence, holdout: float, seed: int, groups: Sequence | None = None
                  ) -> tuple[list[int], list[int]]:
    """``train, held = split_holdout(texts, 0.1, seed, groups)``: indices into ``texts`` (each ascending) of a
    seeded split of the groups (``groups[i]``: any hashable label of text ``i``; default: each text its own
    group); ``round(holdout * n_groups)`` groups held out, at least one when ``holdout > 0`` and there are two
    groups or more, never all of them."""
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1); got {holdout}")
    n = len(texts)
    groups = list(range(n)) if groups is None else list(groups)
    if len(groups) != n:
        raise ValueError(f"groups has {len(groups)} labels for {n} texts; give one label per text")
    labels = list(dict.fromkeys(groups))  # in first-seen order
    k = len(labels)
    n_held = 0 if holdout == 0 or k < 2 else min(k - 1, max(1, round(holdout * k)))
    order = np.random.default_rng(seed).permutation(k)
    held_labels = {labels[i] for i in order[:n_held]}
    held = [i for i, g in enumerate(groups) if g in held_labels]
    return [i for i, g in enumerate(groups) if g not in held_labels], held


class PrefixTrie:
    """Every token prefix of a set of texts: ``trie.add(ids)``, then ``trie.depth(ids)`` (how many leading tokens
    of ``ids`` form a prefix some added text starts with). Nodes are ``(parent, token) -> node`` entries: exact,
    no hashing of whole prefixes."""

    def __init__(self, texts: Sequence[Sequence[int]] = ()):
        self.nodes: dict[tuple[int, int], int] = {}
        for ids in texts:
            self.add(ids)

    def add(self, ids: Sequence[int]) -> None:
        node = 0
        for token in ids:
            node = self.nodes.setdefault((node, int(token)), len(self.nodes) + 1)

    def depth(self, ids: Sequence[int]) -> int:
        node, depth = 0, 0
        for token in ids:
            nxt = self.nodes.get((node, int(token)))
            if nxt is None:
                break
            node, depth = nxt, depth + 1
        return depth

    def __len__(self) -> int:
        """The distinct non-empty prefixes added."""
        return len(self.nodes)


def unseen_positions(train_ids: Sequence[Sequence[int]], held_ids: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Per held-out text, a (len - 1,) boolean array over its scored positions: ``True`` where the prefix
    ``ids[:t + 1]`` is not the prefix of any training text (so no training row equals that row)."""
    trie = PrefixTrie(train_ids)
    out = []
    for ids in held_ids:
        n = max(len(ids) - 1, 0)
        keep = np.ones(n, dtype=bool)
        keep[: min(trie.depth(ids), n)] = False
        out.append(keep)
    return out


def distinct_rows(ids: Sequence[Sequence[int]]) -> int:
    """How many distinct scored rows texts ``ids`` give: distinct prefixes ``ids[:t + 1]`` with a next token."""
    return len(PrefixTrie([x[:-1] for x in ids if len(x) >= 2]))
