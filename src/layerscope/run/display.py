"""Results in a notebook: ``display(result)`` shows what the study's section of ``index.html`` shows.

    result = run_study(StudyConfig(study="phases"))
    result                                   # in Jupyter: the verdict table, the verdict lines, figures, report
    suite = load_run("runs/20261122-153000") # a suite folder -> SuiteResult; a study folder -> StudyResult
    suite                                    # the verdict table of every study, then each study's section
    suite["phases"]                          # one study's StudyResult

One renderer, two callers: a notebook's HTML is :func:`~layerscope.report.html.summary_html` and
:func:`~layerscope.report.html.section_html`, the functions that write ``index.html``, fed by the same
:func:`~layerscope.run.pages.section`. A result still in memory is written to a temporary run folder first
(its figures drawn and its report rendered as ``layerscope run`` would), so it looks exactly like its page.
Everything from outside is escaped there, as on the page; the style is scoped to the output's own ``<div>``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import OutputError
from ..report.figure_files import warn_skipped
from ..report.html import STYLE, Section, section_html, summary_html
from ..study.result import StudyResult
from .pages import load_result, section, study_folders

SCOPE = "layerscope-output"
"""The class of the ``<div>`` a notebook output sits in: its style rules reach nothing outside it."""


def scoped_style(css: str = STYLE) -> str:
    """The page's style with every selector under ``.layerscope-output`` (``body`` becomes the div itself), so a
    notebook's own page keeps its look."""
    def scope(match: re.Match) -> str:
        selectors = [s.strip() for s in match.group(1).split(",")]
        scoped = [f".{SCOPE}" if s == "body" else f".{SCOPE} {s}" for s in selectors]
        return ", ".join(scoped) + " {"

    return re.sub(r"([^{}]+?)\s*\{", scope, css)


def _wrap(body: str) -> str:
    return f'<div class="{SCOPE}"><style>{scoped_style()}</style>{body}</div>'


def _sections_html(sections: list[Section], root: Path, inside: Path | None = None) -> str:
    """The verdict table and each section, file links relative to ``root``; figure files that do not pass the
    checks in the run folder ``inside`` (default ``root``) are left out and named in one warning line."""
    skipped: list[str] = []
    body = summary_html(sections) + "".join(section_html(root, s, skipped, inside) for s in sections)
    warn_skipped(root if inside is None else inside, skipped)
    return body


def study_html(result: StudyResult) -> str:
    """A study result as notebook HTML: its verdict table, then its section as ``index.html`` shows it. A result
    loaded from or written to a run folder is shown from that folder; one in memory is written to a temporary
    folder first."""
    folder = result.folder
    if folder is not None and (Path(folder) / "result.json").is_file():
        run = Path(folder)  # the run folder: its figures are shown only from inside it
        return _wrap(_sections_html([section(run, run.parent, result)], run.parent, inside=run))
    with tempfile.TemporaryDirectory(prefix="layerscope-display-") as tmp:
        out = Path(tmp) / result.study
        result.write(out)
        result.folder = None  # the temporary folder is gone when the HTML is made: do not keep it
        return _wrap(_sections_html([section(out, Path(tmp))], Path(tmp)))


@dataclass
class SuiteResult(Mapping[str, StudyResult]):
    """A finished suite folder: ``suite["phases"]`` is that study's :class:`StudyResult`; in a notebook it shows
    the verdict table of every study, then each study's section, as the suite's ``index.html`` does."""

    folder: Path
    results: dict[str, StudyResult] = field(repr=False)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> SuiteResult:
        folder = Path(folder)
        subs = study_folders(folder)
        if not subs or subs == [folder]:
            raise OutputError(f"{folder} is not a suite folder (no study sub-folders with a result.json); pass the "
                              "folder `layerscope run` wrote for several studies, or load one study with "
                              "StudyResult.load")
        return cls(folder=folder, results={sub.name: load_result(sub) for sub in subs})

    def __getitem__(self, study: str) -> StudyResult:
        return self.results[study]

    def __iter__(self) -> Iterator[str]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def _repr_html_(self) -> str:
        sections = [section(self.folder / name, self.folder, result) for name, result in self.results.items()]
        return _wrap(_sections_html(sections, self.folder))


def load_run(folder: str | os.PathLike) -> StudyResult | SuiteResult:
    """``load_run("runs/x")``: a study folder as its :class:`StudyResult`, a suite folder as a :class:`SuiteResult`;
    a folder holding neither is an :class:`OutputError` naming what to pass."""
    folder = Path(folder)
    if (folder / "result.json").is_file():
        return load_result(folder)
    if not folder.is_dir():
        raise OutputError(f"{folder} is not a folder; pass a run folder written by `layerscope run`")
    return SuiteResult.load(folder)
