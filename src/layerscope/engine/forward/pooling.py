"""Pool a batch's token states into one vector per text, and score each text's NLL.

    mask = mean_mask(batch, bos_token_id, compat=None)       # (B, T) tokens that enter the mean
    vecs = pool(hidden, batch, mask, ("mean", "last"))       # {"mean": (B, d), "last": (B, d)}
    masks = pooling_masks(batch, bos_token_id, None, massive)  # every mean-type pooling's (B, T) mask
    vecs = pool(hidden, batch, masks, ALL_POOLINGS)
    pooler = Pooler(batch, masks, ALL_POOLINGS)                  # once per batch, then per layer:
    pooler(hidden, {p: packed[i, layer] for i, p in ...})     # each (B, d) float32 output written in place
    nll_sum, n_scored = token_nll(logits, batch)             # (B,), (B,)

Pad positions are selected away (``torch.where``), never multiplied by zero, so
whatever the model computes there (even NaN) cannot leak into a result.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ...modes import NOTEBOOKS
from .batching import Batch

POOLINGS = ("mean", "last", "first")
"""``mean``: average of the text's tokens without a leading BOS token (notebooks mode:
without position 0, whatever it is); ``last``: the last real token; ``first``: position 0."""

CHECK_POOLINGS = ("mean_no_pos0", "mean_no_massive")
"""Sensitivity views of ``mean``, computed by default. ``mean_no_pos0``: every real token except position 0
(always, BOS or not: the attention sink sits there). ``mean_no_massive``: the ``mean`` tokens (by the compat
rule) without those flagged as massive activations at any decoder block output (see
:mod:`layerscope.engine.forward.massive`); a text left with no token falls back to its ``mean_no_pos0`` tokens."""

ALL_POOLINGS = POOLINGS + CHECK_POOLINGS
"""What :func:`layerscope.extract` computes unless told otherwise."""

MEAN_POOLINGS = ("mean", *CHECK_POOLINGS)
"""The poolings that average a masked set of tokens."""


def mean_mask(batch: Batch, bos_token_id: int | None, compat: str | None = None) -> torch.Tensor:
    """(B, T) bool: the tokens a ``mean`` pooling averages.

    Default: every real token except a first token whose id is ``bos_token_id``.
    ``compat="notebooks"``: every real token except the first one, as the notebooks do.
    """
    mask = batch.attention_mask.bool().clone()
    rows = torch.arange(mask.shape[0], device=mask.device)
    if compat == NOTEBOOKS:
        drop = torch.ones_like(batch.first, dtype=torch.bool)
    elif bos_token_id is None:
        return mask
    else:
        drop = batch.input_ids[rows, batch.first] == bos_token_id
    mask[rows, batch.first] &= ~drop  # no boolean indexing: its size would need a host sync
    return mask


def no_pos0_mask(batch: Batch) -> torch.Tensor:
    """(B, T) bool: every real token except each text's first (position 0)."""
    mask = batch.attention_mask.bool().clone()
    mask[torch.arange(mask.shape[0], device=mask.device), batch.first] = False
    return mask


def pooling_masks(batch: Batch, bos_token_id: int | None, compat: str | None = None,
                  massive: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """``masks = pooling_masks(batch, bos_id, compat, massive)``: {pooling: (B, T) bool} for every pooling in
    :data:`MEAN_POOLINGS`; ``mean_no_massive`` only when ``massive`` (B, T) bool (True: a massive-activation
    token, e.g. from :func:`~layerscope.engine.forward.massive.block_massive`) is given. A text whose ``mean`` tokens
    are all massive gets its ``mean_no_pos0`` tokens instead."""
    masks = {"mean": mean_mask(batch, bos_token_id, compat), "mean_no_pos0": no_pos0_mask(batch)}
    if massive is not None:
        keep = masks["mean"] & ~massive.to(masks["mean"].device)
        left_empty = ~keep.any(dim=1, keepdim=True)
        masks["mean_no_massive"] = torch.where(left_empty, masks["mean_no_pos0"], keep)
    return masks


def pool(hidden: torch.Tensor, batch: Batch, masks: torch.Tensor | dict[str, torch.Tensor],
         poolings: Sequence[str]) -> dict[str, torch.Tensor]:
    """Pool ``hidden`` (..., B, T, d), one layer's states or a stack of layers (G, B, T, d), into {pooling:
    (..., B, d) float32}. ``masks``: the (B, T) ``mean`` mask, or {pooling: mask} for every mean-type pooling
    asked for (from :func:`pooling_masks`).

    The mean-type poolings are one batched product (B, P, T) x (B, T, d) of 0/1 weights with the states,
    accumulated in float32 (:func:`weighted_sums`: no float32 copy of 16-bit states on CUDA). A value outside a
    text's mask must not reach its mean, not even as 0 x inf = NaN, so the product reads the states with every
    token whose values do not sum to a finite number set to 0, and a mean that counts such a token is NaN: the
    same numbers as summing the selected tokens, with no host sync (no data-dependent branch). (A token of finite
    values whose sum overflows float32, beyond 1e34 per value, counts as non-finite.)"""
    masks = masks if isinstance(masks, dict) else {"mean": masks}
    _check_poolings(masks, poolings)
    means = [name for name in poolings if name in MEAN_POOLINGS]
    rows = torch.arange(hidden.shape[-3], device=hidden.device)
    out = {}
    if means:
        bad = ~torch.isfinite(hidden.sum(dim=-1, dtype=torch.float32))[..., None]  # (..., B, T, 1)
        chosen = torch.stack([masks[name] for name in means], dim=1)  # (B, P, T) bool
        counts = chosen.sum(dim=2, keepdim=True)  # (B, P, 1)
        if free_to_check(bad) and not bool(bad.any()):  # a check that costs no wait: every token is finite
            totals = weighted_sums(chosen, hidden)  # so the states are read as they are, with no cleaned copy
        else:
            clean = torch.where(bad, 0.0, hidden)  # a new tensor in the model's dtype: its own is never changed
            totals = weighted_sums(chosen, clean)  # (..., B, P, d) float32
            broken = torch.matmul(chosen.float(), bad.float())  # (..., B, P, 1): non-finite tokens each mean counts
            totals = torch.where(broken > 0, torch.nan, totals)
        for i, name in enumerate(means):
            out[name] = totals[..., i, :] / counts[:, i]  # 0/0 = NaN for a text with no token left
    for name in poolings:
        if name == "last":
            out[name] = hidden[..., rows, batch.last, :].float()
        elif name == "first":
            out[name] = hidden[..., rows, batch.first, :].float()
    return {name: out[name] for name in poolings}


class Pooler:
    """``pooler = Pooler(batch, masks, poolings)`` once per batch, then ``pooler(hidden, out)`` per layer: writes
    each pooling of ``hidden`` (B, T, d) into ``out[p]`` ((B, d) float32, e.g. a slice of a packed buffer), the
    numbers :func:`pool` gives. ``masks`` as for :func:`pool`.

    The masks' weights, counts and the gather positions are made once per batch. On a CPU, float32 states that sum
    to a finite number (so every token is finite) are pooled straight into ``out``: one ``bmm`` per mean-type
    pooling (a pooling's numbers do not depend on which others are asked for), divided in place, and one
    ``index_select`` per gathered one; a few ops per layer instead of a few dozen. Anything else goes through
    :func:`pool` and is copied into ``out``."""

    def __init__(self, batch: Batch, masks: torch.Tensor | dict[str, torch.Tensor], poolings: Sequence[str]):
        self.batch, self.poolings = batch, tuple(poolings)
        self.masks = masks if isinstance(masks, dict) else {"mean": masks}
        _check_poolings(self.masks, self.poolings)
        device = batch.attention_mask.device
        B, T = batch.attention_mask.shape
        means = [p for p in self.poolings if p in MEAN_POOLINGS]
        self.weights = {p: self.masks[p][:, None, :].float() for p in means}  # (B, 1, T) 0/1
        self.counts = {p: self.masks[p].sum(dim=1).float()[:, None, None] for p in means}  # (B, 1, 1), exact
        starts = torch.arange(B, device=device) * T
        self.rows = {p: starts + getattr(batch, p) for p in self.poolings if p in ("last", "first")}  # (B,) of B*T

    def __call__(self, hidden: torch.Tensor, out: dict[str, torch.Tensor], finite: bool | None = None) -> bool:
        """Pool ``hidden`` into ``out``; returns whether the states took the short path (float32 on a CPU, summing
        to a finite number). ``finite``: that answer for these same values from an earlier call (another Pooler
        of the same state), so the whole state is not summed again; None: check here."""
        B, T, d = hidden.shape
        short = free_to_check(hidden) and hidden.dtype == torch.float32
        if not (short and (finite if finite is not None else bool(hidden.sum().isfinite()))):
            for name, vector in pool(hidden, self.batch, self.masks, self.poolings).items():
                out[name].copy_(vector)
            return False
        for name in self.poolings:
            if name in self.weights:
                torch.bmm(self.weights[name], hidden, out=out[name].view(B, 1, d)).div_(self.counts[name])
            else:
                torch.index_select(hidden.reshape(B * T, d), 0, self.rows[name], out=out[name])
        return True


def _check_poolings(masks: dict[str, torch.Tensor], poolings: Sequence[str]) -> None:
    for name in poolings:
        if name in MEAN_POOLINGS and masks.get(name) is None:
            raise ValueError(f"pooling {name!r} needs its mask: build masks with pooling_masks(..., massive=)")
        if name not in MEAN_POOLINGS and name not in ("last", "first"):
            raise ValueError(f"unknown pooling {name!r}")


def free_to_check(t: torch.Tensor) -> bool:
    """Whether reading ``t`` on the host makes it wait for nothing (``t`` is on the CPU): the shortcuts that look
    at the data before choosing a path take them only then, and a GPU pass never syncs for them."""
    return t.device.type == "cpu"


def weighted_sums(weights: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """(..., B, P, d) float32: ``weights`` (B, P, T) (0/1, any dtype) times ``states`` (..., B, T, d), accumulated
    in float32. 16-bit states on CUDA go straight into a float32-accumulating ``bmm`` (``out_dtype``); elsewhere
    the states are read as float32 (no copy for a float32 model)."""
    *lead, B, T, d = states.shape
    P = weights.shape[1]
    flat = states.reshape(-1, T, d)
    w = weights.expand(*lead, B, P, T).reshape(-1, P, T)
    if flat.is_cuda and flat.dtype in (torch.bfloat16, torch.float16) and _bmm_out_dtype():
        out = torch.bmm(w.to(flat.dtype), flat, out_dtype=torch.float32)
    else:
        out = torch.bmm(w.float(), flat.float())
    return out.view(*lead, B, P, d)


@functools.cache
def _bmm_out_dtype() -> bool:
    """Whether this torch has the float32-accumulating 16-bit ``bmm`` on CUDA (``torch.bmm(..., out_dtype=)``)."""
    try:
        x = torch.zeros(1, 1, 1, dtype=torch.bfloat16, device="cuda")
        return torch.bmm(x, x, out_dtype=torch.float32).dtype == torch.float32
    except (TypeError, RuntimeError, NotImplementedError):
        return False


def scored_targets(batch: Batch, start: torch.Tensor | None = None) -> torch.Tensor:
    """``scored = scored_targets(batch, start)``: (B, T-1) bool on the batch's device, True at column t when the
    token at t + 1 is scored from the logits at t: both are real tokens and, with ``start`` (B,) int, the target
    sits at position >= ``start[b]`` counted from the text's first real token (None: every target, from 1)."""
    real = batch.attention_mask.bool()
    scored = real[:, 1:] & real[:, :-1]
    if start is not None:  # the target of column j is at column j + 1: position j + 1 - first
        target = torch.arange(1, real.shape[1], device=real.device)[None] - batch.first.to(real.device)[:, None]
        scored &= target >= start.to(real.device)[:, None]
    return scored


NLL_CHUNK_BYTES = 256 * 2**20
"""Most memory the float32 logits of one NLL chunk may take (rows x length x vocab x 4 bytes)."""


def token_nll(logits: torch.Tensor, batch: Batch, chunk_bytes: int = NLL_CHUNK_BYTES, *,
              start: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token NLL per text (float64) and how many tokens were scored.

    Token t is scored from the logits at t-1 when both are real tokens: for a text alone
    this is exactly what transformers' ``outputs.loss`` averages with ``labels=input_ids``.
    ``logits`` (B, T, vocab) in any dtype are taken a few rows at a time in float32 (a fused
    cross-entropy), so no float32 copy of the whole batch's logits is ever made (at most
    ``chunk_bytes`` of it at once; none at all for a float32 model). ``start`` (B,) int: score only
    the tokens at positions >= ``start[b]``, counted from each text's first real token (None: from 1, every one).
    """
    scored = scored_targets(batch, start)  # (B, T-1)
    B, T, V = logits.shape
    targets = torch.full((B, T), -100, dtype=torch.long, device=logits.device)  # -100: not scored
    targets[:, :-1] = torch.where(scored, batch.input_ids[:, 1:], -100)
    rows = max(1, chunk_bytes // max(1, T * V * 4))
    nll = torch.empty((B, T), dtype=torch.float32, device=logits.device)
    for r in range(0, B, rows):
        chunk = logits[r : r + rows].float().reshape(-1, V)  # a view for a float32 model
        nll[r : r + rows] = F.cross_entropy(chunk, targets[r : r + rows].reshape(-1), reduction="none",
                                            ignore_index=-100).view(-1, T)
    nll_sum = nll[:, :-1].double().sum(dim=1)  # unscored tokens are 0
    return nll_sum, scored.sum(dim=1)
