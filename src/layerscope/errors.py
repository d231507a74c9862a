"""Errors a user can act on.

Raise a :class:`LayerscopeError` (or a subclass) for anything caused by input:
its message names the problem and the fix. The CLI prints the message, without a
traceback, and exits with status 2. Bugs stay ordinary exceptions.

A fix that is spelled differently on the command line and in Python is written once in both
spellings, and each side shows its own:

    raise OutputError(f"{out} is not empty; choose another {OUT}, or pass {FORCE} to replace it")
    str(error)            # "... choose another out folder, or pass force=True to replace it"
    error.cli_message()   # "... choose another --out, or pass --force to replace it" (what the CLI prints)
"""

from __future__ import annotations

import re
from typing import Any

_SPELLED = re.compile("\x1e([^\x1e\x1f]*)\x1f([^\x1e\x1f]*)\x1e")


def spelled(cli: str, python: str) -> str:
    """A fix in both spellings, for a :class:`LayerscopeError` message: the CLI shows ``cli``, Python ``python``."""
    return f"\x1e{cli}\x1f{python}\x1e"


FORCE = spelled("--force", "force=True")
OUT = spelled("--out", "out folder")


def check_finite_rows(x, what: str, needs: str) -> None:
    """``check_finite_rows(x, "x", "CKA")``: one :class:`LayerscopeError` naming how many rows of the 2-D numpy
    array ``x`` hold NaN or inf, and the first, when any does; ``needs``: what wants finite states."""
    import numpy as np

    finite = np.isfinite(x).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise LayerscopeError(f"{what}: {len(bad)} of {len(x)} rows hold NaN or inf (the first is row {bad[0]}); "
                              f"{needs} needs finite states, so run the model in float32 and check its weights")


def short(value: Any, limit: int = 80) -> str:
    """``short(value)``: ``repr(value)`` cut to ``limit`` characters, for error messages about any input."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class LayerscopeError(Exception):
    """Bad input or an unusable environment; the message says what to do."""

    def __str__(self) -> str:
        return _SPELLED.sub(lambda m: m.group(2), super().__str__())

    def cli_message(self) -> str:
        """The message as the command line spells it (``--force`` where Python says ``force=True``)."""
        return _SPELLED.sub(lambda m: m.group(1), super().__str__())


class ModelLoadError(LayerscopeError):
    """A model spec could not be resolved or loaded."""


class DatasetError(LayerscopeError):
    """A dataset file is missing or malformed."""


class ExtractionError(LayerscopeError):
    """Texts or settings that extraction cannot work with."""


class OutputError(LayerscopeError):
    """An output folder that cannot be written without losing something."""


class DiskFullError(OutputError):
    """The disk filled up while an output folder was written; nothing of it is left."""


class CacheError(LayerscopeError):
    """The layerscope cache ($LAYERSCOPE_CACHE) cannot be used: not a folder, or not writable when a write is needed."""


class ResultFileError(LayerscopeError):
    """A run folder's result.json or table.csv is missing, truncated or corrupt."""
