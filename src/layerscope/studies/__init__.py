"""The built-in studies, one package each, every one registering itself with ``@register_study`` when
imported: ``divergence``, ``scaling``, ``phases``, ``anisotropy``, ``ablation``, ``atlas``, ``surgery``;
``shared`` holds what several of them use. A study here imports the study API (:mod:`layerscope.study`) and the
lower layers (engine, measures, report, data, stats), never another study nor ``layerscope.run``.

    from layerscope.studies.divergence import Divergence      # a built-in study's class, e.g. to subclass

The names a plugin imported from here before the study API had its own package still work
(``from layerscope.studies import Study, StudyConfig, StudyResult, Settings, setting, register_study``);
new code imports them from :mod:`layerscope.study`. The runner's names it once held (``get_study``, ``run_study``,
``load_run``, ``SuiteResult``, ``studies``) live in :mod:`layerscope.run`; until 0.5.0 they still resolve here, with
a ``DeprecationWarning`` that names their new place.
"""

import warnings

from ..study import hooks
from ..study.base import Study
from ..study.config import StudyConfig
from ..study.registry import register_study
from ..study.result import StudyResult
from ..study.settings import ConfigError, PairSettings, Settings, setting

__all__ = ["ConfigError", "PairSettings", "Settings", "Study", "StudyConfig", "StudyResult", "register_study",
           "setting"]

MOVED_TO_RUN = ("SuiteResult", "get_study", "load_run", "run_study", "studies")
"""Names of the runner that this package held before it had its own package (:mod:`layerscope.run`)."""


def __getattr__(name: str):
    if name in MOVED_TO_RUN:
        warnings.warn(f"layerscope.studies.{name} moved to layerscope.run.{name}: from layerscope.run import {name} "
                      "(the old path stops working in layerscope 0.5.0)", DeprecationWarning, stacklevel=2)
        return hooks.runner_name(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
