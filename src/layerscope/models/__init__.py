"""Loading models and describing them: see :func:`load_model`."""

from .info import ModelInfo, decoder_layers, input_device
from .load import LoadedModel, load_model
from .zoo import DEFAULT_MODEL, ZOO

__all__ = ["DEFAULT_MODEL", "ZOO", "LoadedModel", "ModelInfo", "decoder_layers", "input_device", "load_model"]
