"""What a planted block does differently, as the ``forward`` of one block instance (the class is untouched).

    block.forward = PassOn(block.forward, as_tuple)    # hands its input (B, T, d) on unchanged
    block.forward = ScaledWrite(block.forward, 0.5)   # input + 0.5 * (block(input) - input)

Each wraps the forward the block had (``inner``: its class's forward bound to it, or an earlier behaviour), so
plants compose, and each is plain data that ``copy.deepcopy`` copies with its block: a bound method is rebound
to the copy, so a twin of a planted block runs itself, never the block it was copied from. A block keeps its
hooks, and transformers' output-capturing hook records what the behaviour returns as the block's hidden state.
"""

from __future__ import annotations

import torch


def hidden_in(args: tuple, kwargs: dict) -> torch.Tensor:
    """The hidden state (B, T, d) a decoder block is called with: its first argument."""
    return args[0] if args else kwargs["hidden_states"]


def handed_cache(args: tuple, kwargs: dict) -> bool:
    """Whether a block call carries a transformers KV cache (``past_key_values``, or GPT-2's positional one)."""
    from transformers.cache_utils import Cache

    return any(isinstance(x, Cache) for x in (*args, *kwargs.values()))


class PassOn:
    """An inserted identity block's forward: returns its input (B, T, d) itself, as a tensor or as ``(hidden,)``
    when the model's blocks return tuples. Handed a KV cache (generation), it also runs the block it wraps and
    drops its output, only so that its own cache slot grows with the sequence as every other slot does
    (transformers reads the cache's length, and the masks' sizes, from the first slots)."""

    def __init__(self, inner, as_tuple: bool):
        self.inner = inner
        self.as_tuple = as_tuple

    def __call__(self, *args, **kwargs):
        hidden = hidden_in(args, kwargs)
        if handed_cache(args, kwargs):
            self.inner(*args, **kwargs)  # fills this block's cache slot; what it writes is dropped
        return (hidden,) if self.as_tuple else hidden


class ScaledWrite:
    """A block whose residual write is scaled: ``h + scale * (inner(h) - h)`` for its input h (B, T, d); the rest
    of a tuple output (if any) is handed on as the block returned it."""

    def __init__(self, inner, scale: float):
        self.inner = inner
        self.scale = scale

    def __call__(self, *args, **kwargs):
        hidden = hidden_in(args, kwargs)
        out = self.inner(*args, **kwargs)
        written = out[0] if isinstance(out, tuple) else out
        scaled = hidden + self.scale * (written - hidden)
        return (scaled, *out[1:]) if isinstance(out, tuple) else scaled


BEHAVIOURS = (PassOn, ScaledWrite)
"""The instance forwards a plant sets; a block with any other instance forward is refused."""
