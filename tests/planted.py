"""The plant tests' models and helpers: the tiny models with four blocks, one of them a Gemma 3 whose blocks
differ in kind (sliding and full attention, a window of 4 tokens, shorter than most texts).

    lm = model("gemma3-mixed")                 # cached: one LoadedModel per name
    logits, states = run(lm.model, batch_of(lm), states=True)
"""

from __future__ import annotations

import functools

import torch
from transformers import AutoModelForCausalLM

import tiny
from layerscope.engine.forward.batching import collate, pad_id
from layerscope.models import LoadedModel, decoder_layers
from layerscope.models.describe import hooks_left_as_found

N_LAYERS = 4
MIXED_KINDS = ["sliding_attention", "full_attention", "full_attention", "sliding_attention"]
MODELS = (*tiny.ARCHS, "gemma3-mixed")


@functools.cache
def model(name: str) -> LoadedModel:
    """A tiny LoadedModel of ``N_LAYERS`` blocks: one of ``tiny.ARCHS``, or ``"gemma3-mixed"`` (``MIXED_KINDS``)."""
    if name != "gemma3-mixed":
        return tiny.tiny_lm(name, n_layers=N_LAYERS)
    tok = tiny.tokenizer(False)
    config = tiny.config("gemma3", len(tok), N_LAYERS)
    config.layer_types = list(MIXED_KINDS)
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    return LoadedModel.wrap(m.eval(), tok, name="tiny-gemma3-mixed")


def batch_of(lm: LoadedModel, texts=None):
    """All of ``tiny.TEXTS`` (or ``texts``) in one right-padded batch."""
    ids = [lm.tokenizer(t)["input_ids"] for t in (texts or tiny.TEXTS)]
    return collate(ids, list(range(len(ids))), pad_id(lm.tokenizer))


@torch.no_grad()
def run(model, batch, states: bool = False):
    """``(logits at the real tokens (n_real, vocab), hidden states)`` of one pass without a KV cache; the states
    (each (B, T, d)) only when asked for. The hooks transformers adds to collect the states are taken off after,
    so a model's hooks stay as they were."""
    with hooks_left_as_found(model):
        out = model(**batch.model_inputs(), use_cache=False, output_hidden_states=states)
    return out.logits[batch.attention_mask.bool()], out.hidden_states


def fingerprint(lm: LoadedModel) -> dict:
    """What planting must leave as it was: the block objects, their instance forwards and hooks, each attention's
    layer_idx, the config's depth and layer kinds."""
    blocks = decoder_layers(lm.model)
    return {"blocks": [id(b) for b in blocks], "own_forward": [b for b in blocks if "forward" in b.__dict__],
            "hooks": [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in lm.model.modules()],
            "layer_idx": [m.layer_idx for m in lm.model.modules() if "layer_idx" in m.__dict__],
            "n": lm.model.config.num_hidden_layers, "types": getattr(lm.model.config, "layer_types", None),
            "modules": len(list(lm.model.modules()))}
