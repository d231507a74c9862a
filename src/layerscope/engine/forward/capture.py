"""The residual stream, taken with hooks where each layer makes it, so no layer outlives its use.

    with capture_states(lm, layers=(0, 4, 30), on_state=seen) as capture:
        lm.model(**inputs, use_cache=False)     # seen(l, hidden) for l = 0, 4, 30 as each is made, then
                                                # seen("pre_norm", hidden): the last block's output
    capture.calls                               # how many states were handed over

    with pre_norm_capture(lm.model) as got:     # only the last block's output, for a pass that keeps its own
        out = lm.model(**inputs, output_hidden_states=True)
    last_capture(got, lm)                       # (B, T, d)

Hidden state ``l`` (0 = embeddings .. n_layers) is what transformers returns as ``hidden_states[l]``
with ``output_hidden_states=True``: for ``l < n_layers`` the input of decoder block ``l`` (a forward
pre-hook), for ``n_layers`` the input of the output head (after the final norm where the model has one;
a model without one hands over its last block's output). ``"pre_norm"`` is the last block's output
before the final norm. A state nobody asked for is never handed over, and ``on_state`` sees each
tensor while the forward pass runs: pool it there and keep only the pooled vectors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from ...errors import ExtractionError
from ...models.info import decoder_layers
from ...models.load import LoadedModel

PRE_NORM = "pre_norm"
"""The key :func:`capture_states` hands the last decoder block's output under."""


@dataclass
class Capture:
    calls: int = 0
    """States handed to ``on_state`` in this capture, over every forward pass run inside it."""
    pre_norm_seen: bool = False


@contextlib.contextmanager
def capture_states(lm: LoadedModel, layers: Sequence[int], on_state: Callable[[int | str, torch.Tensor], None],
                   pre_norm: bool = True) -> Iterator[Capture]:
    """Call ``on_state(l, hidden)`` with each hidden state ``l`` in ``layers`` ((B, T, d), as the model makes it),
    and ``on_state("pre_norm", hidden)`` with the last block's output when ``pre_norm``; hooks are removed on exit.
    ``ExtractionError`` if a forward pass inside did not run the last decoder block."""
    blocks = decoder_layers(lm.model)
    n_layers = len(blocks)
    capture = Capture()

    def hand_over(key, hidden):
        capture.calls += 1
        on_state(key, hidden)

    def before_block(layer):
        def hook(_module, args, kwargs):
            hand_over(layer, args[0] if args else kwargs["hidden_states"])
        return hook

    def after_last(_module, _args, output):
        hidden = output[0] if isinstance(output, (tuple, list)) else output
        capture.pre_norm_seen = True
        if pre_norm:
            hand_over(PRE_NORM, hidden)
        if n_layers in layers and not lm.info.last_hidden_normed:
            hand_over(n_layers, hidden)

    def before_head(_module, args):
        hand_over(n_layers, args[0])

    handles = [blocks[k].register_forward_pre_hook(before_block(k), with_kwargs=True)
               for k in sorted(set(layers)) if k < n_layers]
    handles.append(blocks[-1].register_forward_hook(after_last))
    if n_layers in layers and lm.info.last_hidden_normed:
        head = lm.model.get_output_embeddings()
        if head is None:
            raise ExtractionError(f"model {lm.info.name} has no output head (get_output_embeddings() is None); "
                                  "layerscope supports decoder-only causal LMs from transformers")
        handles.append(head.register_forward_pre_hook(before_head))
    try:
        yield capture
    finally:
        for handle in handles:
            handle.remove()
    if not capture.pre_norm_seen:
        raise ExtractionError(f"model {lm.info.name} ran without calling its last decoder layer, so its layers "
                              "cannot be captured; layerscope supports decoder-only causal LMs from transformers")


@contextlib.contextmanager
def pre_norm_capture(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """``with pre_norm_capture(model) as got: model(...)``; then ``last_capture(got, lm)`` is the last decoder
    block's output (B, T, d), the residual stream before the model's final norm. The hook is removed on exit."""
    got: list[torch.Tensor] = []

    def hook(_module, _inputs, output):
        got.append(output[0] if isinstance(output, (tuple, list)) else output)

    handle = decoder_layers(model)[-1].register_forward_hook(hook)
    try:
        yield got
    finally:
        handle.remove()


def last_capture(got: list[torch.Tensor], lm: LoadedModel) -> torch.Tensor:
    """The tensor :func:`pre_norm_capture` caught in the forward pass just run."""
    if not got:
        raise ExtractionError(f"model {lm.info.name} ran without calling its last decoder layer, so its output "
                              "before the final norm cannot be captured; layerscope supports decoder-only causal "
                              "LMs from transformers")
    return got[-1]
