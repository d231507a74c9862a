"""``layerscope report DIR``: render a finished run folder's index.html again, without the model."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import OutputError
from .app import app, user_errors


@app.command("report")
@user_errors
def report_command(
    folder: Path = typer.Argument(..., help="A run folder written by `layerscope run` (one study or a suite)."),
) -> None:
    """Rebuild FOLDER/index.html from the run folder's result.json, table.csv, figures and report.md."""
    from ..studies.pages import write_index  # the studies (and torch) only when the command runs

    if not folder.is_dir():
        raise OutputError(f"{folder} is not a folder; pass the run folder that `layerscope run` wrote")
    typer.echo(f"wrote {write_index(folder)}")
