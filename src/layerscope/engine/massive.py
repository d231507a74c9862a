"""Massive-activation tokens: tokens whose largest activation dwarfs everything else in their text.

    flags = massive_mask(hidden, real)                           # torch: (B, T) bool, one layer of a batch
    flags = massive_tokens(states.layers[5], states.text_index)  # numpy: (n_tokens,) bool, the same rule
    flags = block_massive(out.hidden_states, pre_norm, real)     # (B, T): massive at any decoder block output

The rule (ours; the idea is Sun et al. 2024, "Massive activations in large language models"): at one
layer, a token is a massive-activation token when its largest |activation| over the hidden dimensions
exceeds ``MASSIVE_RATIO`` times the median |activation| of its text's real tokens over all dimensions at
that layer. The median is taken per text over that text's real tokens only (padding never counts), so a
flag does not depend on which texts share a batch or how they are padded. It is the textbook median (the
mean of the two middle values for an even count, as ``np.median``).

Sun et al. look for activations about 1000x the median; 100x is lower on purpose: on SmolLM2 it also
catches the mid-sentence tokens (a space before a digit, the first "the") that reach 117-808x the median
in one dimension at layers 2-10, which a whole-dimension outlier detector (mean |x| > 100x median) misses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

MASSIVE_RATIO = 100.0
"""A token is massive at a layer when its largest |activation| exceeds this many times its text's median
|activation| at that layer (over the text's real tokens and every dimension)."""


def massive_mask(hidden: torch.Tensor, real: torch.Tensor, ratio: float = MASSIVE_RATIO) -> torch.Tensor:
    """``flags = massive_mask(hidden, batch.attention_mask.bool())``: (B, T) bool, True at the real tokens of
    one layer's ``hidden`` (B, T, d) that are massive by the module's rule; padding is never flagged and never
    enters a text's median (whatever it holds, NaN included).

    The median of an even count is the mean of the lower and upper middle values. ``nanmedian`` gives the
    lower one; the upper one is needed only for a text with a token between ``ratio`` x lower and ``ratio`` x
    an upper bound of it (a value with enough of the text's values at or below it), so it is computed for
    those texts alone: the flags are exactly those of the textbook median."""
    real = real.to(hidden.device).bool()
    mag = hidden.float().abs()  # a new tensor: filled in place below
    peak = mag.amax(dim=-1)  # (B, T)
    values = mag.masked_fill_(~real[..., None], torch.nan).flatten(1)  # (B, T * d), NaN at padding
    lower = values.nanmedian(dim=1).values  # (B,) the lower middle value
    n = real.sum(dim=1) * hidden.shape[-1]
    bound = lower * (1 + 2.0**-8)
    covers = (values <= bound[:, None]).sum(dim=1) >= (n - 1) // 2 + 2  # so the upper middle value <= bound
    between = real & (peak > ratio * lower[:, None]) & (peak <= ratio * bound[:, None])
    undecided = ~covers | between.any(dim=1)
    upper = lower.clone()
    rows = (undecided & (n % 2 == 0)).nonzero(as_tuple=True)[0]
    if len(rows):
        upper[rows] = -(-values[rows]).nanmedian(dim=1).values
    median = torch.where(undecided, (lower + upper) / 2, bound)  # a decided text: any value in [lower, bound]
    return real & (peak > ratio * median[:, None])


def massive_tokens(layer: np.ndarray, text_index: np.ndarray, ratio: float = MASSIVE_RATIO) -> np.ndarray:
    """``flags = massive_tokens(states.layers[l], states.text_index)``: (n_tokens,) bool, the same rule as
    :func:`massive_mask` for one layer's token states ``layer`` (n_tokens, d), the median taken per text
    (tokens sharing a ``text_index``)."""
    mag = np.abs(np.asarray(layer, dtype=np.float32))
    text_index = np.asarray(text_index)
    peak = mag.max(axis=1)
    flags = np.zeros(len(text_index), dtype=bool)
    for text in np.unique(text_index):
        rows = text_index == text
        flags[rows] = peak[rows] > ratio * np.median(mag[rows])
    return flags


def block_massive(hidden_states: Sequence[torch.Tensor], pre_norm: torch.Tensor, real: torch.Tensor,
                  ratio: float = MASSIVE_RATIO) -> torch.Tensor:
    """(B, T) bool: tokens massive at any decoder block output, i.e. ``hidden_states[1 .. n_layers - 1]``
    (transformers' tuple of n_layers + 1 states, each (B, T, d)) and the last block's output before the final
    norm, ``pre_norm`` (B, T, d). Never the embeddings (state 0) and never the state after the final norm."""
    real = real.bool()
    flags = massive_mask(pre_norm.to(real.device), real, ratio)
    for hidden in hidden_states[1:-1]:
        flags |= massive_mask(hidden.to(real.device), real, ratio)
    return flags


def massive_any_layer(layers: Iterable[np.ndarray], text_index: np.ndarray,
                      ratio: float = MASSIVE_RATIO) -> np.ndarray:
    """``flags = massive_any_layer(states.layers[1:-1], states.text_index)``: (n_tokens,) bool, True where a
    token is massive at any of ``layers`` (each (n_tokens, d), e.g. an (n, n_tokens, d) array)."""
    flags = np.zeros(len(text_index), dtype=bool)
    for layer in layers:
        flags |= massive_tokens(layer, text_index, ratio)
    return flags
