"""A loaded model's :class:`~.info.ModelInfo`, after the checks that it is a decoder-only causal LM.

    info = describe(model, tokenizer, name="smollm2-135m", source=folder)
    info.n_layers, info.hidden_size, info.adds_bos, info.last_hidden_normed
"""

from __future__ import annotations

from torch import nn

from .checks import check_causal, check_decoder_config
from .info import (
    ModelInfo,
    decoder_layers,
    input_device,
    last_hidden_is_normed,
    max_positions,
    text_config,
    tokenizer_adds_bos,
    weights_hash,
)


def describe(model: nn.Module, tokenizer, *, name: str, source: str, revision: str | None = None) -> ModelInfo:
    """The facts about ``model``; ``ModelLoadError`` if it is not a decoder-only causal LM."""
    check_decoder_config(model, name)
    check_causal(model, tokenizer, name)
    config = text_config(model)
    dtypes = {p.dtype for p in model.parameters()}
    return ModelInfo(
        name=name,
        source=source,
        revision=revision,
        architecture=type(model).__name__,
        n_layers=len(decoder_layers(model)),
        hidden_size=int(config.hidden_size),
        vocab_size=int(model.get_input_embeddings().weight.shape[0]),
        bos_token_id=tokenizer.bos_token_id,
        adds_bos=tokenizer_adds_bos(tokenizer),
        last_hidden_normed=last_hidden_is_normed(model, tokenizer),
        weights_hash=weights_hash(model),
        dtype=str(dtypes.pop()).removeprefix("torch.") if len(dtypes) == 1 else "mixed",
        device=str(input_device(model)),
        max_positions=max_positions(model),
    )
