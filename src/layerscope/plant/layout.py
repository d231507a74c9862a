"""The new block list of a planted copy, slot by slot, and the edits that make the copy run it.

    slots = [Slot(0), Slot(1), Slot(1), Slot(2, "identity"), Slot(3, "scaled", 0.5)]
    rebuild(copy, slots, as_tuple)     # copy: a shared_copy of the base model, edited in place

A :class:`Slot` names the base block it comes from (``source``, a position in the base's block list) and what
it does there. ``rebuild`` puts one module in each slot: the copy's own module of ``source`` the first time a
source is used by a running slot, else a twin (a deep copy sharing its weights and the copy's config), so that
every slot holds its own module object. Then every ``layer_idx`` inside slot i's module is set to i (each block
keeps its own KV-cache slot), ``config.layer_types`` lists each slot's source kind (Gemma 3's sliding and full
attention follow their blocks), and ``config.num_hidden_layers`` becomes the number of slots (transformers runs
``self.layers[: config.num_hidden_layers]``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from torch import nn

from ..models.info import decoder_layers, text_config
from .behaviours import PassOn, ScaledWrite
from .checks import PER_LAYER_TYPES
from .copying import shared_memo

ROLES = ("block", "identity", "scaled")


@dataclass(frozen=True)
class Slot:
    """One position of the new block list: base block ``source``, run as it is (``"block"``), as an inserted
    identity modelled on it (``"identity"``: a twin that hands its input on), or with its write scaled by
    ``scale`` (``"scaled"``)."""

    source: int
    role: str = "block"
    scale: float = 1.0

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"unknown slot role {self.role!r}; use one of {', '.join(ROLES)}")


def rebuild(model: nn.Module, slots: list[Slot], as_tuple: bool) -> nn.ModuleList:
    """Give ``model`` (a :func:`~.copying.shared_copy`) the block list ``slots`` describes; returns the new
    ``nn.ModuleList``. ``as_tuple``: whether the model's blocks return tuples (what an identity block returns)."""
    blocks = decoder_layers(model)
    base = list(blocks)
    config = text_config(model)
    types = getattr(config, PER_LAYER_TYPES, None)
    memo = shared_memo(model)
    used: set[int] = set()
    modules = []
    for slot in slots:
        if slot.role == "identity" or slot.source in used:
            module = copy.deepcopy(base[slot.source], memo=dict(memo))
        else:
            module = base[slot.source]
            used.add(slot.source)
        if slot.role == "identity":
            module.forward = PassOn(module.forward, as_tuple)
        elif slot.role == "scaled":
            module.forward = ScaledWrite(module.forward, slot.scale)
        modules.append(module)
    new = nn.ModuleList(modules)
    name = next(n for n, m in model.named_modules() if m is blocks)
    parent, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent), attr, new)
    for index, module in enumerate(new):
        renumber(module, index)
    if types is not None:
        setattr(config, PER_LAYER_TYPES, [types[slot.source] for slot in slots])
    config.num_hidden_layers = len(slots)
    return new


def renumber(block: nn.Module, index: int) -> None:
    """Set every ``layer_idx`` inside ``block`` (the block's own, its attention's) to ``index``, its position:
    the KV-cache slot its attention reads and writes."""
    for module in block.modules():
        value = module.__dict__.get("layer_idx")
        if isinstance(value, int) and not isinstance(value, bool):
            module.layer_idx = index
