"""The studies: each turns one notebook into a function from a config to a result.

    from layerscope.studies import StudyConfig, run_study
    result = run_study(StudyConfig(study="divergence", models=("smollm2-135m",)))
    result.write("runs/divergence")
"""

from .config import ConfigError, StudyConfig
from .registry import get_study, run_study, studies
from .result import StudyResult

__all__ = ["ConfigError", "StudyConfig", "StudyResult", "get_study", "run_study", "studies"]
