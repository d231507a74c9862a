"""Errors a user can act on.

Raise a :class:`LayerscopeError` (or a subclass) for anything caused by input:
its message names the problem and the fix. The CLI prints the message, without a
traceback, and exits with status 2. Bugs stay ordinary exceptions.
"""

from __future__ import annotations


class LayerscopeError(Exception):
    """Bad input or an unusable environment; the message says what to do."""


class ModelLoadError(LayerscopeError):
    """A model spec could not be resolved or loaded."""


class DatasetError(LayerscopeError):
    """A dataset file is missing or malformed."""


class ExtractionError(LayerscopeError):
    """Texts or settings that extraction cannot work with."""


class OutputError(LayerscopeError):
    """An output folder that cannot be written without losing something."""
