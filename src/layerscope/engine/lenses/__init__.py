"""The logit lens and the tuned lens: what each hidden state predicts, read through the model's own head.

    from layerscope.engine.lenses.prompt import lens            # ls.lens: one prompt's layer x position grid
    from layerscope.engine.lenses.tuned_train import train_tuned_lens   # ls.train_tuned_lens
    from layerscope.engine.lenses.tuned import TunedLens        # ls.TunedLens: load, save, translate, logits

Holds the logit lens (``logit``: per-layer logits and their sums; ``logit_rows``: per-token numbers from a
chunk of logits; ``prompt``: one prompt's grid) and the tuned lens (``tuned``: the lens and its translators;
``tuned_io``: its folder format; ``tuned_rows``: every hidden state's rows cached in one pass; ``tuned_split``:
the held-out split by groups and unseen prefixes; ``tuned_fit``: the least-squares start and the shortlist KL;
``tuned_train``: training; ``tuned_eval``: held-out CE and KL; ``tuned_cache``: the cached lens of the defaults).
To change how the tuned lens trains, start at ``tuned_train``.

May import: :mod:`layerscope.engine.forward` (and so the cache) and the packages below the engine; not the atlas
or the interventions.
"""
