"""One self-contained ``index.html`` for a run folder: verdicts first, then each study's
figures (embedded), report tables, method notes and manifest. No network, no scripts.

    write_index(Path("runs/20261122-153000"))     # a suite folder (one sub-folder per study)
    write_index(Path("runs/phases-20261122"))     # or one study's folder
"""

from __future__ import annotations

import base64
import html
import re
from datetime import datetime, timezone
from pathlib import Path

import markdown

from ..io import atomic_file
from .method_notes import COMPAT_DIFFERENCES

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 2.5em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.verdicts li { margin: 0.3em 0; } .warning { background: #fff4e0; border-left: 4px solid #e69500; padding: 0.4em 0.8em; }
.muted { color: #666; font-size: 13px; } code { background: #f5f5f5; padding: 0 3px; }
details { margin: 1em 0; } summary { cursor: pointer; font-weight: 600; }
"""


def study_folders(folder: Path) -> list[Path]:
    """The study folders of a run: ``folder`` itself, or its sub-folders holding a result.json."""
    if (folder / "result.json").is_file():
        return [folder]
    from ..studies.config_file import SUITE

    found = [p.parent for p in folder.glob("*/result.json")]
    return sorted(found, key=lambda p: (SUITE.index(p.name) if p.name in SUITE else len(SUITE), p.name))


def write_index(folder: Path, name: str | None = None) -> Path:
    """Render ``folder/index.html`` (atomically) from the files in the run folder; ``name``
    titles the page (default: the folder's name)."""
    from ..errors import OutputError

    folder = Path(folder)
    if not study_folders(folder):
        raise OutputError(f"{folder} holds no finished study (no result.json in it or its sub-folders); "
                          "pass a folder written by `layerscope run`")
    path = folder / "index.html"
    if path.exists() and not written_by_layerscope(path):
        raise OutputError(f"{path} was not written by layerscope and would be overwritten; move it out of "
                          f"{folder}, then render the page again")
    with atomic_file(path, "w") as f:
        f.write(render_index(folder, name or folder.resolve().name))
    return path


GENERATOR = '<meta name="generator" content="layerscope">'
"""In the head of every page layerscope renders: such a page may be rendered again over itself."""


def written_by_layerscope(page: Path) -> bool:
    """Whether the file ``page`` is an index.html that layerscope rendered (this version's or an earlier one's)."""
    try:
        with open(page, "rb") as f:
            head = f.read(16384)
    except OSError:
        return False
    return GENERATOR.encode() in head or (b"<title>layerscope run " in head and b" by layerscope from the files "
                                          b"in this folder" in head)


def render_index(folder: Path, name: str) -> str:
    from ..studies import StudyResult, get_study

    sections, verdicts, manifests = [], [], []
    for sub in study_folders(folder):
        result = StudyResult.load(sub)
        study = get_study(result.study)
        anchor = html.escape(sub.name if sub != folder else result.study)
        warnings = result.summary.get("warnings") or []
        lines = "".join(f"<li>{html.escape(line)}</li>" for line in _headline(study, result, sub))
        warn = "".join(f'<p class="warning">{html.escape(w)}</p>' for w in warnings)
        verdicts.append(f'<h3><a href="#{anchor}">{html.escape(study.title)}</a></h3>{warn}'
                        f'<ul class="verdicts">{lines}</ul>')
        sections.append(_section(sub, folder, anchor, study, result, warn))
        manifests.append(_manifest(study.title, result.manifest))
    title = f"layerscope run {html.escape(name)}"
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>{GENERATOR}'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>'
            f'<body><h1>{title}</h1><p class="muted">Rendered {made} by layerscope from the files in this folder; '
            f'<code>layerscope report {html.escape(name)}</code> renders it again.</p>'
            f'<h2 id="summary">Summary of verdicts</h2>{"".join(verdicts)}'
            f'{"".join(sections)}<h2 id="manifest">Manifest</h2>{"".join(manifests)}</body></html>\n')


def _headline(study, result, folder: Path) -> list[str]:
    """The study's verdict lines; a result.json that parses but lacks what the study wrote is a
    :class:`ResultFileError` naming it, not a KeyError."""
    from ..errors import ResultFileError
    from ..studies.result import rerun_hint

    try:
        return list(study.headline(result))
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ResultFileError(f"{folder / 'result.json'} lacks what a {result.study} run writes ({type(exc).__name__}: "
                              f"{str(exc)[:80]}); the file is damaged: {rerun_hint(folder)}") from None


def _section(folder: Path, root: Path, anchor: str, study, result, warn: str) -> str:
    figures = "".join(embed_figure(png) for png in sorted(folder.glob("*.png")))
    report = folder / "report.md"
    body = _markdown(report.read_text(encoding="utf-8")) if report.is_file() else ""
    compat = "seed compat (the notebooks' method)" if result.config.get("compat") == "seed" else "layerscope default"
    notes = "".join(f"<tr><td>{html.escape(seed)}</td><td>{html.escape(default)}</td></tr>"
                    for seed, default in COMPAT_DIFFERENCES.get(result.study, []))
    files = " ".join(f'<a href="{html.escape(p.relative_to(root).as_posix())}">{html.escape(p.name)}</a>'
                     for p in sorted(folder.iterdir()) if p.suffix in (".csv", ".json", ".md", ".zip"))
    return (f'<h2 id="{anchor}">{html.escape(study.title)}</h2><p><em>{html.escape(study.question)}</em></p>'
            f'<p class="muted">Method: {compat}. Files: {files}</p>{warn}{figures}'
            f'<details open><summary>Report</summary>{body}</details>'
            f'<details><summary>Method notes: --compat seed vs the default</summary><table>'
            f'<tr><th>notebooks (--compat seed)</th><th>layerscope default</th></tr>{notes}</table></details>')


def embed_figure(png: Path) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    name = html.escape(png.stem)
    return f'<figure><img alt="{name}" src="data:image/png;base64,{data}"><figcaption class="muted">{name}</figcaption></figure>'


def _markdown(text: str) -> str:
    """Render a study report; its headings move down two levels to sit under the study's h2."""
    out = markdown.markdown(text, extensions=["tables"], output_format="html")
    return re.sub(r"<(/?)h([1-6])", lambda m: f"<{m.group(1)}h{min(int(m.group(2)) + 2, 6)}", out)


def _manifest(title: str, manifest: dict) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(str(m.get('name')))}</td><td><code>{html.escape(str(m.get('weights_hash'))[:16])}"
        f"</code></td><td>{m.get('n_layers')}</td><td>{html.escape(str(m.get('dtype')))}</td>"
        f"<td>{html.escape(str(m.get('device')))}</td></tr>" for m in manifest.get("models", []))
    dataset = manifest.get("dataset") or {}
    versions = ", ".join(f"{k} {v}" for k, v in (manifest.get("versions") or {}).items())
    timings = ", ".join(f"{k} {v:.1f}" for k, v in (manifest.get("timings") or {}).items()
                        if isinstance(v, (int, float)))
    return (f"<h3>{html.escape(title)}</h3><table><tr><th>model</th><th>weights SHA-256</th><th>layers</th>"
            f"<th>dtype</th><th>device</th></tr>{rows}</table>"
            f"<p>Data: {html.escape(str(dataset.get('source')))} (SHA-256 <code>{html.escape(str(dataset.get('hash')))}"
            f"</code>). Seed {manifest.get('seed')}.<br>Versions: {html.escape(versions)}.<br>"
            f"Timings (s): {html.escape(timings)}.</p>")
