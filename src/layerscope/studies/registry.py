"""Every study by name.

    study = get_study("phases");  result = study.run(config)
"""

from __future__ import annotations

import dataclasses

from .base import Study
from .config import ConfigError, StudyConfig
from .finite import check_result
from .result import StudyResult


def studies() -> dict[str, Study]:
    from .ablation import Ablation
    from .anisotropy import Anisotropy
    from .divergence import Divergence
    from .phases import Phases
    from .scaling import Scaling

    return {s.name: s for s in (Divergence(), Scaling(), Phases(), Anisotropy(), Ablation())}


def get_study(name: str) -> Study:
    found = studies()
    if name not in found:
        raise ConfigError(f"unknown study '{name}'; choose one of {', '.join(found)}")
    return found[name]


def run_study(config: StudyConfig) -> StudyResult:
    """Run ``config.study``; with no models given, on that study's default models.

    Every entry point (``layerscope run``, a suite, a sweep task, Python) comes through here, so this is where a
    result is refused when a number its verdicts are computed from is NaN or inf (:func:`finite.check_result`).
    """
    study = get_study(config.study)
    if not config.models:
        config = dataclasses.replace(config, models=study.default_models)
    return check_result(study.run(config))
