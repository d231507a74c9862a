"""The interface every study implements; a study is one package that registers itself (``@register_study``).

    @register_study
    class MyStudy(Study):
        name = "mine"                                   # layerscope run mine
        title = "Mine";  question = "What does it ask?"
        Settings = MySettings                            # its own config section (settings.Settings subclass)
        compat_notes = (("notebook method", "layerscope default"),)   # what --compat notebooks changes

        def check_inputs(self, config): ...              # read its input files, before any model loads
        def run(self, config) -> StudyResult: ...        # load (each_model), analyse
        def figures(self, result) -> dict[str, Figure]: ...   # from result alone
        def report(self, result) -> str: ...              # markdown, from result alone
        def headline(self, result) -> list[str]: ...      # one line per verdict
        def verdicts(self, result) -> list[Verdict]: ...  # optional: the summary table's rows (default: headline)
        def numbers(self, result, model) -> dict[str, float]: ...   # headline numbers, for sweeps

``figures`` and ``report`` read only the result (summary and table), so a finished
run folder can be re-rendered without the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..models.zoo import DEFAULT_MODEL
from .settings import Settings
from .verdicts import NOT_ASSESSABLE, Verdict

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .config import StudyConfig
    from .result import StudyResult


class Study(ABC):
    name: ClassVar[str]
    title: ClassVar[str]
    question: ClassVar[str]
    default_models: ClassVar[tuple[str, ...]] = (DEFAULT_MODEL,)
    Settings: ClassVar[type[Settings]] = Settings
    """Its own section of the config: a frozen dataclass whose fields' help texts are the CLI options' help."""
    order: ClassVar[float] = 100
    """Where a suite runs and reports it (built-in studies: 10 to 50; then by name)."""
    compat_notes: ClassVar[tuple[tuple[str, str], ...]] = ()
    """(the notebooks' method, the layerscope default) for each thing ``--compat notebooks`` changes."""
    verdict_metrics: ClassVar[tuple[str, ...]] = ()
    """The table metrics its verdicts are computed from: a NaN or inf there is an error, not a verdict."""
    companions: ClassVar[tuple[str, ...]] = ()
    """Studies whose results a suite hands to :meth:`join` when it ran them before this one (e.g. the probe study
    draws divergence's UA and surgery's skip cost beside its own profiles)."""

    def check_inputs(self, config: StudyConfig) -> None:  # noqa: B027 - a study without input files checks nothing
        """Read every input file the study will need, so a bad one fails before any model loads."""

    @abstractmethod
    def run(self, config: StudyConfig) -> StudyResult: ...

    @abstractmethod
    def figures(self, result: StudyResult) -> dict[str, Figure]: ...

    @abstractmethod
    def report(self, result: StudyResult) -> str: ...

    @abstractmethod
    def headline(self, result: StudyResult) -> list[str]:
        """The verdicts in a line each, for the console and the study's section of the run page."""

    def verdicts(self, result: StudyResult) -> list[Verdict]:
        """The rows of the run's summary table: per model each claim, its status (one of
        :data:`~.verdicts.STATUSES`), key number and the checks that flip it. By default (a plugin study) one
        "not assessable" row per :meth:`headline` line, the line as its claim; each built-in study overrides it."""
        return [Verdict(self.name, "", line, NOT_ASSESSABLE) for line in self.headline(result)]

    @abstractmethod
    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """One model's headline numbers by name (a sweep plots each against training step)."""

    def main_view(self, config: StudyConfig) -> dict[str, Any]:
        """The table column values of the main view (e.g. ``{"pooling": "mean"}``): a sweep's layer figures plot
        the rows that have them (or leave the column empty)."""
        return {"subset": "all"}

    def sweep_summary(self, config: StudyConfig, numbers: list[dict[str, float]]) -> dict[str, Any] | None:
        """What a sweep says across its tasks, from each finished task's :meth:`numbers`, as entries of
        sweep.json; its ``sections`` (``[[heading, text], ...]``) close the sweep's report. None: nothing."""
        return None

    def join(self, result: StudyResult, others: dict[str, StudyResult]) -> None:  # noqa: B027 - most take none
        """Copy what this study shows of the same suite's ``others`` (its :attr:`companions` that ran before it)
        into ``result.summary``, before the result is written; figures and report then read it from there."""

    def finish(self, folder: Path, result: StudyResult) -> None:  # noqa: B027 - most studies add no files
        """Add files to a written run folder (after result.json); nothing by default."""
