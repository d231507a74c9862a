"""Which layers to remove: the selection rules of the layer-pruning papers, from per-layer geometry.

    lowest_influence(influence, k)         # ShortGPT (Men et al. 2024): the k blocks of lowest Block Influence
    closest_block(angular, k)              # Gromov et al. (2024): the k contiguous blocks whose input and output
                                           # states are closest in angle
    random_sets(n_layers, [1, 2, 3], draws, rng)   # the control: per k, ``draws`` sets of k blocks, each
                                                   # uniform over the k-sets (draw d's sets are nested)
    angular_distances(last)                # (depth, depth) mean angular distance between depths of each text

``influence`` is (L,) Block Influence per decoder block (1 - cos between the states entering and leaving it,
averaged over tokens, :func:`.similarity.block_influence`); ``angular`` is (L + 1, L + 1) with entry (i, j) the
mean over texts of arccos(cos(h_i, h_j)) / pi between the last token's states entering block i and block j
(depth L: the last block's output, before the final norm), as Gromov et al. measure it.
"""

from __future__ import annotations

import numpy as np


def lowest_influence(influence: np.ndarray, k: int) -> tuple[int, ...]:
    """The ``k`` blocks of lowest Block Influence, sorted; ties go to the lower block (a stable sort)."""
    influence = np.asarray(influence, dtype=np.float64)
    _check_k(k, len(influence))
    return tuple(sorted(int(b) for b in np.argsort(influence, kind="stable")[:k]))


def closest_block(angular: np.ndarray, k: int) -> tuple[int, ...]:
    """Blocks l*, ..., l* + k - 1 for the l* that minimises ``angular[l, l + k]`` (the angle between the
    stream entering block l and the stream entering block l + k); ties go to the lowest l."""
    angular = np.asarray(angular, dtype=np.float64)
    n_layers = angular.shape[0] - 1
    _check_k(k, n_layers)
    distances = np.array([angular[start, start + k] for start in range(n_layers - k + 1)])
    start = int(np.argmin(distances))
    return tuple(range(start, start + k))


def random_sets(n_layers: int, ks: list[int], draws: int, rng: np.random.Generator) -> dict[int, list[tuple[int, ...]]]:
    """Per k of ``ks``, ``draws`` sorted sets of k distinct blocks of ``n_layers``, each uniform over all k-sets.
    Draw d's sets are the first k blocks of one random order of the blocks, so they are nested over k (a pass
    for the larger set shares the layers before its added block with the smaller one's); within one k the draws
    are independent."""
    for k in ks:
        _check_k(k, n_layers)
    orders = [rng.permutation(n_layers) for _ in range(draws)]
    return {k: [tuple(sorted(int(b) for b in order[:k])) for order in orders] for k in ks}


def angular_distances(last: np.ndarray) -> np.ndarray:
    """(n_texts, depths, d) states of each text's last token at each depth -> (depths, depths) mean over texts
    of arccos(cos) / pi, cos clipped to [-1, 1]; 0 on the diagonal."""
    last = np.asarray(last, dtype=np.float64)
    unit = last / np.linalg.norm(last, axis=-1, keepdims=True)
    cos = np.clip(np.einsum("nid,njd->nij", unit, unit), -1.0, 1.0)
    out = (np.arccos(cos) / np.pi).mean(axis=0)
    np.fill_diagonal(out, 0.0)
    return out


def _check_k(k: int, n_layers: int) -> None:
    if not 1 <= k <= n_layers:
        raise ValueError(f"cannot choose {k} of {n_layers} blocks: k must be in 1..{n_layers}")
