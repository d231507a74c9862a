"""Structural copies of a model that share every parameter and buffer tensor with it (no weight is copied).

    twin = shared_copy(model)                  # new modules, new config; the same tensors (data_ptr equal)
    memo = shared_memo(twin)                   # {id: object} of what a copy of one of twin's blocks must share
    block_twin = copy.deepcopy(block, memo=dict(memo))

``shared_copy`` is ``copy.deepcopy`` with every tensor of the model (parameters, buffers, tensors held as plain
attributes) in the memo, so the copy's modules hold the very same ``Parameter`` objects. The copy gets its own
config (its ``num_hidden_layers`` and ``layer_types`` can then be edited), and none of the original's forward
hooks: its hook tables start empty and transformers' mark that its output-capturing hooks are installed is taken
off, so transformers installs them on the copy's own modules the first time it is asked for hidden states.
"""

from __future__ import annotations

import copy
import itertools

import torch
from torch import nn
from transformers.configuration_utils import PreTrainedConfig

from ..models.describe import HOOK_TABLES, INSTALLED


def tensor_memo(model: nn.Module) -> dict[int, object]:
    """``{id(t): t}`` for every parameter, buffer and plain tensor attribute of ``model``'s modules."""
    memo: dict[int, object] = {}
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        memo[id(tensor)] = tensor
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, torch.Tensor):
                memo[id(value)] = value
    return memo


def shared_memo(model: nn.Module) -> dict[int, object]:
    """:func:`tensor_memo` plus every config object ``model``'s modules hold: a deep copy of one of its blocks
    with this memo shares the tensors and the model's config (Gemma 3's blocks and attention hold
    ``self.config``), and a planted concept's marker signs, and copies the modules."""
    memo = tensor_memo(model)
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, PreTrainedConfig):
                memo[id(value)] = value
        markers = getattr(module.__dict__.get("forward"), "markers", None)
        if markers is not None:  # a planted concept's signs: a twin of its block reads the same text's
            memo[id(markers)] = markers
    return memo


def shared_copy(model: nn.Module) -> nn.Module:
    """A structural copy of ``model`` (new module objects, its own config) sharing every tensor of ``model``,
    with no forward hooks; ``model`` is not changed."""
    twin = copy.deepcopy(model, memo=tensor_memo(model))
    for module in twin.modules():
        for table in HOOK_TABLES:
            hooks = getattr(module, table, None)
            if hooks:
                hooks.clear()
        module.__dict__.pop(INSTALLED, None)
    return twin
