"""A sweep's report.md and its self-contained index.html.

    text = sweep_report(summary)                 # markdown: tasks, failures, headline numbers (and their names)
    write_sweep_index(Path("runs/sweep"), summary)
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from ..report.figure_files import figure_files, warn_skipped
from ..report.html import embed_figure, markdown_html, page, write_page
from ..report.markdown import md_table, md_text, no_raw_html, number
from .figures import readable


def sweep_report(summary: dict) -> str:
    """``sweep_report(summary)``: the markdown of a sweep (``summary`` as ``sweep.json`` holds it): its tasks,
    failures, headline numbers with a readable name for each column key, verdicts and what the study says across the
    tasks."""
    tasks = summary["tasks"]
    done = [t for t in tasks if t.get("numbers") is not None]
    failed = [t for t in tasks if t["status"] == "failed"]
    models = len({t["model"] for t in tasks})
    out = [f"# Sweep: {md_text(summary['study'])}, {len(tasks)} task{'s' * (len(tasks) != 1)} over {models} "
           f"model{'s' * (models != 1)}", "",
           f"Executor: {md_text(summary['executor'])}. {len(done)} of {len(tasks)} tasks finished"
           + (f", {len(failed)} failed (run the same command again to retry them)." if failed else "."), "",
           "Each task ran the study on one model into its own folder under `tasks/`; `table.csv` gathers "
           "their tables, with the model's `revision` and training `step` as columns.", "",
           "## Tasks", ""]
    out.append(md_table(["model", "revision", "step", "layers", "status", "seconds", "folder"],
                        [[md_text(t["model"]), md_text(t["revision"] or ""), "" if t["step"] is None else t["step"],
                          t.get("n_layers", ""), md_text(t["status"]),
                          "" if t["seconds"] is None else f"{t['seconds']:.1f}",
                          f"[{md_text(t['folder'])}]({quote(str(t['folder']))}/index.html)"
                          if t.get("numbers") is not None else ""]
                         for t in tasks]))
    if failed:
        out += ["", "## Failed tasks", ""] + [f"- **{md_text(t['spec'])}**: {md_text(t['error'])}" for t in failed]
    if done:
        names = list(dict.fromkeys(n for t in done for n in t["numbers"]))
        out += ["", "## Headline numbers", ""]
        out.append(md_table(["model", "revision", "step", *map(md_text, names)],
                            [[md_text(t["model"]), md_text(t["revision"] or ""), "" if t["step"] is None else t["step"],
                              *(number(t["numbers"].get(n)) for n in names)] for t in done]))
        out += ["", "Columns: " + "; ".join(f"{_code(n)}: {md_text(readable(n))}" for n in names) + "."]
        out += ["", "## Verdicts", ""] + [f"- {md_text(line)}" for t in done for line in t["headline"]]
    for heading, text in summary.get("sections") or []:  # what the study says across the tasks
        out += ["", f"## {md_text(heading)}", "", f"**{md_text(text)}**"]
    return no_raw_html("\n".join(out) + "\n")


def _code(name: str) -> str:
    """``_code("r_final")``: a column key as a markdown code span, or as plain text (:func:`md_text`) when a
    backtick or a line break in it would end the span."""
    return md_text(name) if any(c in name for c in "`\r\n") else f"`{name}`"


def write_sweep_index(folder: Path, summary: dict) -> Path:
    """``folder/index.html``: the report with every figure of the sweep folder embedded, written atomically; figure
    files that are not what their names say (:func:`~layerscope.report.figure_files.read_figure`) are left out and
    named in one warning line."""
    skipped: list[str] = []
    figures = "".join(embed_figure(figure, href=figure.path.name)  # the page is beside them
                      for figure in figure_files(folder, folder, skipped))
    warn_skipped(folder, skipped)
    figures = f"<h2>Figures</h2>{figures}" if figures else ""  # none when no task finished
    body = markdown_html(sweep_report(summary)) + figures
    return write_page(folder / "index.html", page(f"layerscope sweep {folder.resolve().name}", body, heading=False))
