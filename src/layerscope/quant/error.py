"""How much error quantization puts into a weight or a layer's output.

    sqnr_db(signal=(y ** 2).sum(), noise=((y - y_q) ** 2).sum())     # 10 log10(||y||^2 / ||y - y_q||^2)
    weight_rel_err([w], [w_q])                                        # ||W - W_q||_F / ||W||_F over the tensors

SQNR (signal-to-quantization-noise ratio) in decibels: +6.02 dB per bit for a uniform quantizer of a full-scale
signal; inf when the output did not change at all, NaN when there is no signal and no noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch


def sqnr_db(signal, noise):
    """10 log10(signal / noise) for summed squares (floats or arrays): inf where noise is 0 and signal is not,
    NaN where both are 0."""
    signal, noise = np.asarray(signal, dtype=np.float64), np.asarray(noise, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 10 * np.log10(signal / noise)
    return float(out) if out.ndim == 0 else out


def weight_rel_err(originals: Sequence[torch.Tensor], quantized: Sequence[torch.Tensor]) -> float:
    """Relative Frobenius error of a set of tensors taken together: sqrt(sum ||W - W_q||^2 / sum ||W||^2)
    (NaN when every original is zero)."""
    num = sum(float(((w.double() - q.double()) ** 2).sum()) for w, q in zip(originals, quantized, strict=True))
    den = sum(float((w.double() ** 2).sum()) for w in originals)
    return math.sqrt(num / den) if den > 0 else float("nan")
