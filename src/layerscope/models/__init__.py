"""Loading models and describing them: see :func:`load_model`.

    from layerscope.models import load_model, DEFAULT_MODEL
    lm = load_model(DEFAULT_MODEL)            # a LoadedModel; lm.info is its ModelInfo

The zoo's names (``ZOO``, ``DEFAULT_MODEL``) load without torch, so ``layerscope --help`` can name them; the rest
is imported on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy
from .zoo import DEFAULT_MODEL, ZOO, exact_name, prequantized

if TYPE_CHECKING:
    from .info import ModelInfo, decoder_layers, input_device
    from .load import LoadedModel, load_model

_LAZY = {"ModelInfo": "info", "decoder_layers": "info", "input_device": "info", "LoadedModel": "load",
         "load_model": "load"}

__all__ = ["DEFAULT_MODEL", "ZOO", "LoadedModel", "ModelInfo", "decoder_layers", "exact_name", "input_device",
           "load_model", "prequantized"]


__getattr__, __dir__ = lazy(__name__, _LAZY, __all__)
