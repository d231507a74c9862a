"""The interface every study implements, and the registry of studies.

    class MyStudy(Study):
        name = "mine"
        def run(self, config) -> StudyResult: ...        # load, extract, analyse
        def figures(self, result) -> dict[str, Figure]: ...   # from result alone
        def report(self, result) -> str: ...              # markdown, from result alone
        def headline(self, result) -> list[str]: ...      # one line per verdict
        def numbers(self, result, model) -> dict[str, float]: ...   # headline numbers, for sweeps

``figures`` and ``report`` read only the result (summary and table), so a finished
run folder can be re-rendered without the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from matplotlib.figure import Figure

from ..models import DEFAULT_MODEL
from .config import StudyConfig
from .result import StudyResult


class Study(ABC):
    name: ClassVar[str]
    title: ClassVar[str]
    question: ClassVar[str]
    default_models: ClassVar[tuple[str, ...]] = (DEFAULT_MODEL,)

    @abstractmethod
    def run(self, config: StudyConfig) -> StudyResult: ...

    @abstractmethod
    def figures(self, result: StudyResult) -> dict[str, Figure]: ...

    @abstractmethod
    def report(self, result: StudyResult) -> str: ...

    @abstractmethod
    def headline(self, result: StudyResult) -> list[str]:
        """The verdicts in a line each, for the console and the top of a suite report."""

    @abstractmethod
    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """One model's headline numbers by name (a sweep plots each against training step)."""

    def finish(self, folder: Path, result: StudyResult) -> None:
        """Add files to a written run folder (after result.json); nothing by default."""
