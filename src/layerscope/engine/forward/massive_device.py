"""The massive-token flags on a device the host must not wait for (CUDA): every method of
:func:`.massive.massive_mask` but the CPU's ``"bound"``, each exact, with no loop over texts and no host sync.

    flags = device_flags(hidden, real, MASSIVE_RATIO, "count")  # (B, T) bool for one layer's (B, T, d) states

- ``"count"`` (:func:`_count_flags`): a binary search over each text's sorted token peaks, one count a step;
- ``"bits16"`` (:func:`_median_bits16`): one histogram of 16-bit magnitudes gives each text's median exactly;
- ``"bracket"`` (:func:`_bracket`): a histogram of float32's top 16 bits brackets the median, ``nanmedian`` where
  a peak falls inside the bracket;
- ``"exact"`` (:func:`_exact_median`): every text's median by ``nanmedian``.

The rule they implement, and the CPU's method, are in :mod:`.massive`.
"""

from __future__ import annotations

import numpy as np
import torch

from .pooling import free_to_check


def device_flags(hidden: torch.Tensor, real: torch.Tensor, ratio: float, method: str) -> torch.Tensor:
    """(B, T) bool: :func:`.massive.massive_mask`'s flags by ``method``: ``"count"``, ``"bits16"``, ``"bracket"``
    or ``"exact"`` (every method but the CPU's ``"bound"``)."""
    if method == "count":
        return _count_flags(hidden, real, ratio)
    n = real.sum(dim=1) * hidden.shape[-1]  # (B,) real values per text
    if method == "bits16":
        peak = torch.maximum(hidden.amax(dim=-1), -hidden.amin(dim=-1)).float()  # (B, T) max |x|; NaN stays NaN
        median = _median_bits16(hidden, real, n)
    else:
        mag = hidden.float()
        mag = mag.abs_() if mag is not hidden else mag.abs()  # (B, T, d) a new tensor; padding is left as it is
        peak = mag.amax(dim=-1)  # (B, T); NaN where a token holds NaN
    unusable = (peak.isnan() & real).any(dim=1)  # (B,) np.median of values holding NaN is NaN: nothing flagged
    if method == "exact":
        median = _exact_median(mag, real, n)
    if method != "bracket":
        return real & (peak > ratio * median[:, None]) & ~unusable[:, None]
    low, high = _bracket(mag, real, n)
    flags = real & (peak > ratio * high[:, None])
    undecided = (real & (peak > ratio * low[:, None]) & ~flags).any(dim=1) & ~unusable
    rows = undecided.nonzero(as_tuple=True)[0]  # rare: a peak within 2^-7 of ratio x the median
    if len(rows):
        median = _exact_median(mag[rows], real[rows], n[rows])
        flags[rows] = real[rows] & (peak[rows] > ratio * median[:, None])
    return flags & ~unusable[:, None]


def _count_flags(hidden: torch.Tensor, real: torch.Tensor, ratio: float) -> torch.Tensor:
    """(B, T) bool: :func:`.massive.massive_mask`'s flags found without a median, exactly.

    A token is flagged when its peak ``p`` exceeds ``fl(ratio * m)``, ``m`` its text's median (float32, as
    ``np.median``). ``fl(ratio * v)`` does not decrease with ``v``, so with ``c`` = how many of the text's ``n``
    real values ``v`` have ``fl(ratio * v) < p`` (those below the cut :func:`_cut` of ``p``): for an even ``n`` the
    token is flagged when ``c > n / 2`` (both middle values, so their mean, lie below the cut), not flagged when
    ``c < n / 2``, and only ``c == n / 2`` (the cut between the two middle values) needs the middle values
    themselves: the largest value below the cut and the smallest above it (for an odd ``n``, flagged when
    ``c > (n - 1) / 2``). Whether a token is flagged grows with its peak, so a binary search over each text's sorted
    peaks finds the first flagged one in ceil(log2(T + 1)) steps, each one count over the batch's values; a text
    whose search met ``c == n / 2`` gets its two middle values at that cut (two reductions) and its flags from
    their mean. Padding is never counted (its values are set to +inf, above every finite cut)."""
    B, T, d = hidden.shape
    if hidden.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        hidden = hidden.float()
    values = hidden.abs()  # (B, T, d) in the states' dtype
    peak = torch.where(real, values.amax(dim=-1).float(), torch.nan)  # (B, T); NaN stays NaN
    values.masked_fill_(~real[..., None], torch.inf)  # padding: above every cut
    unusable = (peak.isnan() & real).any(dim=1)  # np.median of values holding NaN is NaN: nothing flagged
    n = real.sum(dim=1) * d  # (B,)
    need = n // 2 + 1  # (B,) values below the cut that put the median below it (n/2 + 1, or (n + 1)/2 when odd)
    half = torch.where(n % 2 == 0, n // 2, -1)  # (B,) the count that leaves the cut between two middle values
    sorted_peaks = torch.where(peak.isnan(), torch.inf, peak).sort(dim=1).values  # (B, T) real ones first
    cuts = _on_grid(_cut(sorted_peaks, ratio), values.dtype)  # (B, T): every step's cut, made once
    lo, hi = torch.zeros_like(n), real.sum(dim=1)  # tokens s[:lo] not flagged, s[hi:] flagged (sorted order)
    undecided = torch.zeros_like(real[:, 0])  # (B,) a step met c == n / 2
    at = cuts[:, :1].clone()  # (B, 1) that step's cut
    for _ in range(T.bit_length()):
        mid = (lo + hi) // 2
        cut = cuts.gather(1, mid.clamp(max=T - 1)[:, None])  # (B, 1)
        below = (values < cut[..., None]).view(torch.uint8).sum(dim=(1, 2), dtype=torch.int64)  # (B,)
        active = lo < hi
        tie = (below == half) & active
        at = torch.where((tie & ~undecided)[:, None], cut, at)
        undecided |= tie
        flagged = below >= need
        hi, lo = torch.where(active & flagged, mid, hi), torch.where(active & ~flagged, mid + 1, lo)
    last_unflagged = sorted_peaks.gather(1, (lo - 1).clamp(min=0)[:, None])[:, 0]  # (B,)
    bound = torch.where(lo > 0, last_unflagged, -torch.inf)
    flags = real & (peak > bound[:, None])
    if not free_to_check(hidden) or bool(undecided.any()):  # off the CPU: always, so the host never waits
        cut = at[..., None]  # (B, 1, 1)
        lower = torch.where(values < cut, values, -torch.inf).amax(dim=(1, 2)).float()  # (B,) lower middle value
        upper = torch.where(values >= cut, values, torch.inf).amin(dim=(1, 2)).float()  # (B,) the upper one
        median = (lower + upper) / 2
        flags = torch.where(undecided[:, None], real & (peak > ratio * median[:, None]), flags)
    return flags & ~unusable[:, None]


def _on_grid(cut: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``cut`` (float32, >= 0) moved up onto ``dtype``'s grid: the smallest ``dtype`` number >= it, so that for
    values ``v`` of that dtype ``v < cut`` holds exactly when ``v < _on_grid(cut)`` (compared without a copy)."""
    if dtype == torch.float32:
        return cut
    near = cut.to(dtype)
    return torch.where(near.float() < cut, (near.view(torch.int16) + 1).view(dtype), near)


def _cut(peak: torch.Tensor, ratio: float) -> torch.Tensor:
    """float32, shaped like ``peak``: for each peak ``p`` (float32, >= 0 or +inf), the smallest float32 ``v`` with
    ``fl32(ratio * v) >= p``, so that for ``v >= 0``, ``fl32(ratio * v) < p`` exactly when ``v < cut``.

    The product of two float32 numbers is exact in float64, and ``fl32(x) >= p`` exactly when ``x`` lies above the
    midpoint between ``p`` and the float32 below it (on it, when ties round to ``p``: an even ``p``), so the test is
    exact in float64 for every ``v``, subnormal and overflowing products included; ``v`` starts at the midpoint
    over ``ratio`` and moves by single float32 steps until it holds and fails one step below."""
    r = float(np.float32(ratio))  # the float32 ratio, exactly, as a Python float (no tensor, no copy to the device)
    up = torch.full_like(peak, torch.inf)
    below = torch.nextafter(peak, -up).double()
    top = torch.where(peak.isinf(), 2.0**128, peak.double())  # +inf: the float32 grid's next step past the max
    mid = (below + top) / 2  # exact: the rounding boundary
    even = peak.view(torch.int32) % 2 == 0  # a tie rounds to p

    def reaches(v: torch.Tensor) -> torch.Tensor:
        x = v.double() * r  # exact
        return (x > mid) | ((x == mid) & even)

    v = (mid / r).float()
    for _ in range(2):
        v = torch.where(reaches(v), v, torch.nextafter(v, up))
    for _ in range(2):
        lower = torch.nextafter(v, -up)
        v = torch.where(reaches(lower), lower, v)
    return v


def _median_bits16(hidden: torch.Tensor, real: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """(B,) float32: each text's textbook median of |``hidden``| ((B, T, d) bfloat16 or float16) over its real
    tokens ``real`` (B, T), ``n`` (B,) values each, from one histogram of the magnitude bit patterns: the count of
    every pattern (2^15 per text) gives the lower and upper middle values exactly (their mean in float32, as
    ``np.median`` takes it on float32 values). Padding is counted into a row past the texts' and never read."""
    B = hidden.shape[0]
    bins = 1 << 15
    slot = torch.where(real, torch.arange(B, device=hidden.device)[:, None], B).to(torch.int32)  # (B, T)
    keys = hidden.view(torch.int16).to(torch.int32).bitwise_and_(0x7FFF)  # (B, T, d) |x|'s bit pattern
    keys.add_((slot * bins)[..., None])
    counts = torch.zeros((B + 1) * bins, dtype=torch.int32, device=hidden.device)
    counts.index_add_(0, keys.view(-1), torch.ones_like(keys).view(-1))
    cumulative = counts[: B * bins].view(B, bins).cumsum(dim=1)  # (B, bins)
    first, second = (n - 1) // 2, n // 2  # (B,) 0-based ranks of the lower and upper middle values
    lower = (cumulative <= first[:, None]).sum(dim=1)  # (B,) the bit pattern holding rank `first`
    upper = (cumulative <= second[:, None]).sum(dim=1)
    as_value = lambda pattern: pattern.to(torch.int16).view(hidden.dtype).float()  # noqa: E731
    lo, hi = as_value(lower), as_value(upper)
    return torch.where(n % 2 == 1, lo, (lo + hi) / 2)


def _exact_median(mag: torch.Tensor, real: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """(B,) float32: each text's textbook median of ``mag`` (B, T, d) over its real tokens ``real`` (B, T), ``n``
    (B,) values each: the middle value, or for an even count the mean of the two middle values computed in
    float32 as ``np.median`` does. ``nanmedian`` gives the lower middle value; the upper one is the lower one
    when more than half the values are at most it, else the smallest value above it."""
    values = mag.masked_fill(~real[..., None], torch.nan).flatten(1)  # (B, T * d), NaN at padding
    lower = values.nanmedian(dim=1).values  # (B,)
    above = values > lower[:, None]  # NaN > x is False
    at_most = n - above.sum(dim=1)
    upper = torch.where(at_most >= n // 2 + 1, lower, torch.where(above, values, torch.inf).amin(dim=1))
    return torch.where(n % 2 == 1, lower, (lower + upper) / 2)


WINDOW = 6 * 128
"""Bins of :func:`_bracket`'s histogram: 6 binary orders of magnitude, 128 bins each (2^-7 apart)."""


def _bracket(mag: torch.Tensor, real: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``low, high = _bracket(mag, real, n)``: (B,) float32 with ``low <= lower middle <= upper middle <= high``
    for each text's ``n`` (B,) real values of ``mag`` (B, T, d) (|activations|, so >= 0; ``real`` (B, T) bool;
    padding, whatever it holds, is counted into bins past the texts' and never read). ``low`` is 0 and ``high``
    +inf for a text whose middle values the histogram does not bracket.

    A float32 >= 0 read as int32 orders like the value, so its top 16 bits (exponent and 7 mantissa bits) are
    bins at most 2^-7 apart in relative size. One histogram (``bincount``) counts each text's values in
    :data:`WINDOW` bins from about 1/16 to 4 times its mean |value| (the median is below 2x the mean), with one
    bin below and one above for the rest; the two middle ranks are then found
    in the cumulative counts: ``low`` is the lower middle value's bin's first value, ``high`` the first value
    past the upper one's bin."""
    B = mag.shape[0]
    rows = torch.arange(B, dtype=torch.int32, device=mag.device)
    mean = torch.where(real, mag.sum(dim=-1), 0.0).sum(dim=1) / n  # (B,)
    start = ((mean.view(torch.int32) >> 16) - 4 * 128).clamp_(min=0)[:, None, None]  # (B, 1, 1) window bin 1's code
    slot = torch.where(real, rows[:, None], B)[..., None]  # (B, T, 1): the text's row, B for padding
    base = slot * (WINDOW + 2)  # (B, T, 1) bin 0 of the token's text
    keys = (mag.view(torch.int32) >> 16).sub_(start - 1).clamp_(0, WINDOW + 1).add_(base)  # (B, T, d) bins
    counts = _histogram(keys, B, WINDOW + 2)  # (B, WINDOW + 2): below, WINDOW bins, above; slot B dropped
    cumulative = counts.cumsum(dim=1)
    first, second = (n - 1) // 2, n // 2  # (B,) 0-based ranks of the lower and upper middle values
    bin_low = (cumulative <= first[:, None]).sum(dim=1)  # (B,) 0 (below the window) .. WINDOW + 1 (above)
    bin_high = (cumulative <= second[:, None]).sum(dim=1)
    inside = (bin_low >= 1) & (bin_high <= WINDOW)
    start = start.view(B)
    low = ((start + bin_low - 1).clamp_(min=0) << 16).to(torch.int32).view(torch.float32)
    high = ((start + bin_high).clamp_(max=0x7F80) << 16).to(torch.int32).view(torch.float32)  # at most +inf
    return torch.where(inside, low, 0.0), torch.where(inside, high, torch.inf)


def _histogram(keys: torch.Tensor, B: int, bins: int) -> torch.Tensor:
    """(B, bins) int64 counts of ``keys`` (any shape, ints in [0, (B + 1) * bins)), the last ``bins`` dropped; no
    host sync off the CPU."""
    flat, size = keys.reshape(-1), (B + 1) * bins
    if flat.device.type == "cpu":
        counts = torch.bincount(flat, minlength=size)
    else:
        counts = torch.zeros(size, dtype=torch.int64, device=flat.device)
        counts.index_add_(0, flat.long(), torch.ones_like(flat, dtype=torch.int64))
    return counts[: B * bins].view(B, bins)
