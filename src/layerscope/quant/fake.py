"""Symmetric round-to-nearest fake quantization: quantize, then dequantize, in place of a weight.

    w_q = fake_quantize(w, bits=4, scheme="per-tensor")       # one scale for the tensor
    w_q = fake_quantize(w, bits=4, scheme="per-channel")      # one scale per output channel
    w_q = fake_quantize(w, bits=4, scheme="group:128")        # one per 128 inputs of a channel

Levels are the integers -2^(b-1) .. 2^(b-1) - 1, the scale is absmax / (2^(b-1) - 1), and
values are computed as clamp(round(w / scale)) * scale in the weight's dtype, exactly as
the ablation notebook does for its per-tensor case. A 1-D tensor (a norm weight, a bias)
has no channels and is always quantized per tensor. An all-zero tensor or channel is left
as it is.
"""

from __future__ import annotations

import torch

from ..errors import LayerscopeError


def parse_scheme(scheme: str) -> tuple[str, int | None]:
    """("per-tensor" | "per-channel" | "group", group size or None)."""
    if scheme in ("per-tensor", "per-channel"):
        return scheme, None
    if scheme.startswith("group:"):
        try:
            size = int(scheme.split(":", 1)[1])
        except ValueError:
            size = 0
        if size >= 1:
            return "group", size
    raise LayerscopeError(f"unknown quantization scheme {scheme!r}; use per-tensor, per-channel or group:N "
                          "(N inputs per scale, e.g. group:128)")


def check_bits(bits: int) -> None:
    if not isinstance(bits, int) or not 2 <= bits <= 16:
        raise LayerscopeError(f"--bits {bits!r} is not usable; symmetric quantization needs 2 to 16 bits")


def _round_trip(w: torch.Tensor, absmax: torch.Tensor, bits: int) -> torch.Tensor:
    qmax = 2 ** (bits - 1) - 1
    qmin = -(2 ** (bits - 1))
    scale = absmax / qmax
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)  # all-zero groups stay zero
    return torch.clamp(torch.round(w / safe), qmin, qmax) * safe


def fake_quantize(w: torch.Tensor, bits: int, scheme: str = "per-tensor", channel_axis: int = 0) -> torch.Tensor:
    """A quantized-then-dequantized copy of ``w``, same shape and dtype."""
    check_bits(bits)
    kind, group = parse_scheme(scheme)
    if kind == "per-tensor" or w.dim() < 2:
        absmax = w.abs().max()
        if absmax == 0:
            return w.clone()
        return _round_trip(w, absmax, bits).to(w.dtype)
    moved = w.movedim(channel_axis, 0)
    rows = moved.reshape(moved.shape[0], -1)  # (channels, inputs)
    if kind == "per-channel":
        out = _round_trip(rows, rows.abs().amax(dim=1, keepdim=True), bits)
    else:
        pad = (-rows.shape[1]) % group
        padded = torch.nn.functional.pad(rows, (0, pad)).reshape(rows.shape[0], -1, group)
        out = _round_trip(padded, padded.abs().amax(dim=2, keepdim=True), bits)
        out = out.reshape(rows.shape[0], -1)[:, : rows.shape[1]]
    return out.reshape(moved.shape).movedim(0, channel_axis).to(w.dtype)
