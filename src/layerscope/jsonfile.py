"""Every JSON layerscope reads from outside (a model's or a lens's ``config.json``, a run's ``result.json``, a
folder marker, a cache entry), parsed one way: with a nesting limit checked before the parser recurses, so a
hostile file is one clear error, never a ``RecursionError``.

    data = read_json(path)                 # JSONReadError (a ValueError) naming the path and the problem
    data = loads_json(text, what="x.json") # the same for text already read

No format layerscope reads needs more than a few levels; :data:`MAX_DEPTH` leaves room for any of them.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects accepted."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


class JSONReadError(ValueError):
    """A JSON file that cannot be read: not UTF-8, not JSON, nested too deeply, or a number too long."""


def nesting(text: str) -> int:
    """``nesting('{"a": [1, "]]"]}')  # 2``: the deepest nesting of arrays and objects in ``text`` (brackets
    inside strings do not count)."""
    depth = deepest = 0
    for char in _STRING.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def loads_json(text: str, what: str = "the JSON", **kwargs: Any) -> Any:
    """The JSON value of ``text``; ``what`` names it in the error. ``kwargs`` go to :func:`json.loads`."""
    if ("[" in text or "{" in text) and nesting(text) > MAX_DEPTH:
        raise JSONReadError(f"{what}: JSON nested too deeply (more than {MAX_DEPTH} levels); no file layerscope "
                            "reads needs that many, so check that this is the right file")
    try:
        return json.loads(text, **kwargs)
    except json.JSONDecodeError as exc:
        raise JSONReadError(f"{what}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:  # deeper than the interpreter allows despite the limit (a tiny recursion limit)
        raise JSONReadError(f"{what}: JSON nested too deeply to read") from None
    except ValueError as exc:
        if isinstance(exc, JSONReadError):
            raise
        reason = str(exc).split(":")[0]  # an integer literal of more than 4300 digits
        raise JSONReadError(f"{what}: a number in it is too long to read ({reason})") from None


def read_json(path: str | os.PathLike, **kwargs: Any) -> Any:
    """The JSON value of the UTF-8 file at ``path``. ``OSError`` (missing, unreadable) passes through;
    anything else wrong is a :class:`JSONReadError` naming ``path``."""
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the read forever
        raise JSONReadError(f"{os.fspath(path)}: not a regular file; point at a JSON file")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONReadError(f"{os.fspath(path)}: not UTF-8 text (byte {exc.start})") from None
    return loads_json(text, what=os.fspath(path), **kwargs)
