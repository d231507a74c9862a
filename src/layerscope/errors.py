"""Errors a user can act on.

Raise a :class:`LayerscopeError` (or a subclass) for anything caused by input:
its message names the problem and the fix. The CLI prints the message, without a
traceback, and exits with status 2. Bugs stay ordinary exceptions.

A fix that is spelled differently on the command line and in Python is written once in both
spellings, and each side shows its own:

    raise OutputError(f"{out} is not empty; choose another {OUT}, or pass {FORCE} to replace it")
    str(error)            # "... choose another out folder, or pass force=True to replace it"
    error.cli_message()   # "... choose another --out, or pass --force to replace it" (what the CLI prints)

A failed write is worded by its errno: ``write_cause(exc).words`` is "the disk quota is exceeded" for EDQUOT
(ENOSPC, EFBIG, EROFS, EACCES/EPERM alike; ``layerscope.io.write_error`` and ``layerscope.paths.cache_error``
build the error from it).
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
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
    """The disk (``code`` ENOSPC) or the quota (``code`` EDQUOT) filled up while a folder was written; nothing of
    it is left."""

    def __init__(self, message: str, code: int = errno.ENOSPC):
        super().__init__(message)
        self.code = code


class CacheError(LayerscopeError):
    """The layerscope cache ($LAYERSCOPE_CACHE) cannot be used: not a folder, or not writable when a write is needed."""


class ResultFileError(LayerscopeError):
    """A run folder's result.json or table.csv is missing, truncated or corrupt."""


class PlantError(LayerscopeError):
    """A model plant (:mod:`layerscope.plant`) that cannot be made: a position outside the model's depth, a band
    or scale that plants nothing, or a model whose block list cannot be edited."""


EDQUOT = getattr(errno, "EDQUOT", 122)
"""The errno of an exceeded disk quota (Linux 122; absent from Windows' errno)."""


@dataclass(frozen=True)
class WriteCause:
    """Why a write failed, in words a user acts on: ``f"cannot write {path}: {cause.words}; {cause.fix(...)}"``.

    ``first``: the fix that keeps the folder ("free some space"; "" when there is none); ``where``: what another
    folder must offer ("on a bigger disk")."""

    code: int
    words: str
    first: str
    where: str

    @classmethod
    def of(cls, code: int | None) -> WriteCause | None:
        """``WriteCause.of(errno.EROFS)``: the cause of a write that failed with ``code``, or None (not worded)."""
        return cls(code, *_CAUSES[code]) if code in _CAUSES else None

    @property
    def full(self) -> bool:
        """Whether more space is the fix (a full disk or an exceeded quota)."""
        return self.code in (errno.ENOSPC, EDQUOT)

    def fix(self, elsewhere: str) -> str:
        """``cause.fix("choose another --out")`` -> ``"free some space, or choose another --out on a bigger disk"``:
        the fix, with ``elsewhere`` (how to pick another folder) completed by what that folder needs."""
        other = f"{elsewhere} {self.where}"
        return f"{self.first}, or {other}" if self.first else other


_DENIED = ("permission denied", "", "that you can write to")
_CAUSES = {
    errno.ENOSPC: ("the disk is full", "free some space", "on a bigger disk"),
    EDQUOT: ("the disk quota is exceeded", "free some space within your quota (`quota -s` shows it)",
             "on a file system where your quota has room"),
    errno.EFBIG: ("the file is larger than the file-size limit allows (ulimit -f)",
                  "raise the limit (`ulimit -f unlimited`)", "on a file system that allows larger files"),
    errno.EROFS: ("the file system is read-only", "", "on a writable file system"),
    errno.EACCES: _DENIED,
    errno.EPERM: _DENIED,
}
_OS_ERROR = re.compile(r"\(os error (\d+)\)")
"""How Rust writers (safetensors, tokenizers) name the errno in their messages: ``File too large (os error 27)``."""


def write_cause(exc: BaseException) -> WriteCause | None:
    """``cause = write_cause(exc)``: why a write failed, for an ``OSError`` (or a ``SafetensorError`` whose message
    ends in ``(os error N)``) whose errno is ENOSPC, EDQUOT, EFBIG, EROFS, EACCES or EPERM; else None.

    Turn it into an error with :func:`layerscope.io.write_error` (output folders) or
    :func:`layerscope.paths.cache_error`."""
    if isinstance(exc, LayerscopeError):
        return None  # already worded
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None:
        found = _OS_ERROR.search(str(exc))
        code = int(found[1]) if found else None
    return WriteCause.of(code)
