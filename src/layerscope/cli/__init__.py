"""The ``layerscope`` command line: ``layerscope --help``."""

from .app import app, main
from . import extract as _extract  # noqa: F401  (registers the command)
from . import report as _report  # noqa: F401
from . import run as _run  # noqa: F401
from . import sweep as _sweep  # noqa: F401

__all__ = ["app", "main"]
