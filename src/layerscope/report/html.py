"""Self-contained HTML pages: no network, no scripts, figures embedded. Knows no study: it renders plain sections.

    page("layerscope run X", body_html)                    # the page skeleton every layerscope page shares
    render_run("runs/X", sections)                         # a run's page: verdicts first, then each section
    verdict_table([("phases", "m", "claim", "holds but fragile", "r = -0.45", ("without c3",))])  # the summary
    write_page(Path("runs/X/index.html"), text)            # atomically; never over a page layerscope did not write
    markdown_html(report_md, shift=2)                      # a report.md as HTML: its text is text, never markup

Every string from outside (a category, a text, a model name, a path, what a plugin study returns) is text, never
markup: each plain string goes into the page through ``html.escape``; a report.md is rendered by markdown-it with
raw HTML off and only relative, ``#`` and http(s) links (:func:`safe_link`); and every page carries a
Content-Security-Policy (:data:`CSP`) that runs no script and loads nothing but its own embedded images and style.
A run folder's files are data from outside too: a figure file is embedded only when it is a regular file inside
the run folder whose bytes are what its name says (:mod:`layerscope.report.figure_files`); the others are named in
one warning line.

A :class:`Section` is one study's part of a run page, in plain values (title, headline lines, its rows of the
summary table, method notes, its folder's figures and report.md); :mod:`layerscope.run.pages` builds them from
run folders.
"""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from markdown_it import MarkdownIt

from ..errors import OutputError
from ..io import atomic_file
from .figure_files import Figure, NotAFigure, figure_files, read_inside, warn_skipped

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 2.5em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.verdicts li { margin: 0.3em 0; }
.status { display: inline-block; padding: 1px 7px; border-radius: 3px; font-weight: 600; white-space: nowrap; }
.status-robust { background: #005a9c; color: #fff; border: 2px solid #003a66; }
.status-fragile { background: #f0a830; color: #000; border: 2px dashed #000; }
.status-not-significant { background: #e8e8e8; color: #222; border: 1px solid #767676; }
.status-not-assessable { background: #fff; color: #444; border: 1px dotted #444; font-style: italic; }
.warning { background: #fff4e0; border-left: 4px solid #e69500; padding: 0.4em 0.8em; }
.muted { color: #666; font-size: 13px; } code { background: #f5f5f5; padding: 0 3px; }
details { margin: 1em 0; } summary { cursor: pointer; font-weight: 600; }
"""

GENERATOR = '<meta name="generator" content="layerscope">'
"""In the head of every page layerscope renders: such a page may be rendered again over itself."""
CSP = ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
       'style-src \'unsafe-inline\'">')
"""In the head of every page: no script runs and nothing is fetched; only embedded images and the page's style."""
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*):", re.IGNORECASE)
STATUS_CLASSES = {"holds and robust": "status-robust", "holds but fragile": "status-fragile",
                  "not significant": "status-not-significant", "not assessable": "status-not-assessable"}
"""The CSS class of each verdict status in :data:`STYLE`: a colour-blind-safe blue and orange for the two that
hold, grey and white for the two that do not; every badge also shows its status's word and a border of its own."""


@dataclass
class Section:
    """One study's part of a run page, in plain values."""

    anchor: str
    title: str
    question: str
    headline: list[str]
    folder: Path
    """The study's run folder: its figures (those :func:`~layerscope.report.figure_files.figure_files` passes),
    report.md and data files are shown."""
    method: str
    """How it was computed, in a few words (e.g. "layerscope default")."""
    method_notes: list[tuple[str, str]] = field(default_factory=list)
    """(the notebooks' method, the layerscope default) rows."""
    warnings: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)
    verdicts: list[tuple[str, str, str, str, str, tuple[str, ...]]] = field(default_factory=list)
    """Its rows of the summary table: (study, model, claim, status, key number, checks that flip it)."""


def page(title: str, body: str, heading: bool = True, note: str = "") -> str:
    """A whole page: ``title`` (escaped here) in the head and, with ``heading``, as its h1; a line saying when it
    was made, ending in ``note`` (HTML); then ``body`` (HTML) as it is."""
    title = html.escape(title)
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{CSP}<title>{title}</title>{GENERATOR}'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>'
            f'<body>{f"<h1>{title}</h1>" if heading else ""}<p class="muted">Rendered {made} by layerscope from the '
            f'files in this folder{note}.</p>{body}</body></html>\n')


def check_page(path: Path) -> None:
    """:class:`OutputError` when ``path`` holds a file layerscope did not render (it would be overwritten)."""
    if path.exists() and not written_by_layerscope(path):
        raise OutputError(f"{path} was not written by layerscope and would be overwritten; move it out of "
                          f"{path.parent}, then render the page again")


def write_page(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically; an existing file there that layerscope did not render is kept."""
    check_page(path)
    with atomic_file(path, "w") as f:
        f.write(text)
    return path


def written_by_layerscope(page: Path) -> bool:
    """Whether the file ``page`` is an index.html that layerscope rendered (this version's or an earlier one's)."""
    try:
        with open(page, "rb") as f:
            head = f.read(16384)
    except OSError:
        return False
    older = (b"<title>layerscope run " in head or b"<title>layerscope sweep " in head)
    return GENERATOR.encode() in head or (older and b" by layerscope from the files in this folder" in head)


def render_run(root: Path, name: str, sections: list[Section]) -> str:
    """A run's page: the summary table of every section's verdicts (each study linked to its section) and their
    warnings, then each section, then the manifests. Figure files it leaves out are named in one warning line."""
    skipped: list[str] = []
    bodies = "".join(section_html(root, s, skipped) for s in sections)
    warn_skipped(root, skipped)
    manifests = "".join(_manifest(s.title, s.manifest) for s in sections)
    body = (f'<h2 id="summary">Summary of verdicts</h2>{summary_html(sections)}'
            f'{bodies}<h2 id="manifest">Manifest</h2>{manifests}')
    again = f'; <code>layerscope report {html.escape(name)}</code> renders it again'
    return page(f"layerscope run {name}", body, note=again)


def summary_html(sections: list[Section]) -> str:
    """What opens a run page and a notebook's result: the :func:`verdict_table` of every section's verdicts (each
    study named by its title and linked to its section), then the sections' warnings."""
    rows, anchors, warnings = [], [], []
    for s in sections:
        link = f'<a href="#{html.escape(s.anchor)}">{html.escape(s.title)}</a>'
        rows += [(s.title, *row[1:]) for row in s.verdicts]
        anchors += [s.anchor] * len(s.verdicts)
        warnings += [f'<p class="warning">{link}: {html.escape(w)}</p>' for w in s.warnings]
    return verdict_table(rows, anchors) + "".join(warnings)


def verdict_table(rows: Iterable[Sequence[Any]], anchors: Sequence[str | None] | None = None) -> str:
    """The summary table of a run (or of a notebook's suite): one row per verdict, ``rows`` of plain values
    ``(study, model, claim, status, key number, checks that flip it)``; the status a badge with its word and the
    class of :data:`STATUS_CLASSES`; ``anchors[i]`` (when given and not None) links row i's study to ``#anchor``.
    Every cell is text (``html.escape``)."""
    anchors = list(anchors or [])
    body = []
    for i, (study, model, claim, status, key, flips) in enumerate(rows):
        anchor = anchors[i] if i < len(anchors) else None
        name = html.escape(str(study))
        cell = f'<a href="#{html.escape(anchor)}">{name}</a>' if anchor else name
        badge = (f'<span class="status {STATUS_CLASSES.get(str(status), "status-other")}">'
                 f'{html.escape(str(status))}</span>')
        flipped = ", ".join(map(str, flips)) if flips else "n/a" if status == "not assessable" else "none"
        body.append(f"<tr><td>{cell}</td><td>{html.escape(str(model))}</td><td>{html.escape(str(claim))}</td>"
                    f"<td>{badge}</td><td>{html.escape(str(key))}</td><td>{html.escape(flipped)}</td></tr>")
    if not body:
        return '<p class="muted">No study reported a verdict.</p>'
    return ('<table class="summary-table"><tr><th>study</th><th>model</th><th>claim</th><th>status</th>'
            f'<th>key number</th><th>checks that flip it</th></tr>{"".join(body)}</table>')


def section_html(root: Path, s: Section, skipped: list[str] | None = None, inside: Path | None = None) -> str:
    """One study's section of a run page (and of a notebook's ``_repr_html_``): its title, question, verdict lines,
    warnings, figures, report and method notes; file links relative to ``root``. Only figure files that pass
    :func:`~layerscope.report.figure_files.read_figure` inside the run folder ``inside`` (default ``root``) are
    shown; the others are appended to ``skipped``, or, when it is None, named in a warning line here."""
    warn = "".join(f'<p class="warning">{html.escape(w)}</p>' for w in s.warnings)
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in s.headline)
    inside = root if inside is None else inside
    left_out: list[str] = [] if skipped is None else skipped
    figures = "".join(embed_figure(figure, href=figure.path.relative_to(root).as_posix())
                      for figure in figure_files(s.folder, inside, left_out))
    report, body = s.folder / "report.md", ""
    if os.path.lexists(report):  # data from outside too: never a link to a file elsewhere (a key, a password file)
        try:
            body = markdown_html(read_inside(report, inside).decode("utf-8", errors="replace"), shift=2)
        except NotAFigure as why:
            left_out.append(f"{os.path.relpath(report, inside)} ({why})")
    if skipped is None:
        warn_skipped(inside, left_out)
    notes = "".join(f"<tr><td>{html.escape(seed)}</td><td>{html.escape(default)}</td></tr>"
                    for seed, default in s.method_notes)
    files = " ".join(f'<a href="{html.escape(quote(p.relative_to(root).as_posix()))}">{html.escape(p.name)}</a>'
                     for p in sorted(s.folder.iterdir()) if p.suffix in (".csv", ".json", ".md", ".zip"))
    return (f'<h2 id="{html.escape(s.anchor)}">{html.escape(s.title)}</h2><p><em>{html.escape(s.question)}</em></p>'
            f'<p class="muted">Method: {html.escape(s.method)}. Files: {files}</p>{warn}'
            f'<ul class="verdicts">{lines}</ul>{figures}'
            f'<details open><summary>Report</summary>{body}</details>'
            f'<details><summary>Method notes: --compat notebooks vs the default</summary><table>'
            f'<tr><th>notebooks (--compat notebooks)</th><th>layerscope default</th></tr>{notes}</table></details>')


def embed_figure(figure: Figure, href: str | None = None) -> str:
    """A figure for the page, captioned with the file's stem: an SVG or PNG as an ``<img>`` with its checked bytes
    (:func:`~layerscope.report.figure_files.figure_files`) in a base64 ``data:`` URL (an SVG in an ``<img>`` runs
    no script; its markup is never put in the page); a PDF, which no ``<img>`` shows, as its name, linked to
    ``href`` (the file's URL relative to the page) when given."""
    path = figure.path
    name = html.escape(path.stem)
    caption = f'<figcaption class="muted">{name}</figcaption></figure>'
    if figure.kind == "application/pdf":
        file = html.escape(path.name)
        link = f'<a href="{html.escape(quote(href))}">{file}</a>' if href is not None else f"<code>{file}</code>"
        return f'<figure><p class="muted">PDF only, not shown here: {link}</p>{caption}'
    data = base64.b64encode(figure.data).decode("ascii")
    return f'<figure><img alt="{name}" src="data:{figure.kind};base64,{data}">{caption}'


def safe_link(url: str) -> bool:
    """``safe_link("#verdicts")``, ``safe_link("tasks/a/index.html")``, ``safe_link("https://arxiv.org/x")``: True;
    a link or image with any other scheme (``javascript:``, ``vbscript:``, ``data:``, ``file:``...) is False,
    and markdown-it leaves it as text. ``url`` as markdown-it passes it: normalized, control characters and
    spaces percent-encoded."""
    scheme = _SCHEME.match(url)
    return scheme is None or scheme.group(1).lower() in ("http", "https")


def _markdown_it() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.validateLink = safe_link
    return md


_MARKDOWN = _markdown_it()


def markdown_html(text: str, shift: int = 0) -> str:
    """Markdown (with tables) as HTML, raw HTML shown as text and only :func:`safe_link` links; headings move down
    ``shift`` levels (a study report sits under an h2)."""
    out = _MARKDOWN.render(text)
    if not shift:
        return out
    return re.sub(r"<(/?)h([1-6])", lambda m: f"<{m.group(1)}h{min(int(m.group(2)) + shift, 6)}", out)


def _manifest(title: str, manifest: dict) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(str(m.get('name')))}</td><td>{html.escape(str(m.get('exact') or m.get('name')))}</td>"
        f"<td><code>{html.escape(str(m.get('weights_hash'))[:16])}"
        f"</code></td><td>{html.escape(str(m.get('n_layers')))}</td><td>{html.escape(str(m.get('dtype')))}</td>"
        f"<td>{html.escape(str(m.get('device')))}</td></tr>" for m in manifest.get("models", []))
    dataset = manifest.get("dataset") or {}
    versions = ", ".join(f"{k} {v}" for k, v in (manifest.get("versions") or {}).items())
    timings = ", ".join(f"{k} {v:.1f}" for k, v in (manifest.get("timings") or {}).items()
                        if isinstance(v, (int, float)))
    return (f"<h3>{html.escape(title)}</h3><table><tr><th>model</th><th>checkpoint and quantization</th>"
            "<th>weights SHA-256</th><th>layers</th>"
            f"<th>dtype</th><th>device</th></tr>{rows}</table>"
            f"<p>Data: {html.escape(str(dataset.get('source')))} (SHA-256 <code>{html.escape(str(dataset.get('hash')))}"
            f"</code>). Seed {html.escape(str(manifest.get('seed')))}.<br>Versions: {html.escape(versions)}.<br>"
            f"Timings (s): {html.escape(timings)}.</p>")
