"""Model plants: edited copies of a model whose right answer is known, to test a method against.

    import layerscope as ls
    from layerscope.plant import inserted_identity, duplicated_band, removed_band, scaled_writes, state_map
    from layerscope.plant import planted_concept
    lm = ls.load_model("smollm2-135m")                 # 30 decoder blocks, hidden states 0..30
    planted = inserted_identity(lm, at=15, k=4)        # a LoadedModel: 34 blocks, states 15..19 one state
    planted.info.name                                  # "smollm2-135m+identity(at=15,k=4)"
    state_map(planted.info)                            # [0, ..., 15, 20, ..., 34]: the copy's state per base state
    again = removed_band(planted, start=2, k=1)        # plants compose; again.info.plant holds both records
    acts = ls.extract(planted, texts)                  # anything that takes a LoadedModel takes a planted one

- :func:`inserted_identity` ``(lm, at, k)``: k blocks that hand their input on, before block ``at``.
- :func:`duplicated_band` ``(lm, start, k)``: blocks start..start+k-1 run twice.
- :func:`removed_band` ``(lm, start, k)``: blocks start..start+k-1 dropped.
- :func:`scaled_writes` ``(lm, start, scale)``: every block from ``start`` on writes ``scale`` times its write.
- :func:`planted_concept` ``(lm, at, plus, minus, strength, until=None)``: block ``at`` writes, along the direction
  the unembedding reads for ``plus`` against ``minus``, the sign of the text's last marker token; with ``until``,
  the write is carried to block ``until`` and cancelled there (the logits are the model's).

Each returns a new :class:`~layerscope.models.LoadedModel` whose model shares every weight tensor with the
original (no copy; the original, its blocks, config and hooks are left as they were), whose ``info`` has its own
name, ``n_layers`` and ``weights_hash`` (so its cache entries are its own) and one more record in
``info.plant``; :func:`state_map` composes a chain's records. ``layerscope.study.model_entry`` writes the
records into a result's manifest. Bad input raises :class:`~layerscope.errors.PlantError` naming the fix.

Supported: decoder-only transformers causal LMs whose block list ``layerscope.models.decoder_layers`` finds,
whose blocks take the hidden state first and return it or a tuple starting with it (Llama, SmolLM2, Gemma 3,
GPT-2, GPT-NeoX/Pythia, OPT and the like). See docs/plants.md.

May import: :mod:`layerscope.engine`, :mod:`layerscope.models` and the packages below them; ``layerscope.study``,
the studies and the runner may import this package. ``import layerscope`` does not import it (it needs torch).
"""

from __future__ import annotations

from ..errors import PlantError
from .plants import duplicated_band, inserted_identity, planted_concept, removed_band, scaled_writes
from .records import state_map

__all__ = ["PlantError", "duplicated_band", "inserted_identity", "planted_concept", "removed_band", "scaled_writes",
           "state_map"]
