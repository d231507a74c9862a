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

from .massive_device import device_flags
from .pooling import free_to_check
from .scratch import Scratch

MASSIVE_RATIO = 100.0
"""A token is massive at a layer when its largest |activation| exceeds this many times its text's median
|activation| at that layer (over the text's real tokens and every dimension)."""


def massive_mask(hidden: torch.Tensor, real: torch.Tensor, ratio: float = MASSIVE_RATIO, *,
                 method: str | None = None, scratch: Scratch | None = None,
                 known: torch.Tensor | None = None) -> torch.Tensor:
    """``flags = massive_mask(hidden, batch.attention_mask.bool())``: (B, T) bool, True at the real tokens of
    one layer's ``hidden`` (B, T, d) that are massive by the module's rule; padding is never flagged and never
    enters a text's median (whatever it holds, NaN included). A text with a NaN among its real values has a NaN
    median (as ``np.median``), so none of its tokens is flagged at that layer. ``known`` (B, T) bool: tokens
    already flagged at another layer, whose flag here the caller does not need (it keeps the union over layers):
    they come back True, and the CPU's ``"bound"`` spends no count on them.

    Every text of the batch at once, with no loop over texts and no host sync off the CPU. ``method`` (``None``:
    chosen by device and dtype) says how each text's median is found; every method gives exactly the flags of the
    textbook median:

    - ``"bits16"`` (CUDA, bfloat16 or float16 states): a 16-bit float >= 0 read as an integer orders like its
      value, so one histogram of the 2^15 magnitude bit patterns per text gives each text's two middle values
      exactly (:func:`.massive_device._median_bits16`): no float32 copy of the states, no select;
    - ``"bound"`` (CPU): the median is at most twice the mean (:func:`_bound_flags`), so a token whose peak is
      above ``2 * ratio`` x its text's mean is massive, and one count of the values below the largest other peak's
      cut usually clears the rest; a text that count does not settle gets a binary search over its peaks, one
      count per step. Six passes over the states for most texts, the per-text steps on the host (a CPU does not
      pay for reading its own memory); ``scratch`` (:class:`.scratch.Scratch`): its buffers instead of fresh ones;
    - ``"bracket"``: one histogram of the float32 values' top 16 bits (:func:`.massive_device._bracket`) puts
      each text's two middle values between bin edges at most 2^-7 apart: a token whose peak is above ``ratio`` x
      the bracket's top is massive, one at or below ``ratio`` x its bottom is not, and only a text with a peak in
      between (or middle values outside the histogram's window) gets its exact median by ``nanmedian``;
    - ``"exact"``: every text's median by ``nanmedian``;
    - ``"count"`` (CUDA): no median at all unless it decides (:func:`.massive_device._count_flags`): a binary
      search over each text's sorted token peaks, each step one count of the values below the step's cut; no
      histogram, no atomics, no host sync, no float32 copy of the states.

    Every method but ``"bound"`` lives in :mod:`.massive_device`.
    """
    real = real.to(hidden.device).bool()
    if method is None:
        method = "bound" if free_to_check(hidden) else "count"
    if method == "bound":
        return _bound_flags(hidden, real, ratio, scratch, known)
    flags = device_flags(hidden, real, ratio, method)
    return flags if known is None else flags | (known.to(flags.device) & real)


SURE = 2.02
""":func:`_bound_flags` calls a token massive when its peak is above ``SURE * ratio`` x its text's mean |value|:
2 for the median's bound, 1 % for the rounding of the sums."""


def _bound_flags(hidden: torch.Tensor, real: torch.Tensor, ratio: float, scratch: Scratch | None = None,
                 known: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) bool: :func:`massive_mask`'s flags from a bound and a few counts, exactly (the CPU default).

    A token with peak ``p`` is flagged when ``p > fl(ratio * m)``, ``m`` its text's median. ``fl(ratio * v)`` does
    not decrease with ``v``, so ``c(p)``, how many of the text's ``n`` values ``v`` have ``fl(ratio * v) < p``,
    decides it: flagged when ``c(p) >= n // 2 + 1`` (the middle value, or both middle values, below), not flagged
    when ``c(p) < n / 2``, and for an even ``n`` with ``c(p) == n / 2`` the two middle values decide (the text's
    median is then found exactly). Whether a token is flagged grows with its peak, so:

    1. fewer than ``n / 2`` values exceed twice their mean ``a`` (else their sum would pass ``n a``), so
       ``m <= 2 a`` and a token with ``p > 2 ratio a`` (1 % to spare: :data:`SURE`) is massive;
    2. one count at ``q``, the largest other peak of each text (``known`` tokens, already flagged at another
       layer, count as flagged here): ``c(q) < ceil(n / 2)`` clears every other token;
    3. a text not cleared (a peak near ``ratio`` x its median) gets a binary search over its sorted peaks, one
       count of those texts' values per step.

    The states are read in four passes (|x|, its peak and sum per token, ``fl(ratio * |x|)``) and each count is
    two more (``fl(ratio * |x|) < p`` written as 0.0 / 1.0, summed per token); the per-text steps run on
    the host's (B, T) arrays, which costs a CPU nothing. ``scratch``: the two (B, T, d) float32 buffers come from
    it (no fresh pages per layer)."""
    B, T, d = hidden.shape
    r = float(np.float32(ratio))  # the float32 ratio: fl(r * v) is what ``ratio * median`` computes in float32
    prod = _buffer(scratch, "massive.prod", (B, T, d))
    torch.abs(hidden, out=prod) if hidden.dtype == torch.float32 else prod.copy_(hidden).abs_()  # |x| in float32
    peak = prod.amax(dim=-1).numpy()  # (B, T); NaN where a token holds NaN
    sums = prod.sum(dim=-1).numpy()  # (B, T) float32
    prod.mul_(r)  # fl(r * |x|): |fl(r * x)| rounds alike, so the order of abs and product does not matter
    real = real.cpu().numpy()
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        unusable = (np.isnan(peak) & real).any(axis=1)  # np.median of values holding NaN is NaN: nothing flagged
        n = real.sum(axis=1) * d  # (B,)
        mean = np.where(real, sums, 0.0).sum(axis=1, dtype=np.float64) / n
        flags = real & (peak > SURE * r * mean[:, None])  # a text holding NaN or inf has no sure token
        if known is not None:  # flagged at another layer: no count is spent on them
            flags |= known.cpu().numpy() & real
        rest = np.where(real & ~flags & ~np.isnan(peak), peak, 0.0).max(axis=1, initial=0.0)  # (B,) q
        counts = _Counts(prod, real, scratch)
        at_rest = counts.below(rest)
        open_rows = np.flatnonzero((at_rest >= (n + 1) // 2) & ~unusable)  # q not cleared: rare
    if len(open_rows):
        o = open_rows
        flags[o] = _search_flags(hidden, o, prod[o], peak[o], real[o], flags[o], at_rest[o], r, scratch)
    return torch.from_numpy(flags)


def _buffer(scratch: Scratch | None, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.float32) if scratch is None else scratch.tensor(name, shape, torch.float32)


class _Counts:
    """``c = _Counts(prod, real).below(p)``: (B,) float64, per text how many of its real values have
    ``fl(r * v) < p[b]``, from ``prod`` (B, T, d) float32 holding ``fl(r * |x|)``: the comparison written as 1.0
    or 0.0 into a float32 buffer (one pass, faster on a CPU than a bool tensor and its sum; NaN compares false),
    summed per token (at most ``d`` ones: exact in float32), then over the text's real tokens (padding is never
    read)."""

    def __init__(self, prod: torch.Tensor, real: np.ndarray, scratch: Scratch | None = None):
        self.prod, self.real = prod, real
        self.below_cut = _buffer(scratch, "massive.below", prod.shape)

    def below(self, p: np.ndarray) -> np.ndarray:
        cut = torch.from_numpy(np.ascontiguousarray(p, dtype=np.float32))[:, None, None]
        per_token = torch.lt(self.prod, cut, out=self.below_cut).sum(dim=-1)  # 1.0 / 0.0 written as float32
        return np.where(self.real, per_token.numpy(), 0).sum(axis=1, dtype=np.float64)


def _search_flags(hidden: torch.Tensor, rows: np.ndarray, prod: torch.Tensor, peak: np.ndarray, real: np.ndarray,
                  sure: np.ndarray, at_rest: np.ndarray, r: float, scratch: Scratch | None) -> np.ndarray:
    """(k, T) bool: the flags of the ``k`` texts ``hidden[rows]`` that :func:`_bound_flags`' first count did not
    settle (none holds NaN): their ``sure`` (k, T) tokens are flagged (peaks above the bound, or known), and the
    count ``at_rest`` (k,) at the largest other peak ``q`` said it is flagged too, or (``c == n / 2``, even ``n``)
    that its cut lies between the two middle values. The rest is a search down each text's other sorted peaks
    (galloping: the 2nd, 4th, 8th, ... peak below the last flagged one, then halving the gap to the first one found
    not flagged: a few steps for the few flagged tokens a text has), one count of these texts' values per step. A
    text where a count met ``c == n / 2`` gets its median exactly (:func:`_median_host`) and its flags from it.
    ``prod`` (k, T, d): ``fl(r * |hidden[rows]|)``; ``peak``, ``real`` (k, T): those texts' peaks and real tokens."""
    k, T, d = prod.shape
    n = real.sum(axis=1) * d
    need = n // 2 + 1
    tied = (n % 2 == 0) & (at_rest == n // 2)
    ordered = np.sort(np.where(real & ~sure, peak, np.inf), axis=1)  # (k, T): the other real peaks, ascending
    # ordered[:lo] not flagged, ordered[hi:] flagged: the sure peaks (as inf), and q unless its count tied
    lo, hi = np.zeros(k, dtype=np.int64), (real & ~sure).sum(axis=1) - ~tied
    lo[tied] = hi[tied]  # a tied text is settled by its median below
    step = np.ones(k, dtype=np.int64)  # galloping until the first peak found not flagged, then halving
    counts = _Counts(prod, real, scratch)
    at = np.arange(k)
    while (lo < hi).any():
        active = lo < hi
        mid = np.where(step > 0, np.maximum(hi - step, lo), (lo + hi) // 2)
        cut = np.where(active, ordered[at, np.minimum(mid, T - 1)], 0.0)  # a settled text counts nothing
        c = counts.below(cut)
        tied |= active & (n % 2 == 0) & (c == n // 2)
        flagged = active & (c >= need)
        step = np.where(flagged, step * 2, 0)
        hi, lo = np.where(flagged, mid, hi), np.where(active & ~flagged, mid + 1, lo)
    bound = np.where(lo > 0, ordered[at, np.maximum(lo - 1, 0)], -np.inf)  # the largest peak not flagged
    flags = sure | (real & (peak > bound[:, None]))
    for b in np.flatnonzero(tied):
        values = np.abs(hidden[rows[b]].float().numpy()[real[b]])
        flags[b] = sure[b] | (real[b] & (peak[b] > np.float32(r) * _median_host(values)))
    return flags


def _median_host(values: np.ndarray) -> np.float32:
    """The textbook median of ``values`` (any shape, float32): the middle value, or the float32 mean of the two
    middle ones (as ``np.median`` takes it)."""
    flat = values.ravel()
    lower, upper = (len(flat) - 1) // 2, len(flat) // 2
    part = np.partition(flat, (lower, upper))
    return part[lower] if lower == upper else (part[lower] + part[upper]) / np.float32(2)


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
        flags |= massive_mask(hidden.to(real.device), real, ratio, known=flags)
    return flags


def massive_any_layer(layers: Iterable[np.ndarray], text_index: np.ndarray,
                      ratio: float = MASSIVE_RATIO) -> np.ndarray:
    """``flags = massive_any_layer(states.layers[1:-1], states.text_index)``: (n_tokens,) bool, True where a
    token is massive at any of ``layers`` (each (n_tokens, d), e.g. an (n, n_tokens, d) array)."""
    flags = np.zeros(len(text_index), dtype=bool)
    for layer in layers:
        flags |= massive_tokens(layer, text_index, ratio)
    return flags
