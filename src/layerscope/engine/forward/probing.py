"""Probes on extracted activations, for one-off use.

    acts = ls.extract(lm, texts)
    prof = ls.probe(acts, labels, groups=groups)          # a ProbeProfile: prof.accuracy[s], prof.q[s], ...
    X = state_vectors(acts, "mean_no_pos0")               # (n_texts, n_layers + 1, d), state L before the final norm

State s is the stream entering block s (0: the embeddings' output); the last state is the last block's output
before the final norm, as the steering engine (:mod:`.steering`) numbers them, not transformers' last hidden
state (after the norm). The probes, folds and controls: :mod:`layerscope.measures.probes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...measures.probes import ProbeProfile, probe_states
from .activations import Activations


def state_vectors(acts: Activations, pooling: str = "mean") -> np.ndarray:
    """(n_texts, n_layers + 1, d) float32 pooled vectors: states 0..n_layers - 1 as extracted, state n_layers the
    last block's output before the final norm. A ``ValueError`` naming the fix when a state was not extracted."""
    n_layers = acts.model.n_layers
    kept = acts.settings.layers
    missing = [s for s in range(n_layers) if kept is not None and s not in kept]
    if missing or pooling not in acts.pre_norm or pooling not in acts.pooled:
        what = f"state {missing[0]}" if missing else f"the {pooling!r} pooling before the final norm"
        raise ValueError(f"these activations lack {what}; extract every layer with that pooling: "
                         "ls.extract(lm, texts) (layers=None, the default poolings)")
    pooled = acts.pooled[pooling]
    states = [np.asarray(pooled[:, s], dtype=np.float32) for s in range(n_layers)]
    states.append(np.asarray(acts.pre_norm[pooling], dtype=np.float32))
    return np.stack(states, axis=1)


def probe(acts: Activations | np.ndarray, labels: Sequence, groups: Sequence | None = None, *,
          pooling: str = "mean_no_pos0", method: str = "logreg", folds: int = 5, n_bootstrap: int = 1000,
          n_permutations: int = 200, seed: int = 0, ci_level: float = 0.95, units: Sequence | None = None,
          surface=None) -> ProbeProfile:
    """Cross-validated probes of ``labels`` (one per text) at every state of ``acts`` (or of an array
    (n, S, d)); ``groups`` (one per text; default: each text its own) are never split across folds. ``units``
    (one per text, e.g. a word type or template id that recurs across texts) key the Hewitt & Liang control task
    (without them: no control, no selectivity); ``surface`` a :func:`~layerscope.measures.probes.surface_baseline`
    of the same rows (without it, the gain is over the state-0 probe)."""
    X = state_vectors(acts, pooling) if isinstance(acts, Activations) else np.asarray(acts)
    labels = np.asarray(labels)
    groups = np.arange(len(labels)).astype(str) if groups is None else np.asarray(groups)
    return probe_states(X, labels, groups, method=method, folds=folds, n_bootstrap=n_bootstrap,
                        n_permutations=n_permutations, seed=seed, ci_level=ci_level, units=units, surface=surface)
