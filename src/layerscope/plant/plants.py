"""The five plants: edited copies of a model whose right answer is known.

    from layerscope.plant import inserted_identity, duplicated_band, removed_band, scaled_writes
    planted = inserted_identity(lm, at=15, k=4)   # states 15..19 of the copy are one state; logits unchanged
    planted = duplicated_band(lm, start=10, k=3)  # blocks 10, 11, 12 run twice (10 11 12 10 11 12)
    planted = removed_band(lm, start=10, k=3)     # blocks 10, 11, 12 dropped
    planted = scaled_writes(lm, start=20, scale=0.5)   # every block from 20 on writes half its update
    planted = planted_concept(lm, at=12, plus=" yes", minus=" no", strength=8.0, until=20)   # see .concept
    planted.model(**inputs, output_hidden_states=True).hidden_states   # n_layers + 1 states of (B, T, d)

Each takes a :class:`~layerscope.models.LoadedModel` and returns a new one: the same tokenizer object, a
structural copy of the model sharing every parameter and buffer tensor (no weight is copied), with the edited
block list, and ``info`` recording the plant (see :mod:`.records`). The original model, its blocks, its config
and its hooks are never changed. The copy runs as the model class's own code runs it, with or without a KV
cache (``generate`` included): each block of the copy is its own module with its own ``layer_idx``, and
``config.layer_types`` (Gemma 3) lists each block's own kind in its new position.
"""

from __future__ import annotations

import torch

from ..engine.interventions.surgery import blocks_return_tuples
from ..errors import PlantError
from ..models.describe import hooks_left_as_found
from ..models.info import decoder_layers as decoder_layers_of
from ..models.info import input_device
from ..models.load import LoadedModel
from .checks import (
    check_at,
    check_band,
    check_kept,
    check_scale,
    check_start,
    count,
    editable_blocks,
    unsupported,
    whole,
)
from .concept import ConceptWrite, Markers, ReadMarkers, check_strength, check_until, marker_id, read_direction
from .copying import shared_copy
from .layout import Slot, rebuild
from .records import duplicate_map, identity_map, planted_info, remove_map, scale_map


def inserted_identity(lm: LoadedModel, at: int, k: int) -> LoadedModel:
    """``k`` new decoder blocks that write nothing, inserted before block ``at`` (after block at - 1): the copy's
    hidden states at..at+k are one state, and its logits are the model's. ``0 <= at <= L`` (L blocks; ``at = L``
    appends them after the last block), ``k >= 1``.

    Each inserted block is a twin of block at - 1 (block 0 when ``at = 0``), sharing its weights, with its kind
    (Gemma 3) and a forward that returns its input (B, T, d) itself; handed a KV cache it also runs the block
    it copies and drops the output, so its cache slot keeps the sequence's length. State map: s <= at -> s,
    s > at -> s + k."""
    blocks = editable_blocks(lm, "inserted_identity")
    n = len(blocks)
    at, k = whole(at, "at", "inserted_identity"), count(k, "inserted_identity")
    check_at(at, n, name=lm.info.name)
    template = max(at - 1, 0)
    slots = ([Slot(i) for i in range(at)] + [Slot(template, "identity")] * k + [Slot(i) for i in range(at, n)])
    return _planted(lm, slots, "identity", {"at": at, "k": k}, identity_map(at, k, n))


def duplicated_band(lm: LoadedModel, start: int, k: int) -> LoadedModel:
    """Blocks ``start..start+k-1`` run twice, the band after itself: the copy's blocks are ``blocks[:start+k]``,
    then twins of blocks start..start+k-1 (sharing their weights, each its own module and KV-cache slot), then
    ``blocks[start+k:]``. ``0 <= start``, ``start + k <= L``, ``k >= 1``. State map: s <= start + k -> s,
    s > start + k -> s + k."""
    blocks = editable_blocks(lm, "duplicated_band")
    n = len(blocks)
    start, k = whole(start, "start", "duplicated_band"), count(k, "duplicated_band")
    check_band("duplicated_band", start, k, n, name=lm.info.name)
    band = list(range(start, start + k))
    slots = [Slot(i) for i in [*range(start + k), *band, *range(start + k, n)]]
    return _planted(lm, slots, "duplicate", {"start": start, "k": k}, duplicate_map(start, k, n))


def removed_band(lm: LoadedModel, start: int, k: int) -> LoadedModel:
    """Blocks ``start..start+k-1`` dropped; at least one block must remain (``k < L``). ``0 <= start``,
    ``start + k <= L``. State map: s <= start -> s, start < s <= start + k -> None, s > start + k -> s - k."""
    blocks = editable_blocks(lm, "removed_band")
    n = len(blocks)
    start, k = whole(start, "start", "removed_band"), count(k, "removed_band")
    check_kept(k, n, name=lm.info.name)
    check_band("removed_band", start, k, n, name=lm.info.name)
    slots = [Slot(i) for i in range(n) if not start <= i < start + k]
    return _planted(lm, slots, "remove", {"start": start, "k": k}, remove_map(start, k, n))


def scaled_writes(lm: LoadedModel, start: int, scale: float) -> LoadedModel:
    """Every block b >= ``start`` writes ``scale`` times its residual write: for its input h (B, T, d) it
    returns ``h + scale * (block(h) - h)``. ``0 <= start <= L - 1``; ``scale`` finite and not 1 (0: the blocks
    from ``start`` on hand their input on). States 0..start are the model's. State map: s -> s."""
    blocks = editable_blocks(lm, "scaled_writes")
    n = len(blocks)
    start, scale = whole(start, "start", "scaled_writes"), check_scale(scale)
    check_start(start, n, name=lm.info.name)
    slots = [Slot(i, "scaled", scale) if i >= start else Slot(i) for i in range(n)]
    return _planted(lm, slots, "scale", {"start": start, "scale": scale}, scale_map(n))


def planted_concept(lm: LoadedModel, at: int, plus: str | int, minus: str | int, strength: float,
                    until: int | None = None) -> LoadedModel:
    """Block ``at``'s output gains ``strength * c_t * u`` at every position t (a rank-one write, :mod:`.concept`):
    u is the unit direction the unembedding reads for ``plus`` against ``minus`` (``W_U[plus] - W_U[minus]``,
    normalised), c_t is +1 where the last of the two marker tokens at or before t is ``plus``, -1 where it is
    ``minus``, 0 before either. ``until`` (a block after ``at``): blocks at+1..until run on their input without
    the write and block ``until`` drops it, so states at+1..until are the model's plus the write exactly and
    every later state, and the logits, are the model's. ``plus``/``minus``: a string of one token or a token id.
    ``0 <= at <= L - 1``. State map: s -> s."""
    blocks = editable_blocks(lm, "planted_concept")
    n = len(blocks)
    at = whole(at, "at", "planted_concept")
    until = None if until is None else whole(until, "until", "planted_concept")
    check_until(at, until, n, lm.info.name)
    strength = check_strength(strength)
    plus_id, minus_id = marker_id(lm, plus, "plus"), marker_id(lm, minus, "minus")
    if plus_id == minus_id:
        raise PlantError(f"planted_concept: plus and minus are the same token ({plus_id}); pass two different "
                         "marker tokens")
    direction = read_direction(lm, plus_id, minus_id)
    markers = Markers(plus_id, minus_id)

    def edit(model) -> None:
        embedding = model.get_input_embeddings()
        embedding.forward = ReadMarkers(embedding.forward, markers)
        edited = decoder_layers_of(model)
        for b in [at] if until is None else range(at, until + 1):
            role = "write" if b == at else "cancel" if b == until else "carry"
            edited[b].forward = ConceptWrite(edited[b].forward, markers, direction, strength, role)

    params = {"at": at, "plus": plus_id, "minus": minus_id, "strength": strength, "until": until}
    return _planted(lm, [Slot(i) for i in range(n)], "concept", params, scale_map(n), edit)


def _planted(lm: LoadedModel, slots: list[Slot], kind: str, params: dict, mapping: list, edit=None
             ) -> LoadedModel:
    """The copy of ``lm`` whose block list is ``slots`` (then ``edit(copy)``), checked to run every block once,
    with its info."""
    model = shared_copy(lm.model)
    as_tuple = blocks_return_tuples(model)  # asked of the copy before it is edited: the original is not run
    rebuild(model, slots, as_tuple)
    if edit is not None:
        edit(model)
    _check_runs(lm, model, len(slots))
    return LoadedModel(model=model, tokenizer=lm.tokenizer,
                       info=planted_info(lm.info, kind, params, mapping, len(slots)))


@torch.inference_mode()
def _check_runs(lm: LoadedModel, model, n_layers: int) -> None:
    """A two-token pass of the copy returns one hidden state per block plus the embeddings: the model's code runs
    the edited list, every block once. Hooks transformers adds to answer the pass are taken off again."""
    ids = torch.zeros((1, 2), dtype=torch.long, device=input_device(model))
    with hooks_left_as_found(model):
        states = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    if states is None or len(states) != n_layers + 1:
        got = "no" if states is None else len(states)
        raise unsupported(lm, f"its forward pass did not run the edited block list ({got} hidden states for "
                              f"{n_layers} blocks)")
