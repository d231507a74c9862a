"""The ``layerscope`` command line: ``layerscope --help``.

    from layerscope.cli import app        # a typer.Typer: app(["run", "phases"]), CliRunner().invoke(app, ...)

Importing it loads no study, model or torch: each command imports what it needs when it runs.
"""

from . import extract as _extract  # noqa: F401  (registers the command)
from . import lens as _lens  # noqa: F401
from . import report as _report  # noqa: F401
from . import run as _run  # noqa: F401
from . import sweep as _sweep  # noqa: F401
from . import validate as _validate  # noqa: F401
from .app import app, main

__all__ = ["app", "main"]
