"""Where one atlas batch's tokens sit, worked out on the host from the token ids, and the one copy back.

    host = collate(batch_ids, index, pad, side="right")
    layout = Layout.build(host, batch_ids, bos_token_id, delimiters).to(device)   # host-side indices, moved once
    layout.real, layout.kept_base, layout.pool    # (B, T) bool each
    layout.flat, layout.text_row                  # (N,) each real token's flat index b * T + t, and its row b
    arrays = to_host({"norm": t1, "pooled": t2})  # {name: np.ndarray}: every tensor in one device-to-host copy

Everything whose size depends on the data (which tokens are real, which positions are scored) is found here, from
the lengths of the id lists, before the batch goes to the device, so the device work never waits on a
``nonzero`` or a boolean-mask index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch

from ..forward.batching import Batch
from ..forward.pooling import mean_mask, no_pos0_mask
from ..lenses.logit_rows import Scored, scored_tokens
from .massive_profile import position_class


@dataclass(frozen=True)
class Layout:
    """One right-padded batch's token positions (``B`` texts, ``T`` columns, ``N`` real tokens)."""

    real: torch.Tensor
    """(B, T) bool: the real tokens."""
    kept_base: torch.Tensor
    """(B, T) bool: every real token but position 0 (the massive tokens are taken out on the device)."""
    pool: torch.Tensor
    """(B, T) bool: the tokens mean pooling averages (a BOS first token left out; a BOS-only text: itself)."""
    classes: torch.Tensor
    """(B, T) int8 position classes (:func:`.massive_profile.position_class`)."""
    last: torch.Tensor
    """(B,) column of each text's last token."""
    rows: torch.Tensor
    """(B,) 0 .. B-1."""
    flat: torch.Tensor
    """(N,) flat index ``b * T + t`` of each real token, row-major."""
    text_row: torch.Tensor
    """(N,) the batch row ``b`` of each real token."""
    scored: Scored
    """The positions the lens scores (:func:`.lens_rows.scored_tokens`)."""

    @staticmethod
    def build(host: Batch, ids: Sequence[Sequence[int]], bos_token_id: int | None,
              delimiters: frozenset[int]) -> Layout:
        """The layout of ``host`` (:func:`~.batching.collate` of ``ids`` with ``side="right"``, on the CPU)."""
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
        width = host.input_ids.shape[1]
        text_row = np.repeat(np.arange(len(ids)), lengths)
        column = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        real = host.attention_mask.bool()
        pool = mean_mask(host, bos_token_id)
        pool = torch.where(pool.any(dim=1, keepdim=True), pool, real)  # a BOS-only text: itself
        as_long = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
        return Layout(real=real, kept_base=no_pos0_mask(host), pool=pool, classes=position_class(host, delimiters),
                      last=as_long(lengths - 1), rows=as_long(np.arange(len(ids))),
                      flat=as_long(text_row * width + column), text_row=as_long(text_row),
                      scored=scored_tokens(ids, host.index))

    def to(self, device: torch.device | str) -> Layout:
        """The same layout on ``device`` (copies queued without waiting for the device)."""
        return Layout(**{f.name: getattr(self, f.name).to(device, non_blocking=True) for f in fields(self)})


NUMPY_DTYPES = {torch.float64: np.float64, torch.float32: np.float32, torch.int64: np.int64, torch.int32: np.int32,
                torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_}
"""The dtypes :func:`to_host` reads back."""


def to_host(tensors: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """``arrays = to_host({"a": t1, "b": t2})``: each tensor as a numpy array of its dtype and shape, all in one
    device-to-host copy (their bytes packed into one buffer on the device first, copied into pinned host memory
    from a GPU): one host sync for all of them."""
    names = list(tensors)
    parts = [tensors[name].detach().contiguous().reshape(-1).view(torch.uint8) for name in names]
    if not parts:
        return {}
    sizes = [part.numel() for part in parts]
    pads = [torch.zeros(-size % 8, dtype=torch.uint8, device=part.device) for size, part in zip(sizes, parts,
                                                                                               strict=True)]
    packed = torch.cat([piece for pair in zip(parts, pads, strict=True) for piece in pair])  # 8-byte aligned parts
    if packed.is_cuda:  # pinned memory: the copy runs at the link's speed (pageable memory: about 2 GB/s)
        packed = torch.empty(packed.shape, dtype=torch.uint8, pin_memory=True).copy_(packed)
    buffer = packed.cpu().numpy()
    out, start = {}, 0
    for name, size in zip(names, sizes, strict=True):
        t = tensors[name]
        out[name] = buffer[start : start + size].view(NUMPY_DTYPES[t.dtype]).reshape(tuple(t.shape))
        start += size + (-size % 8)
    return out
