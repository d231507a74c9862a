"""A loaded model's :class:`~.info.ModelInfo`, after the checks that it is a decoder-only causal LM.

    info = describe(model, tokenizer, name="smollm2-135m", source=folder)
    info.n_layers, info.hidden_size, info.adds_bos, info.last_hidden_normed

The checks run the model with ``output_hidden_states=True``, and transformers answers the first such call by
leaving an output-capturing forward hook on every decoder block and attention module (about 60 on SmolLM2),
called on every later forward pass. :func:`hooks_left_as_found` takes off what the checks added, so the model
``load_model`` returns runs a plain forward as a plain transformers load of the same weights does; transformers
puts them back on the next call that asks for hidden states.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
    with hooks_left_as_found(model):
        check_causal(model, tokenizer, name)
        normed = last_hidden_is_normed(model, tokenizer)
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
        last_hidden_normed=normed,
        weights_hash=weights_hash(model),
        dtype=str(dtypes.pop()).removeprefix("torch.") if len(dtypes) == 1 else "mixed",
        device=str(input_device(model)),
        max_positions=max_positions(model),
    )


HOOK_TABLES = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
               "_forward_pre_hooks_with_kwargs")
INSTALLED = "_output_capturing_hooks_installed"
"""transformers' mark on a model whose output-capturing hooks are on (``transformers.utils.output_capturing``)."""


@contextlib.contextmanager
def hooks_left_as_found(model: nn.Module) -> Iterator[None]:
    """``with hooks_left_as_found(model): model(..., output_hidden_states=True)``: every forward hook added to a
    module of ``model`` inside the block is removed after it, and transformers' mark that its output-capturing hooks
    are installed is put back as it was (so it installs them again when next asked)."""
    modules = list(model.modules())
    before = [{table: set(getattr(m, table, {})) for table in HOOK_TABLES} for m in modules]
    marks = [(m, m.__dict__.get(INSTALLED, None)) for m in modules]
    try:
        yield
    finally:
        for module, had in zip(modules, before, strict=True):
            for table, keys in had.items():
                hooks = getattr(module, table, None)
                for key in [k for k in (hooks or {}) if k not in keys]:
                    del hooks[key]
        for module, mark in marks:
            if mark is None:
                module.__dict__.pop(INSTALLED, None)
            else:
                module.__dict__[INSTALLED] = mark
