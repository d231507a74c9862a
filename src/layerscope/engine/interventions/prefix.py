"""Start a forward pass at decoder layer k: the layers below it hand over a residual stream kept earlier.

    with keep_outputs(blocks, {5}, lambda k, hidden: kept.__setitem__(k, hidden.clone())):
        model(**inputs)                                   # kept[5]: the stream entering layer 5 (layer 4's output)
    with stand_ins(blocks, 5, kept[5]):
        model(**inputs)                                   # layers 0..4 do not run; layer 5 reads kept[5]

The model runs as it is: its embeddings, position ids, rotary tables and attention masks are made by its own
code, and only the ``forward`` of the blocks below k is swapped (for the ``with`` only) for a stand-in: every
stand-in but the last hands its input on unchanged, the last returns the kept stream, shaped as the block's own
output (a tensor, or a 1-tuple for blocks that return tuples). Nothing depends on the architecture.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn


def hidden_of(output) -> torch.Tensor:
    """The hidden state (B, T, d) in a decoder block's output, whether the block returns a tensor or a tuple."""
    return output[0] if isinstance(output, tuple) else output


@contextlib.contextmanager
def keep_outputs(blocks: nn.ModuleList, layers: Iterable[int],
                 on_output: Callable[[int, torch.Tensor, bool], None]) -> Iterator[None]:
    """Call ``on_output(k, hidden, as_tuple)`` with the stream entering decoder layer k (the output of block
    k - 1, (B, T, d)) for each k >= 1 in ``layers``, as passes inside the ``with`` make it; ``as_tuple``: the
    block returned a tuple."""
    def hook(k):
        def call(_module, _args, output):
            on_output(k, hidden_of(output), isinstance(output, tuple))
        return call

    handles = [blocks[k - 1].register_forward_hook(hook(k)) for k in sorted(set(layers))]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def stand_ins(blocks: nn.ModuleList, start: int, hidden: torch.Tensor, as_tuple: bool = False) -> Iterator[None]:
    """Within the ``with``, decoder blocks 0..``start`` - 1 do not compute: block ``start`` receives ``hidden``
    ((B, T, d), on the model's device and in its dtype). ``as_tuple``: the blocks return tuples."""
    def shaped(x):
        return (x,) if as_tuple else x

    def pass_on(*args, **kwargs):
        return shaped(args[0] if args else kwargs["hidden_states"])

    def hand_over(*_args, **_kwargs):
        return shaped(hidden)

    saved = {k: blocks[k].__dict__["forward"] for k in range(start) if "forward" in blocks[k].__dict__}
    for k in range(start):  # (accelerate's device hooks and intervened() set an instance forward: kept aside)
        blocks[k].forward = hand_over if k == start - 1 else pass_on  # an instance attribute: hooks still run
    try:
        yield
    finally:
        for k in range(start):
            if k in saved:
                blocks[k].forward = saved[k]
            else:
                del blocks[k].forward
