"""The built-in studies, one package each, every one registering itself with ``@register_study`` when
imported: ``divergence``, ``scaling``, ``phases``, ``anisotropy``, ``ablation``, ``atlas``, ``surgery``;
``shared`` holds what several of them use. A study here imports the study API (:mod:`layerscope.study`) and the
lower layers (engine, measures, report, data, stats), never another study nor ``layerscope.run``.

    from layerscope.studies.divergence import Divergence      # a built-in study's class, e.g. to subclass

The names a plugin imported from here before the study API had its own package still work
(``from layerscope.studies import Study, StudyConfig, StudyResult, Settings, setting, register_study``);
new code imports them from :mod:`layerscope.study`.
"""

from ..study.base import Study
from ..study.config import StudyConfig
from ..study.registry import register_study
from ..study.result import StudyResult
from ..study.settings import ConfigError, PairSettings, Settings, setting

__all__ = ["ConfigError", "PairSettings", "Settings", "Study", "StudyConfig", "StudyResult", "register_study",
           "setting"]
