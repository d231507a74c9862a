"""Next-token NLL from the output head applied to the scored tokens only: no (B, T, vocab) logits.

    with head_only_last(lm) as head:            # the model's own head sees one position per text
        lm.model(**batch.model_inputs(), use_cache=False)
    nll_sum, n_scored = head.nll(batch)         # (B,) float64, (B,): = token_nll of the full logits

A forward pass normally computes logits at every position, padding and each text's last token
included, and keeps all of them (B x T x vocab: 2 GB for 8,000 tokens of a 128k vocabulary in
bfloat16). Here a pre-hook hands the head only the last position; the real hidden states it was
given are kept, and the head runs on the scored positions, a few thousand tokens at a time,
each chunk's logits going straight into a fused cross-entropy. The logits get the transforms a
model applies after its head (Gemma's final soft-capping, Cohere's ``logit_scale``, Granite's
``logits_scaling``); :func:`head_matches` checks on a probe that this equals the model's own
logits, and a model where it does not (or whose head is not a module it calls) keeps the
full-logits path.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.nn.modules import module as nn_module

from ...models.load import LoadedModel
from .batching import Batch, collate
from .pooling import scored_targets, token_nll
from .scratch import Scratch

log = logging.getLogger(__name__)

CHUNK_BYTES = 256 * 2**20
"""Most memory one chunk's float32 logits (tokens x vocab x 4 bytes) may take."""


class HeadCapture:
    """What :func:`head_only_last` caught: the head's input, to score with :meth:`nll`."""

    def __init__(self, lm: LoadedModel):
        self.lm = lm
        self.hidden: torch.Tensor | None = None
        """(B, T, d) the head's input in the last forward pass (after the final norm)."""

    def nll(self, batch: Batch, chunk_bytes: int = CHUNK_BYTES, host: Batch | None = None,
            start: torch.Tensor | None = None, scratch: Scratch | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``nll_sum, n_scored = capture.nll(batch, host=cpu_batch, start=first)``: summed next-token NLL per text
        (float64) and scored-token count, as :func:`~.pooling.token_nll` (``start`` (B,) int: only the targets at
        positions >= ``start[b]``, as there). ``host``: the same batch on the CPU, where the scored positions and
        counts are found without a device sync (``start`` then on the CPU too). ``scratch``
        (:class:`.scratch.Scratch`): the logits are made in its buffer and turned into log-probabilities in place
        (the same numbers as ``F.cross_entropy``, without two fresh tokens x vocabulary tensors a batch)."""
        hidden = self.hidden
        device = hidden.device
        if host is not None:  # nonzero on the device would wait for it: find the positions on the host
            scored = scored_targets(host, start)  # (B, T-1): position t predicts t + 1
            rows, cols = scored.nonzero(as_tuple=True)
            rows, cols, count = (t.to(device, non_blocking=True) for t in (rows, cols, scored.sum(dim=1)))
        else:
            scored = scored_targets(batch, start).to(device)
            rows, cols = scored.nonzero(as_tuple=True)
            count = scored.sum(dim=1)
        targets = batch.input_ids.to(device)[rows, cols + 1]
        head = self.lm.model.get_output_embeddings()
        vocab = head.weight.shape[0]
        step = max(1, chunk_bytes // (4 * vocab))
        nll = torch.empty(len(rows), dtype=torch.float32, device=device)
        for s in range(0, len(rows), step):
            chosen = hidden[rows[s : s + step], cols[s : s + step]]  # (n, d)
            if scratch is None:
                logits = transform(self.lm, head(chosen)).float()
                nll[s : s + step] = F.cross_entropy(logits, targets[s : s + step], reduction="none")
            else:
                logits = transform(self.lm, _head_into(head, chosen, scratch)).float()  # (n, vocab), ours
                torch.log_softmax(logits, dim=1, out=logits)  # in place: each row is read before it is written
                nll[s : s + step] = -logits.gather(1, targets[s : s + step, None])[:, 0]
        nll_sum = torch.zeros(len(scored), dtype=torch.float64, device=device)
        nll_sum.index_add_(0, rows, nll.double())
        return nll_sum, count


def _head_into(head: torch.nn.Module, x: torch.Tensor, scratch: Scratch) -> torch.Tensor:
    """``head(x)`` (n, vocab), written into ``scratch``'s logits buffer when the head is a plain ``nn.Linear`` that
    nothing hooks (a hooked head is called, so its hooks see the call)."""
    if (type(head) is not torch.nn.Linear or head.weight.dtype != x.dtype or _hooked(head)
            or (torch.is_grad_enabled() and head.weight.requires_grad)):  # out= takes no autograd
        return head(x)
    out = scratch.tensor("logits", (x.shape[0], head.weight.shape[0]), x.dtype)
    if head.bias is None:
        return torch.mm(x, head.weight.t(), out=out)
    return torch.addmm(head.bias, x, head.weight.t(), out=out)


def _hooked(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` would run a hook: its own or a global one."""
    return bool(module._forward_hooks or module._forward_pre_hooks or nn_module._global_forward_hooks
                or nn_module._global_forward_pre_hooks)


def transform(lm: LoadedModel, logits: torch.Tensor) -> torch.Tensor:
    """The model's own steps after its head: scaling and final soft-capping, where its config has them."""
    config = lm.model.config
    scale = getattr(lm.model, "logit_scale", None) or getattr(config, "logit_scale", None)
    if isinstance(scale, (int, float)) and scale != 1:
        logits = logits * scale
    divide = getattr(config, "logits_scaling", None)
    if isinstance(divide, (int, float)) and divide != 1:
        logits = logits / divide
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


@contextlib.contextmanager
def head_only_last(lm: LoadedModel) -> Iterator[HeadCapture]:
    """Inside, the model's head sees only the last position of each text row (its logits are (B, 1, vocab));
    the full input is kept in the yielded capture's ``hidden``. The hook is removed on exit."""
    capture = HeadCapture(lm)

    def before_head(_module, args):
        capture.hidden = args[0]
        return (args[0][:, -1:],)

    handle = lm.model.get_output_embeddings().register_forward_pre_hook(before_head)
    try:
        yield capture
    finally:
        handle.remove()


_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""model -> whether its head path reproduces its logits (forgotten with the model)."""


@torch.inference_mode()
def head_matches(lm: LoadedModel, batch: Batch) -> bool:
    """``own_head = head_matches(lm, batch)``: whether scoring through :func:`head_only_last` gives the model's own
    NLL on the first text of ``batch`` (relative 1e-4), checked once per model object by two probe passes (run it
    before setting hooks that must not see them); False for a model whose head is not a module it calls. A probe
    whose own NLL is NaN or inf decides nothing: False this time, and the next call probes again."""
    key = lm.model
    if key not in _CHECKED:
        matches = _compare(lm, batch)
        if matches is None:  # a NaN or inf NLL proves nothing (the caller's own check names it): ask again later
            return False
        _CHECKED[key] = matches
        if not matches:
            log.warning("model %s: scoring from its output head does not reproduce its logits; computing the full "
                        "logits instead (more memory)", lm.info.name)
    return _CHECKED[key]


def _compare(lm: LoadedModel, batch: Batch) -> bool | None:
    """Whether the head path gives the model's own NLL on the first text of ``batch``; None (undecided) when the
    model's own NLL there is not finite."""
    head = lm.model.get_output_embeddings()
    if head is None or getattr(head, "weight", None) is None:
        return False
    ids = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    one = collate([ids], batch.index[:1], pad_id=0).to(batch.input_ids.device)
    want, _ = token_nll(lm.model(**one.model_inputs(), use_cache=False).logits, one)
    if not bool(torch.isfinite(want).all()):
        return None
    with head_only_last(lm) as capture:
        lm.model(**one.model_inputs(), use_cache=False)
    if capture.hidden is None:
        return False
    got, _ = capture.nll(one)
    return bool(torch.allclose(got.cpu(), want.cpu(), rtol=1e-4, atol=1e-6))
