"""The studies: each turns one notebook into a function from a config to a result; each is one package that
registers itself (:func:`register_study`), and other packages add more through entry points.

    from layerscope.studies import StudyConfig, run_study
    result = run_study(StudyConfig(study="divergence", models=("smollm2-135m",)))
    result.write("runs/divergence")
    load_run("runs/20261122-153000")    # a finished suite (or study) folder back, to display in a notebook
"""

from .base import Study
from .config import ConfigError, StudyConfig
from .display import SuiteResult, load_run
from .registry import get_study, register_study, run_study, studies
from .result import StudyResult
from .settings import PairSettings, Settings, setting

__all__ = ["ConfigError", "PairSettings", "Settings", "Study", "StudyConfig", "StudyResult", "SuiteResult",
           "get_study", "load_run", "register_study", "run_study", "setting", "studies"]
