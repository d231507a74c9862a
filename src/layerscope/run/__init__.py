"""Finding, running, writing and showing studies: the machinery above the study API.

    from layerscope.run import run_study, get_study, load_run, write_result
    result = run_study(StudyConfig(study="divergence", models=("smollm2-135m",)))
    write_result(result, Path("runs/divergence"))     # what result.write("runs/divergence") does
    load_run("runs/20261122-153000")                   # a finished suite (or study) folder back

``registry`` finds the built-in studies and the plugins' entry points and decides what runs under each name;
``config_file`` reads config files; ``output`` writes a run folder atomically; ``pages`` writes its
``index.html``; ``display`` shows results in a notebook; ``suite`` runs several studies into one folder,
resumably. Nothing below this package imports it: ``layerscope/__init__.py`` connects the study API's hooks
(:mod:`layerscope.study.hooks`) to the registry, the writer and the renderer here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy

if TYPE_CHECKING:
    from .display import SuiteResult, load_run, study_html
    from .output import write_result
    from .registry import get_study, listing, reload_plugins, run_study, studies, study_class, study_origin
    from .suite import run_suite

_LAZY = {"SuiteResult": "display", "load_run": "display", "study_html": "display", "write_result": "output",
         "get_study": "registry", "listing": "registry", "reload_plugins": "registry", "run_study": "registry",
         "studies": "registry", "study_class": "registry", "study_origin": "registry", "run_suite": "suite"}

__all__ = ["get_study", "listing", "load_run", "reload_plugins", "run_study", "run_suite", "studies", "study_class",
           "study_html", "study_origin", "SuiteResult", "write_result"]

__getattr__, __dir__ = lazy(__name__, _LAZY, __all__)
