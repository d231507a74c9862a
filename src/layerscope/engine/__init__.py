"""The extraction engine: one batched pass per text, pooled inside the batch, cached."""

from .activations import Activations, ExtractSettings, ExtractStats
from .extract import extract
from .pooling import POOLINGS

__all__ = ["POOLINGS", "Activations", "ExtractSettings", "ExtractStats", "extract"]
