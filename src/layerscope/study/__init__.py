"""The study API: everything a study, built-in or plugin, imports from layerscope's core.

    from layerscope.study import Settings, Study, StudyConfig, StudyResult, register_study, setting
    from layerscope.study import each_model, layer_row, make_table, manifest, model_entry

    @dataclass(frozen=True)
    class NormSettings(Settings):
        texts: int = setting("How many texts to read.", default=32)

    @register_study
    class Norms(Study):
        name = "norms"; title = "Hidden-state norms"; question = "How large is each layer's state?"
        Settings = NormSettings
        def run(self, config: StudyConfig) -> StudyResult: ...

A study sees the core through these names only: the :class:`Study` interface and ``@register_study``, the
config (:class:`StudyConfig` with the study's own :class:`Settings`), the result (:class:`StudyResult`,
plain data: ``make_table``, ``layer_row``), verdicts (:class:`Verdict`, ``status_of``), the robustness checks
(``check_entry``, ``robustness``), the finiteness checks (``check_rows``, ``check_values``), the manifest
(``manifest``, ``model_entry``) and the per-model runner (``each_model``). Finding, running, writing and
showing studies is ``layerscope.run``'s job, above this package; a study never imports it (an import-linter
contract in pyproject.toml says so). Names are imported on first use, so importing this package is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy

if TYPE_CHECKING:
    from .base import Study
    from .config import StudyConfig
    from .finite import NonFiniteError, check_rows, check_values, defined
    from .manifests import dataset_entry, manifest, model_entry
    from .per_model import ModelRun, each_model
    from .registry import register_study
    from .result import TABLE_COLUMNS, StudyResult, layer_row, make_table
    from .sensitivity import check_entry, robustness
    from .settings import ConfigError, PairSettings, Settings, setting
    from .verdicts import NOT_ASSESSABLE, STATUSES, Verdict, key_text, status_of

_LAZY = {"Study": "base", "StudyConfig": "config", "NonFiniteError": "finite", "check_rows": "finite",
         "check_values": "finite", "defined": "finite", "dataset_entry": "manifests", "manifest": "manifests",
         "model_entry": "manifests", "ModelRun": "per_model", "each_model": "per_model",
         "register_study": "registry", "TABLE_COLUMNS": "result", "StudyResult": "result", "layer_row": "result",
         "make_table": "result", "check_entry": "sensitivity", "robustness": "sensitivity",
         "ConfigError": "settings", "PairSettings": "settings", "Settings": "settings", "setting": "settings",
         "NOT_ASSESSABLE": "verdicts", "STATUSES": "verdicts", "Verdict": "verdicts", "key_text": "verdicts",
         "status_of": "verdicts"}

__all__ = ["check_entry", "check_rows", "check_values", "ConfigError", "dataset_entry", "defined", "each_model",
           "layer_row", "make_table", "manifest", "model_entry", "ModelRun", "NonFiniteError", "NOT_ASSESSABLE",
           "PairSettings", "register_study", "robustness", "setting", "Settings", "status_of", "STATUSES", "Study",
           "StudyConfig", "StudyResult", "TABLE_COLUMNS", "Verdict", "key_text"]

__getattr__, __dir__ = lazy(__name__, _LAZY, __all__)
