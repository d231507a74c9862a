"""The engine: the passes every study is built from, in five rooms.

    from layerscope.engine import extract, Activations
    acts = extract(lm, texts)            # one batched pass per text, pooled inside the batch, cached

``forward`` (the forward pass, extraction and what it yields), ``cache`` (the activation cache on disk),
``lenses`` (the logit and tuned lens), ``atlas`` (the atlas's streamed pass), ``interventions`` (block surgery,
prefix reuse, residual edits, steering). The cache imports no room; forward imports the cache; lenses and
interventions import forward and not each other; the atlas imports lenses and forward. Import-linter contracts
in ``pyproject.toml`` keep these arrows (``make lint``). The flat module paths of 0.3 (``layerscope.engine.store``,
``layerscope.engine.tuned_lens_train``, ...) still work until 0.5.0, with a ``DeprecationWarning`` naming the new
place (:mod:`._old_paths`).
"""

from . import _old_paths
from .forward.activations import Activations, ExtractSettings, ExtractStats
from .forward.extract import extract
from .forward.massive import MASSIVE_RATIO, massive_mask, massive_tokens
from .forward.pooling import ALL_POOLINGS, CHECK_POOLINGS, POOLINGS

__all__ = ["ALL_POOLINGS", "CHECK_POOLINGS", "MASSIVE_RATIO", "POOLINGS", "Activations", "ExtractSettings",
           "ExtractStats", "extract", "massive_mask", "massive_tokens"]

_old_paths.install()
