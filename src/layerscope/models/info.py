"""Facts about a loaded model that every result records (:func:`~.describe.describe` checks and fills them).

    info = describe(model, tokenizer, name="smollm2-135m", source=folder)    # from .describe
    info.n_layers, info.hidden_size, info.adds_bos, info.last_hidden_normed
    layers = decoder_layers(model)        # the nn.ModuleList of decoder blocks
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import ModelLoadError

_PROBE_TEXT = "Layer by layer, the model reads this short probe sentence."


@dataclass(frozen=True)
class ModelInfo:
    """What a result needs to know about the model that produced it."""

    name: str
    """The spec the model was loaded from (zoo name, folder, .gguf file or hub id)."""
    source: str
    """Where the weights came from: a folder path or a hub id."""
    revision: str | None
    architecture: str
    """The transformers class, e.g. ``LlamaForCausalLM``."""
    n_layers: int
    """Decoder layers; hidden states are numbered 0 (embeddings) to ``n_layers``."""
    hidden_size: int
    vocab_size: int
    bos_token_id: int | None
    adds_bos: bool
    """Whether the tokenizer puts ``bos_token_id`` in front of every text."""
    last_hidden_normed: bool
    """Whether hidden state ``n_layers`` is taken after the final norm (as transformers does)."""
    weights_hash: str
    """SHA-256 over parameter and buffer names, dtypes, shapes and bytes."""
    dtype: str
    device: str
    max_positions: int | None = None
    """The most tokens one text may have (``max_position_embeddings`` or ``n_positions``); ``None``: no limit."""
    plant: tuple[dict, ...] = ()
    """One record per plant applied (:mod:`layerscope.plant`), oldest first; ``()`` for a model as loaded. A
    record is plain JSON: ``{"kind": "identity", "at": 15, "k": 4, "base": ..., "base_weights_hash": ...,
    "n_layers_before": 30, "n_layers_after": 34, "state_map": [...]}``, where ``state_map[s]`` is this model's
    hidden state that corresponds to hidden state ``s`` of the model it was planted in (``None``: none does)."""

    def __post_init__(self):
        # read back from JSON (a cached entry's meta, a saved Activations), the records come as a list
        object.__setattr__(self, "plant", tuple(self.plant))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def text_config(model: nn.Module):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def max_positions(model: nn.Module) -> int | None:
    """The longest text the model was built for: ``max_position_embeddings``, ``n_positions`` (GPT-2) or
    ``max_seq_len``; ``None`` when the config names no limit."""
    config = text_config(model)
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The ``nn.ModuleList`` holding the model's decoder blocks, whatever the architecture."""
    n = text_config(model).num_hidden_layers
    for _, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == n:
            return module
    raise ModelLoadError(
        f"could not find the {n} decoder layers of {type(model).__name__}; "
        "layerscope supports decoder-only causal LMs from transformers"
    )


def tokenizer_adds_bos(tokenizer) -> bool:
    """True when the tokenizer prepends its BOS token id to a plain text."""
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    with_special = tokenizer(_PROBE_TEXT)["input_ids"]
    without = tokenizer(_PROBE_TEXT, add_special_tokens=False)["input_ids"]
    return bool(with_special) and with_special[0] == bos and without[:1] != [bos]


@torch.no_grad()
def last_hidden_is_normed(model: nn.Module, tokenizer) -> bool:
    """Compare the last decoder block's output with ``hidden_states[-1]`` on a probe text."""
    layers = decoder_layers(model)
    captured: list[torch.Tensor] = []

    def hook(_module, _inputs, output):
        captured.append(output[0] if isinstance(output, tuple) else output)

    handle = layers[-1].register_forward_hook(hook)
    try:
        ids = torch.tensor([probe_ids(model, tokenizer, _PROBE_TEXT)], device=input_device(model))
        out = model(input_ids=ids, output_hidden_states=True)
    finally:
        handle.remove()
    if len(out.hidden_states) != len(layers) + 1:
        raise ModelLoadError(
            f"{type(model).__name__} returned {len(out.hidden_states)} hidden states for "
            f"{len(layers)} layers; layerscope needs one per layer plus the embeddings"
        )
    last = out.hidden_states[-1]
    return not torch.equal(captured[-1].to(last.device), last)


def probe_ids(model: nn.Module, tokenizer, text: str) -> list[int]:
    """Token ids of a probe ``text``, cut to the model's maximum positions."""
    ids = list(tokenizer(text)["input_ids"])
    limit = max_positions(model)
    return ids[:limit] if limit else ids


def weights_hash(model: nn.Module) -> str:
    """SHA-256 of every parameter and persistent buffer (tied tensors counted once)."""
    h = hashlib.sha256()
    seen: set[tuple[int, int, int]] = set()
    for name, tensor in sorted(model.state_dict().items()):
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.numel())
        if key in seen:  # a tied weight, e.g. lm_head sharing the embedding matrix
            continue
        seen.add(key)
        h.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        flat = tensor.detach().reshape(-1).contiguous().cpu()
        h.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return h.hexdigest()


def input_device(model: nn.Module) -> torch.device:
    """The device input ids must be on (the embedding's device, also under device_map)."""
    return model.get_input_embeddings().weight.device
