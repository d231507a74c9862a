"""The forward pass and what one pass yields: the room every other room of the engine builds on.

    from layerscope.engine.forward.extract import extract      # (also layerscope.engine.extract, ls.extract)
    acts = extract(lm, texts)            # one batched pass, every layer pooled inside the batch, cached

Holds: ``batching`` (length-sorted padded batches, the memory plan), ``guards`` (text lengths before a pass,
finite numbers after it), ``capture`` (the residual stream taken by hooks where each layer makes it), ``head``
(next-token NLL from the head on the scored tokens only), ``pooling`` (padding-safe poolings), ``massive``
(massive-activation flags), ``no_massive`` (the ``mean_no_massive`` pooling within a pass), ``pipeline``
(device-to-host copies and store writes off the critical path), ``extract`` and ``activations`` (the pass and
what it yields), ``tokens`` (every token's state for token-level geometry), ``probing`` (probes on extracted
activations).

May import: :mod:`layerscope.engine.cache` and the packages below the engine (models, data, io, stats, measures,
paths, provenance, progress, errors); no other room of the engine.
"""
