"""layerscope: layer-wise analysis of transformer language models.

    import layerscope as ls
    lm = ls.load_model("smollm2-135m")            # zoo name, folder, .gguf file or hub id
    pairs = ls.load_pairs()                       # the bundled statement pairs
    acts = ls.extract(lm, pairs.texts())          # one batched pass, every layer, cached
    acts.pooled["mean"]                           # (n_texts, n_layers + 1, d)
    acts.nll_mean                                 # (n_texts,)
"""

from importlib.metadata import PackageNotFoundError, version

from .data import PairDataset, load_pairs
from .engine import POOLINGS, Activations, ExtractSettings, extract
from .errors import DatasetError, ExtractionError, LayerscopeError, ModelLoadError, OutputError
from .models import DEFAULT_MODEL, ZOO, LoadedModel, ModelInfo, load_model

try:
    __version__ = version("layerscope")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

__all__ = [
    "DEFAULT_MODEL", "POOLINGS", "ZOO", "Activations", "DatasetError", "ExtractSettings", "ExtractionError",
    "LayerscopeError", "LoadedModel", "ModelInfo", "ModelLoadError", "OutputError", "PairDataset", "__version__",
    "extract", "load_model", "load_pairs",
]
