"""Fake quantization of chosen decoder layers, with a snapshot to undo it, named recipes and error measures."""

from .error import sqnr_db, weight_rel_err
from .fake import fake_quantize, parse_scheme
from .layers import TARGETS, WeightSnapshot, quantize_layers, target_params
from .recipes import RECIPES, Recipe, recipe_for

__all__ = ["RECIPES", "TARGETS", "Recipe", "WeightSnapshot", "fake_quantize", "parse_scheme", "quantize_layers",
           "recipe_for", "sqnr_db", "target_params", "weight_rel_err"]
