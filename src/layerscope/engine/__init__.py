"""The extraction engine: one batched pass per text, pooled inside the batch, cached."""

from .activations import Activations, ExtractSettings, ExtractStats
from .extract import extract
from .massive import MASSIVE_RATIO, massive_mask, massive_tokens
from .pooling import ALL_POOLINGS, CHECK_POOLINGS, POOLINGS

__all__ = ["ALL_POOLINGS", "CHECK_POOLINGS", "MASSIVE_RATIO", "POOLINGS", "Activations", "ExtractSettings",
           "ExtractStats", "extract", "massive_mask", "massive_tokens"]
