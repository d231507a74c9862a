"""Causal interventions: passes with blocks skipped, repeated, swapped or pruned, and the residual stream edited.

    from layerscope.engine.interventions.surgery_run import measure_interventions   # ls.measure_interventions
    from layerscope.engine.interventions.steering import steer                       # ls.steer

Holds: ``surgery`` and ``surgery_run`` (block interventions and their per-text NLL, KL, top-1, with prefix
reuse), ``scoring`` (next-token NLL of many texts again and again), ``prefix`` and ``prefix_plan`` (start a pass
at block k from a kept stream; the order that shares the longest prefixes), ``edits`` and ``edit_scores``
(rank-one edits of the residual stream and each text's NLL under them), ``steering`` (activation addition),
``transitions`` (block influence and angular distances, what the pruning rules read).

May import: :mod:`layerscope.engine.forward` (and so the cache) and the packages below the engine; not the lenses
or the atlas.

The names of the module ``layerscope.engine.interventions`` of 0.3 (now :mod:`.edit_scores`) still resolve here,
with a ``DeprecationWarning``, until 0.5.0.
"""

from .._old_paths import old_attribute


def __getattr__(name: str):
    return old_attribute("interventions", name)
