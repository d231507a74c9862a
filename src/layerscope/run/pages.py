"""A run folder's ``index.html``, from its study folders' files: what ``layerscope report DIR`` renders.

    write_index(Path("runs/20261122-153000"))     # a suite folder (one sub-folder per study)
    write_index(Path("runs/phases-20261122"))     # or one study's folder
"""

from __future__ import annotations

from pathlib import Path

from ..errors import OutputError, ResultFileError, short
from ..modes import NOTEBOOKS
from ..report.html import Section, check_page, render_run, write_page
from ..study.result import StudyResult, rerun_hint
from ..study.verdicts import Verdict, VerdictError
from .registry import get_study, studies


def load_result(folder: Path) -> StudyResult:
    """:meth:`StudyResult.load`, and a :class:`ResultFileError` when the study it names runs under no name here
    (the file is damaged, or the plugin that wrote it is gone)."""
    result = StudyResult.load(folder)
    if result.study not in studies():
        path = Path(folder) / "result.json"
        raise ResultFileError(f"{path} names an unknown study {result.study[:40]!r}; it is damaged: "
                              f"{rerun_hint(Path(folder))}")
    return result


def study_folders(folder: Path) -> list[Path]:
    """The study folders of a run: ``folder`` itself, or its sub-folders holding a result.json, in suite order."""
    if (folder / "result.json").is_file():
        return [folder]
    order = list(studies())
    found = [p.parent for p in folder.glob("*/result.json")]
    return sorted(found, key=lambda p: (order.index(p.name) if p.name in order else len(order), p.name))


def finished_studies(folder: Path) -> list[Path]:
    """:func:`study_folders`, or an :class:`OutputError` when ``folder`` holds no finished study."""
    subs = study_folders(folder)
    if not subs:
        raise OutputError(f"{folder} holds no finished study (no result.json in it or its sub-folders); "
                          "pass a folder written by `layerscope run`")
    return subs


def write_index(folder: Path, name: str | None = None) -> Path:
    """Render ``folder/index.html`` (atomically) from the files in the run folder; ``name`` titles the page
    (default: the folder's name)."""
    folder = Path(folder)
    subs = finished_studies(folder)
    check_page(folder / "index.html")  # before reading anything: the user's own page is never overwritten
    sections = [section(sub, folder) for sub in subs]
    return write_page(folder / "index.html", render_run(folder, name or folder.resolve().name, sections))


def section(sub: Path, root: Path, result: StudyResult | None = None) -> Section:
    """One study folder as a page section: its result (read back unless given), its study's title, notes, headline
    and its rows of the summary table."""
    result = result if result is not None else load_result(sub)
    study = get_study(result.study)
    seed = result.config.get("compat") == NOTEBOOKS
    return Section(anchor=sub.name if sub != root else result.study, title=study.title, question=study.question,
                   headline=_headline(study, result, sub), folder=sub,
                   method="notebooks mode (the notebooks' method)" if seed else "layerscope default",
                   method_notes=list(study.compat_notes), warnings=list(result.summary.get("warnings") or []),
                   manifest=result.manifest, verdicts=_verdicts(study, result, sub))


def _headline(study, result: StudyResult, folder: Path) -> list[str]:
    """The study's verdict lines; a result.json that parses but lacks what the study wrote is a
    :class:`ResultFileError` naming it, not a KeyError."""
    try:
        return list(study.headline(result))
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise _damaged(result, folder, exc) from None


def _verdicts(study, result: StudyResult, folder: Path) -> list[tuple[str, str, str, str, str, tuple[str, ...]]]:
    """The study's rows of the summary table, as plain values; a damaged result.json is a :class:`ResultFileError`
    (as for :func:`_headline`), and a row that is no :class:`Verdict` a :class:`VerdictError` naming the study."""
    try:
        verdicts = list(study.verdicts(result))
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise _damaged(result, folder, exc) from None
    for v in verdicts:
        if not isinstance(v, Verdict):
            raise VerdictError(f"study {short(result.study)}'s verdicts() returned {short(v)}; return a list of "
                               "layerscope.study.verdicts.Verdict")
    return [v.row() for v in verdicts]


def _damaged(result: StudyResult, folder: Path, exc: Exception) -> ResultFileError:
    return ResultFileError(f"{folder / 'result.json'} lacks what a {result.study} run writes ({type(exc).__name__}: "
                           f"{str(exc)[:80]}); the file is damaged: {rerun_hint(folder)}")
