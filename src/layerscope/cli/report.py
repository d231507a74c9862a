"""``layerscope report DIR``: render a finished run folder's index.html again, without the model.

    layerscope report runs/X                          # index.html again, from the files in runs/X
    layerscope report runs/X --figure-format svg,pdf  # first every study's figures again as SVG and PDF
"""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import OutputError
from ..terminal import say
from .app import app, user_errors


@app.command("report")
@user_errors
def report_command(
    folder: Path = typer.Argument(..., metavar="FOLDER",
                                  help="A run folder written by `layerscope run` (one study or a suite)."),
    figure_format: str = typer.Option(None, "--figure-format", help="Draw every study's figures again from its "
                                      "result.json and table.csv (no model is loaded) in these formats, "
                                      "comma-separated: png, svg, pdf (e.g. svg,pdf); written beside the "
                                      "existing ones. The page then shows the SVG of a figure that has one."),
) -> None:
    """Rebuild FOLDER/index.html from the run folder's result.json, table.csv, figures and report.md."""
    from ..io import worded_writes
    from ..run.output import rewrite_figures
    from ..run.pages import write_index
    from ..study.config import figure_formats  # the studies (and torch) only when the command runs

    formats = figure_formats(figure_format) if figure_format is not None else None
    if not folder.is_dir():
        raise OutputError(f"{folder} is not a folder; pass the run folder that `layerscope run` wrote")
    elsewhere = "copy the run folder to another folder"  # the fix, completed by what that folder needs
    if formats is not None:
        with worded_writes(folder, elsewhere):
            written = rewrite_figures(folder, formats)
        say(f"wrote {len(written)} figure files ({', '.join(formats)})")
    with worded_writes(folder, elsewhere):
        index = write_index(folder)
    say(f"wrote {index}")
