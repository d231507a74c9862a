"""The atlas's streamed pass: the field's per-layer measures of one model from one pass over the texts.

    from layerscope.engine.atlas.stream import atlas_pass
    measured = atlas_pass(lm, texts)     # an AtlasPass: lens, block influence, norms, entropy, spectra, massive

Holds: ``stream`` (the pass), ``sums`` (what each batch adds to the running sums), ``moments`` (covariance
moments and their top eigenvalue), ``entropy`` (prompt and dataset entropy from Gram matrices), ``layout`` (the
host buffers a batch fills), ``massive_profile`` (how large the largest activations are, where, in which
dimensions).

May import: :mod:`layerscope.engine.lenses`, :mod:`layerscope.engine.forward` (and so the cache) and the packages
below the engine; not the interventions.

The names of the module ``layerscope.engine.atlas`` of 0.3 (now :mod:`.stream`) still resolve here, with a
``DeprecationWarning``, until 0.5.0.
"""

from .._old_paths import old_attribute


def __getattr__(name: str):
    return old_attribute("atlas", name)
