"""What a plant checks before it copies anything: that the model's block list can be edited, and that its
arguments plant something inside the model's depth. Each failure is one :class:`~layerscope.errors.PlantError`
that names the problem and the fix.

    blocks = editable_blocks(lm, "duplicated_band")     # the nn.ModuleList of L decoder blocks, or PlantError
    k = count(k, "duplicated_band")                      # a whole number >= 1
    check_band("duplicated_band", start, k, len(blocks), name=lm.info.name)
    check_at(at, len(blocks), name=lm.info.name)         # 0 <= at <= L
    scale = check_scale(scale)                           # finite, != 1, as a float
"""

from __future__ import annotations

import inspect
import math
import numbers
import operator

from torch import nn

from ..errors import ModelLoadError, PlantError, short
from ..models.info import decoder_layers, text_config
from ..models.load import LoadedModel
from .behaviours import BEHAVIOURS
from .concept import ConceptWrite

SUPPORTED = ("layerscope.plant edits decoder-only transformers causal LMs (Llama, SmolLM2, Gemma 3, GPT-2, "
             "GPT-NeoX/Pythia, OPT and the like): models whose block list layerscope.models.decoder_layers finds, "
             "whose blocks take the hidden state first and return it or a tuple starting with it")
"""The architectures the plants support, said in every error about a model they cannot edit."""

PER_LAYER_TYPES = "layer_types"
"""The one per-layer list of a config that a plant rewrites (Gemma 3's sliding and full attention layers)."""


def unsupported(lm: LoadedModel, why: str) -> PlantError:
    return PlantError(f"{lm.info.name} ({lm.info.architecture}) cannot be planted: {why}. {SUPPORTED}, so that a "
                      "copy with more, fewer or edited blocks computes what its block list says")


def editable_blocks(lm: LoadedModel, plant: str) -> nn.ModuleList:
    """The decoder blocks of ``lm`` (an ``nn.ModuleList`` of L blocks), after checking that a plant can edit
    them; ``PlantError`` naming why not and which architectures are supported."""
    if not isinstance(lm, LoadedModel):
        raise PlantError(f"{plant}: expected a LoadedModel (from layerscope.load_model or LoadedModel.wrap), got "
                         f"{type(lm).__name__}; load the model first")
    try:
        blocks = decoder_layers(lm.model)
    except ModelLoadError:
        raise unsupported(lm, "no nn.ModuleList of config.num_hidden_layers decoder blocks was found") from None
    config = text_config(lm.model)
    if getattr(config, "is_heterogeneous", False):
        raise unsupported(lm, "its config sets options per layer (per_layer_config), which a plant cannot renumber")
    for key, value in sorted(config.to_dict().items()):
        if "layer" in key and key != PER_LAYER_TYPES and isinstance(value, list | tuple) and value:
            raise unsupported(lm, f"its config lists per-layer settings in {key}, which a plant cannot renumber "
                                  f"(only {PER_LAYER_TYPES} is rewritten)")
    types = getattr(config, PER_LAYER_TYPES, None)
    if types is not None and len(types) != len(blocks):
        raise unsupported(lm, f"config.{PER_LAYER_TYPES} names {len(types)} layer kinds for {len(blocks)} blocks")
    for index, block in enumerate(blocks):
        own = block.__dict__.get("forward")
        if own is not None and not isinstance(own, (*BEHAVIOURS, ConceptWrite)):
            raise PlantError(f"{plant}: block {index} of {lm.info.name} runs a replaced forward (inside "
                             "`with intervened(...)`, or accelerate's device hooks); plant the model outside any "
                             "intervention, loaded on one device")
        if list(inspect.signature(type(block).forward).parameters)[:2] != ["self", "hidden_states"]:
            raise unsupported(lm, f"its blocks ({type(block).__name__}) do not take the hidden state first")
        if not any(_layer_index(m) is not None for m in block.modules()):
            raise unsupported(lm, f"its blocks ({type(block).__name__}) name no layer_idx, so a KV cache could "
                                  "not tell a block's copies apart")
    return blocks


def _layer_index(module: nn.Module) -> int | None:
    value = module.__dict__.get("layer_idx")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def whole(value, what: str, plant: str) -> int:
    """``value`` as an int; ``PlantError`` for a float, a bool or anything else that is not a whole number."""
    if isinstance(value, bool):
        raise PlantError(f"{plant}: {what} must be a whole number, got {value!r}; pass an int")
    try:
        return operator.index(value)
    except TypeError:
        raise PlantError(f"{plant}: {what} must be a whole number, got {short(value)}; pass an int") from None


def count(k, plant: str) -> int:
    """``k`` (how many blocks) as an int >= 1; ``PlantError`` otherwise."""
    k = whole(k, "k", plant)
    if k < 1:
        raise PlantError(f"{plant}: k={k} plants nothing; k is how many blocks it acts on, so pass k >= 1")
    return k


def check_at(at: int, n_layers: int, *, name: str) -> None:
    """``PlantError`` unless ``0 <= at <= n_layers`` (where :func:`~.plants.inserted_identity` may insert)."""
    if not 0 <= at <= n_layers:
        raise PlantError(f"inserted_identity: at={at} is outside the model's depth; {name} has {n_layers} decoder "
                         f"blocks, so at must be in 0..{n_layers} (0 inserts before block 0, {n_layers} after the "
                         "last block)")


def check_band(plant: str, start: int, k: int, n_layers: int, *, name: str) -> None:
    """``PlantError`` unless blocks ``start..start+k-1`` are blocks of a model of ``n_layers`` (0..n_layers-1)."""
    if k > n_layers:
        raise PlantError(f"{plant}: k={k} is more than the {n_layers} decoder blocks of {name}; pass k <= "
                         f"{n_layers}")
    if not 0 <= start <= n_layers - k:
        raise PlantError(f"{plant}: start={start}, k={k} names blocks {start}..{start + k - 1}, outside the "
                         f"model's depth; {name} has {n_layers} decoder blocks (0..{n_layers - 1}), so with k={k} "
                         f"start must be in 0..{n_layers - k}")


def check_kept(k: int, n_layers: int, *, name: str) -> None:
    """``PlantError`` when removing ``k`` blocks would leave none."""
    if k >= n_layers:
        raise PlantError(f"removed_band: removing k={k} of the {n_layers} decoder blocks of {name} leaves none; "
                         f"keep at least one block: k must be at most {n_layers - 1}")


def check_start(start: int, n_layers: int, *, name: str) -> None:
    """``PlantError`` unless ``start`` is a block of the model (0..n_layers-1), where scaled writes begin."""
    if not 0 <= start <= n_layers - 1:
        raise PlantError(f"scaled_writes: start={start} is outside the model's depth; {name} has {n_layers} decoder "
                         f"blocks, so start must be in 0..{n_layers - 1} (the first block whose write is scaled)")


def check_scale(scale) -> float:
    """``scale`` as a float; ``PlantError`` when it is not a finite number or is 1 (which plants nothing)."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise PlantError(f"scaled_writes: scale must be a number, got {short(scale)}; pass a float such as 0.5")
    scale = float(scale)
    if not math.isfinite(scale):
        raise PlantError(f"scaled_writes: scale={scale} is not a finite number; pass a finite scale (0.5 halves "
                         "every write, 0 makes the blocks hand their input on)")
    if scale == 1.0:
        raise PlantError("scaled_writes: scale=1 leaves every write as it is, so it plants nothing; pass a scale "
                         "other than 1 (0.5 halves every write, 2 doubles it)")
    return scale
