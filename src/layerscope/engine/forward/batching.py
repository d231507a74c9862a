"""Turn texts into length-sorted, padded batches.

    ids = tokenize(tokenizer, texts)               # one list of token ids per text
    for index in plan_batches(lengths, 16):        # longest texts first
        batch = collate([ids[i] for i in index], index, pad_id=0, side="right")
        model(**batch.model_inputs())
    budget = memory_budget(lm, kept_states=0)      # padded tokens per batch this device can take
    for start, stop in plan_ranges(sorted_lengths, todo, None, budget): ...   # runs of length-sorted rows

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

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        """The batch on ``device``; ``non_blocking``: without waiting for the device's queued work (CUDA)."""
        move = {k: getattr(self, k).to(device, non_blocking=non_blocking)
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

CPU_TOKEN_BUDGET = 768
"""Padded tokens per batch on a CPU. A batch whose activations outgrow the CPU's caches is slower per token:
on SmolLM2 with 2 threads, ``extract`` with batches of 2,048 tokens took 1.03-1.14x the time of batches of
768 (``benchmarks/extract_vs_seed.py``); 256-1,024 were within the runs' noise of each other."""

GPU_MEMORY_SHARE = 0.6
"""Share of the GPU's free memory (after the weights) that one batch may plan for; the rest is headroom for the
allocator and the parts of a forward pass the plan does not count (attention scores of an eager kernel)."""

MAX_TEXTS_PER_BATCH = 1024
"""Most texts in one planned batch, however short."""


def token_budget(vocab_size: int) -> int:
    """Padded tokens per batch that keep the logits within ``LOGITS_BUDGET_BYTES``."""
    return max(1, LOGITS_BUDGET_BYTES // (4 * vocab_size))


def bytes_per_token(config, dtype_bytes: int, kept_states: int) -> int:
    """Device memory one token of a batch needs during a forward pass, beyond the weights: its logits, one
    decoder block's working set (attention projections, the MLP's hidden units, residual copies), the pooled
    float32 copy of one state, and ``kept_states`` hidden states held until the pass ends."""
    d = int(config.hidden_size)
    inner = int(getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d)
    vocab = int(config.vocab_size)
    return dtype_bytes * (vocab + 6 * d + 3 * inner + kept_states * d) + 8 * d


def memory_budget(model, vocab_size: int, kept_states: int = 0) -> int:
    """Padded tokens per batch for ``model`` on its device: ``CPU_TOKEN_BUDGET`` on a CPU (at most
    ``LOGITS_BUDGET_BYTES`` of float32 logits); on CUDA, ``GPU_MEMORY_SHARE`` of the free memory divided by
    :func:`bytes_per_token`."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return min(CPU_TOKEN_BUDGET, token_budget(vocab_size))
    free, _total = torch.cuda.mem_get_info(device)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    per_token = bytes_per_token(config, next(model.parameters()).element_size(), kept_states)
    return max(1, int(free * GPU_MEMORY_SHARE) // per_token)


MIN_BATCH_TOKENS = 2048
"""Padded tokens below which a batch is never cut for the sake of more batches or less padding."""


def plan_ranges(lengths: np.ndarray, todo: np.ndarray, batch_size: int | None, max_tokens: int | None, *,
                min_batches: int = 1, max_padding: float | None = None) -> list[tuple[int, int]]:
    """Batches as ``(start, stop)`` runs of rows still ``todo``, for ``lengths`` sorted longest first.

    A batch holds at most ``batch_size`` texts (``None``: ``MAX_TEXTS_PER_BATCH``) and at most ``max_tokens``
    padded tokens (its first text is its longest), but always at least one text. Without a ``batch_size``, two
    more bounds apply to a batch of at least :data:`MIN_BATCH_TOKENS` padded tokens (the CUDA plan sets them):
    ``min_batches``, at most 1/``min_batches`` of the todo rows' tokens per batch, so that copies and writes of
    one batch can overlap the next; ``max_padding``, at most that many padded tokens per real one.
    """
    lengths, todo = np.asarray(lengths), np.asarray(todo, dtype=bool)
    cap = batch_size or MAX_TEXTS_PER_BATCH
    if batch_size is None and min_batches > 1:
        share = max(MIN_BATCH_TOKENS, -(-int(lengths[todo].sum()) // min_batches))
        max_tokens = min(max_tokens, share) if max_tokens else share
    if batch_size is not None:
        max_padding = None
    out, start = [], 0
    while start < len(todo):
        if not todo[start]:
            start += 1
            continue
        stop, longest, real = start + 1, int(lengths[start]), int(lengths[start])
        limit = min(cap, max(1, max_tokens // longest)) if max_tokens else cap
        while stop < len(todo) and todo[stop] and stop - start < limit:
            grown = (stop - start + 1) * longest
            if max_padding and grown > MIN_BATCH_TOKENS and grown > max_padding * (real + int(lengths[stop])):
                break
            real += int(lengths[stop])
            stop += 1
        out.append((start, stop))
        start = stop
    return out


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
    """Pad token id lists into one :class:`Batch` (host tensors); ``side`` is ``"right"`` or ``"left"``."""
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    width = int(lengths.max())
    start = width - lengths if side == "left" else np.zeros_like(lengths)
    columns = np.arange(width)
    real = (columns >= start[:, None]) & (columns < (start + lengths)[:, None])  # (B, T)
    input_ids = np.full((len(ids), width), pad_id, dtype=np.int64)
    input_ids[real] = np.fromiter((t for seq in ids for t in seq), dtype=np.int64, count=int(lengths.sum()))
    mask = real.astype(np.int64)
    position_ids = np.clip(mask.cumsum(axis=1) - 1, 0, None)
    return Batch(index=np.asarray(index), input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(mask),
                 position_ids=torch.from_numpy(position_ids), first=torch.from_numpy(start),
                 last=torch.from_numpy(start + lengths - 1))
