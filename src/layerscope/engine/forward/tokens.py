"""Every token's hidden state at every layer, for analyses that need token-level geometry.

    states = token_states(lm, prompts)
    states.layers.shape         # (n_layers + 1, n_tokens, d) float32, tokens of all texts
    states.position             # (n_tokens,) position of each token in its text (0 = first)
    states.select(states.position > 0)   # e.g. without position 0 (BOS, or a BOS-less sink)
    states.pre_norm             # (n_tokens, d) the last block's output, before the model's final norm
    states.select(~states.massive())     # without the massive-activation tokens

Texts are run in length-sorted batches (padding never changes a number) and the real
tokens are gathered in text order. Unlike :func:`extract`, nothing is cached: the
states grow with every token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import ExtractionError
from ...models.info import input_device
from ...models.load import LoadedModel
from ...progress import steps
from .batching import MAX_TEXTS_PER_BATCH, collate, memory_budget, pad_id, plan_batches
from .capture import last_capture, pre_norm_capture
from .guards import check_finite, encode
from .massive import MASSIVE_RATIO, massive_any_layer


@dataclass(frozen=True)
class TokenStates:
    layers: np.ndarray
    """(n_layers + 1, n_tokens, d) float32."""
    text_index: np.ndarray
    """(n_tokens,) which text each token belongs to."""
    position: np.ndarray
    """(n_tokens,) position within its text, 0 for the first token."""
    token_id: np.ndarray
    """(n_tokens,) the token ids."""
    pre_norm: np.ndarray | None = None
    """(n_tokens, d) float32: the last decoder block's output before the model's final norm (``layers[-1]`` is
    after it, as transformers' last hidden state); ``None`` only for states built without it."""

    def select(self, keep: np.ndarray) -> TokenStates:
        """``states.select(states.position > 0)``: the tokens where ``keep`` (n_tokens,) bool is True."""
        return TokenStates(layers=self.layers[:, keep], text_index=self.text_index[keep],
                           position=self.position[keep], token_id=self.token_id[keep],
                           pre_norm=None if self.pre_norm is None else self.pre_norm[keep])

    def massive(self, ratio: float = MASSIVE_RATIO) -> np.ndarray:
        """``states.massive()``: (n_tokens,) bool, True for a token massive (:mod:`.massive`) at any decoder block
        output: ``layers[1 .. n_layers - 1]`` and ``pre_norm`` (never the embeddings, never after the final
        norm; without ``pre_norm``, the first ones only). Call it before any ``select``: each text's median is
        taken over its tokens that are left."""
        blocks = [*self.layers[1:-1], *([] if self.pre_norm is None else [self.pre_norm])]
        return massive_any_layer(blocks, self.text_index, ratio)


@torch.inference_mode()
def token_states(lm: LoadedModel, texts: Sequence[str], *, batch_size: int | None = None,
                 max_length: int | None = None,
                 progress: bool | None = None) -> TokenStates:
    """``ExtractionError`` before any forward pass for a text longer than the model's maximum positions
    (``max_length`` truncates), and after a batch whose hidden states hold NaN or inf, naming layer and text."""
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise ExtractionError("token_states needs a non-empty list of non-empty texts")
    ids = encode(lm, texts, max_length)
    lengths = np.array([len(x) for x in ids])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    layers = np.empty((lm.info.n_layers + 1, offsets[-1], lm.info.hidden_size), dtype=np.float32)
    pre_norm = np.empty((offsets[-1], lm.info.hidden_size), dtype=np.float32)
    device = input_device(lm.model)
    batches = plan_batches(lengths, batch_size or MAX_TEXTS_PER_BATCH,
                           memory_budget(lm.model, lm.info.vocab_size, lm.info.n_layers + 2))
    for index in steps(batches, f"token states {lm.info.name}", "batch") if progress is not False else batches:
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        with pre_norm_capture(lm.model) as captured:
            out = lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)
        real = batch.attention_mask.bool()
        states = [h.to(device) for h in out.hidden_states] + [last_capture(captured, lm).to(device)]
        bad = torch.stack([((~torch.isfinite(h)).any(dim=-1) & real).any(dim=1) for h in states], dim=1)
        bad_layers = bad[:, :-1].clone()
        bad_layers[:, -1] |= bad[:, -1]  # the pre-norm state is the last block's output, hidden state n_layers
        check_finite(lm, texts, index, bad_layers=bad_layers)
        for layer, hidden in enumerate(states):
            rows = hidden[real].float().cpu().numpy()  # row-major: text by text, in order
            target = layers[layer] if layer < len(layers) else pre_norm
            start = 0
            for i in index:
                target[offsets[i] : offsets[i + 1]] = rows[start : start + lengths[i]]
                start += lengths[i]
    text_index = np.repeat(np.arange(len(texts)), lengths)
    position = np.concatenate([np.arange(n) for n in lengths])
    token_id = np.concatenate([np.asarray(x) for x in ids])
    return TokenStates(layers=layers, text_index=text_index, position=position, token_id=token_id,
                       pre_norm=pre_norm)
