"""The ``layerscope`` command line: ``layerscope --help``."""

from .app import app, main
from . import extract as _extract  # noqa: F401  (registers the command)

__all__ = ["app", "main"]
