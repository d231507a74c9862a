"""layerscope: layer-wise analysis of transformer language models.

    import layerscope as ls
    lm = ls.load_model("smollm2-135m")            # zoo name, folder, .gguf file or hub id
    pairs = ls.load_pairs()                       # the bundled statement pairs
    acts = ls.extract(lm, pairs.texts())          # one batched pass, every layer, cached
    acts.pooled["mean"]                           # (n_texts, n_layers + 1, d)
    acts.nll_mean                                 # (n_texts,)
    m = ls.measure_interventions(lm, texts, [ls.Intervention.skip(3)])   # m[iv].nll, .kl, ... per text
    ls.lens(lm, "The capital of France is")       # the logit lens of one prompt: top-k per layer and position
    tl = ls.train_tuned_lens(lm, texts)           # a tuned lens (Belrose et al. 2023); tl.save(folder)
    ls.lens(lm, "The capital of France is", lens=ls.TunedLens.load(folder, lm))   # read through it
    ls.probe(acts, labels, groups=groups)         # cross-validated probes per hidden state, with a control task
    ls.steer(lm, texts, state=12, vector=v, alpha=1.0)   # mean NLL per text with alpha * v added at state 12
    ls.run_study(ls.StudyConfig(study="probe"))   # a study by name; result.write("runs/probe")

Names that need torch are imported on first use (PEP 562), so ``import layerscope`` (and ``layerscope --help``)
stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import DatasetError, ExtractionError, LayerscopeError, ModelLoadError, OutputError
from .lazy import lazy
from .provenance import VERSION as __version__
from .study import hooks as _hooks

if TYPE_CHECKING:
    from .data import PairDataset, load_pairs
    from .engine import POOLINGS, Activations, ExtractSettings, extract
    from .engine.forward.probing import probe
    from .engine.interventions.steering import steer
    from .engine.interventions.surgery import Intervention, intervened
    from .engine.interventions.surgery_run import measure_interventions
    from .engine.lenses.prompt import lens
    from .engine.lenses.tuned import TunedLens
    from .engine.lenses.tuned_train import train_tuned_lens
    from .models import DEFAULT_MODEL, ZOO, LoadedModel, ModelInfo, load_model
    from .run import SuiteResult, get_study, load_run, run_study, write_result
    from .study import Study, StudyConfig, StudyResult, register_study

_LAZY = {"PairDataset": "data", "load_pairs": "data", "POOLINGS": "engine", "Activations": "engine",
         "ExtractSettings": "engine", "extract": "engine", "DEFAULT_MODEL": "models", "ZOO": "models",
         "LoadedModel": "models", "ModelInfo": "models", "load_model": "models",
         "Intervention": "engine.interventions.surgery", "intervened": "engine.interventions.surgery",
         "measure_interventions": "engine.interventions.surgery_run", "steer": "engine.interventions.steering",
         "StudyConfig": "study", "StudyResult": "study", "Study": "study", "register_study": "study",
         "SuiteResult": "run", "get_study": "run", "load_run": "run", "run_study": "run", "write_result": "run",
         "lens": "engine.lenses.prompt", "probe": "engine.forward.probing", "TunedLens": "engine.lenses.tuned",
         "train_tuned_lens": "engine.lenses.tuned_train"}

__all__ = [
    "DEFAULT_MODEL", "POOLINGS", "ZOO", "Activations", "DatasetError", "ExtractSettings", "ExtractionError",
    "Intervention", "LayerscopeError", "LoadedModel", "ModelInfo", "ModelLoadError", "OutputError", "PairDataset",
    "Study", "StudyConfig", "StudyResult", "SuiteResult", "TunedLens", "__version__", "extract", "get_study",
    "intervened", "lens", "load_model", "load_pairs", "load_run", "measure_interventions", "probe", "register_study",
    "run_study", "steer", "train_tuned_lens", "write_result",
]


__getattr__, __dir__ = lazy(__name__, _LAZY, __all__)


# The composition root: the study API (layerscope.study) asks for three jobs that only the machinery above it
# (layerscope.run) can do; they are connected here, where Python starts before any module of the package, and
# each imports layerscope.run only when first called, so the imports between the packages run one way.
def _study_class(name: str) -> type:
    from .run.registry import study_class

    return study_class(name)


def _write(result, out, force: bool = False):
    from .run.output import write_result

    return write_result(result, out, force=force)


def _html(result) -> str:
    from .run.display import study_html

    return study_html(result)


def _runner_name(name: str):
    from . import run

    return getattr(run, name)


_hooks.connect(study_class=_study_class, write=_write, html=_html, runner_name=_runner_name)
