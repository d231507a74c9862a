"""Fake quantization of chosen decoder layers, with an in-memory snapshot to undo it."""

from .fake import fake_quantize, parse_scheme
from .layers import TARGETS, WeightSnapshot, quantize_layers, target_params

__all__ = ["TARGETS", "WeightSnapshot", "fake_quantize", "parse_scheme", "quantize_layers", "target_params"]
