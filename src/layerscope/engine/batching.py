"""Turn texts into length-sorted, padded batches.

    ids = tokenize(tokenizer, texts)               # one list of token ids per text
    for index in plan_batches(lengths, 16):        # longest texts first
        batch = collate([ids[i] for i in index], index, pad_id=0, side="right")
        model(**batch.model_inputs())

Padding is ours, not the tokenizer's: a tokenizer without a pad token works, and
``position_ids`` count real tokens only, so left padding gives the same positions
as no padding, for absolute and rotary position embeddings alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Batch:
    index: np.ndarray
    """(B,) positions of these texts in the caller's list."""
    input_ids: torch.Tensor
    """(B, T) token ids, padded with an arbitrary id where ``attention_mask`` is 0."""
    attention_mask: torch.Tensor
    """(B, T) 1 for real tokens, 0 for padding."""
    position_ids: torch.Tensor
    """(B, T) 0, 1, 2, ... over each text's real tokens."""
    first: torch.Tensor
    """(B,) column of each text's first real token."""
    last: torch.Tensor
    """(B,) column of each text's last real token."""

    def to(self, device: torch.device) -> Batch:
        move = {k: getattr(self, k).to(device)
                for k in ("input_ids", "attention_mask", "position_ids", "first", "last")}
        return Batch(index=self.index, **move)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "position_ids": self.position_ids}


def tokenize(tokenizer, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
    """Token ids per text, with the tokenizer's own special tokens (e.g. BOS), no padding."""
    kwargs = {"truncation": True, "max_length": max_length} if max_length else {}
    return [list(ids) for ids in tokenizer(list(texts), **kwargs)["input_ids"]]


def pad_id(tokenizer) -> int:
    """Any valid id will do: padded positions are masked out and never read."""
    return next((int(t) for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)


LOGITS_BUDGET_BYTES = 512 * 2**20
"""Most memory one batch's float32 logits (batch x longest x vocab) may take."""


def token_budget(vocab_size: int) -> int:
    """Padded tokens per batch that keep the logits within ``LOGITS_BUDGET_BYTES``."""
    return max(1, LOGITS_BUDGET_BYTES // (4 * vocab_size))


def plan_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[np.ndarray]:
    """Split text indices into batches of similar length, longest first (stable for ties).

    A batch holds at most ``batch_size`` texts and, when ``max_tokens`` is given, at most
    ``max_tokens`` padded tokens (texts x its longest text), but always at least one text.
    """
    lengths = np.asarray(lengths)
    order = np.argsort(-lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        size = batch_size
        if max_tokens is not None:
            size = min(size, max(1, max_tokens // int(lengths[order[start]])))
        batches.append(order[start : start + size])
        start += size
    return batches


def collate(ids: Sequence[Sequence[int]], index: np.ndarray, pad_id: int, side: str = "right") -> Batch:
    """Pad token id lists into one :class:`Batch`; ``side`` is ``"right"`` or ``"left"``."""
    lengths = torch.tensor([len(x) for x in ids])
    width = int(lengths.max())
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    start = width - lengths if side == "left" else torch.zeros_like(lengths)
    for row, (seq, s) in enumerate(zip(ids, start.tolist(), strict=False)):
        input_ids[row, s : s + len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, s : s + len(seq)] = 1
    position_ids = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return Batch(index=np.asarray(index), input_ids=input_ids, attention_mask=mask,
                 position_ids=position_ids, first=start, last=start + lengths - 1)
