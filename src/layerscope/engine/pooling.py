"""Pool a batch's token states into one vector per text, and score each text's NLL.

    mask = mean_mask(batch, bos_token_id, compat=None)       # (B, T) tokens that enter the mean
    vecs = pool(hidden, batch, mask, ("mean", "last"))       # {"mean": (B, d), "last": (B, d)}
    nll_sum, n_scored = token_nll(logits, batch)             # (B,), (B,)

Pad positions are selected away (``torch.where``), never multiplied by zero, so
whatever the model computes there (even NaN) cannot leak into a result.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .batching import Batch

POOLINGS = ("mean", "last", "first")
"""``mean``: average of the text's tokens without a leading BOS token (seed compat:
without position 0, whatever it is); ``last``: the last real token; ``first``: position 0."""


def mean_mask(batch: Batch, bos_token_id: int | None, compat: str | None = None) -> torch.Tensor:
    """(B, T) bool: the tokens a ``mean`` pooling averages.

    Default: every real token except a first token whose id is ``bos_token_id``.
    ``compat="seed"``: every real token except the first one, as the notebooks do.
    """
    mask = batch.attention_mask.bool().clone()
    rows = torch.arange(mask.shape[0], device=mask.device)
    drop = torch.ones_like(batch.first, dtype=torch.bool)
    if compat != "seed":
        first_ids = batch.input_ids[rows, batch.first]
        drop = first_ids == bos_token_id if bos_token_id is not None else torch.zeros_like(drop)
    mask[rows[drop], batch.first[drop]] = False
    return mask


def pool(hidden: torch.Tensor, batch: Batch, mask: torch.Tensor, poolings: Sequence[str]) -> dict[str, torch.Tensor]:
    """Pool one layer's ``hidden`` (B, T, d) into {pooling: (B, d) float32}."""
    hidden = hidden.float()
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    out = {}
    for name in poolings:
        if name == "mean":
            total = torch.where(mask[..., None], hidden, 0.0).sum(dim=1)
            out[name] = total / mask.sum(dim=1, keepdim=True)  # 0/0 = NaN for a text with no token left
        elif name == "last":
            out[name] = hidden[rows, batch.last]
        elif name == "first":
            out[name] = hidden[rows, batch.first]
        else:
            raise ValueError(f"unknown pooling {name!r}")
    return out


def token_nll(logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token NLL per text (float64) and how many tokens were scored.

    Token t is scored from the logits at t-1 when both are real tokens: for a text alone
    this is exactly what transformers' ``outputs.loss`` averages with ``labels=input_ids``.
    """
    real = batch.attention_mask.bool()
    scored = real[:, 1:] & real[:, :-1]
    logits = logits[:, :-1].float()  # no copy for a float32 model
    target = batch.input_ids[:, 1:, None]
    nll = torch.logsumexp(logits, dim=-1) - logits.gather(-1, target)[..., 0]  # (B, T-1)
    nll_sum = torch.where(scored, nll, 0.0).double().sum(dim=1)
    return nll_sum, scored.sum(dim=1)
