"""Text from outside reaches the terminal as text: every line layerscope prints (stdout, stderr, progress, logs)
goes through :func:`shown`, so a label file's, a folder's or a model config's name cannot move the cursor, clear
the screen, set the window title or hide what follows.

    say("wrote runs/x")                 # a line on stdout
    say("error: ...", err=True)         # on stderr
    shown("a\\x1b[2Jb")                 # 'a\\\\x1b[2Jb': ESC and every other control character escaped
    handler.setFormatter(ShownFormatter("%(message)s"))   # the same for log records

Line breaks and tabs stay (the lines layerscope lays out use them); a carriage return, a backspace, ESC, the
other C0 and C1 controls, and format characters (bidirectional overrides, zero-width marks) are written as their
Python escapes.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

_ACTIVE = re.compile("[^\n\t\x20-\x7e]")


def _escape(match: re.Match) -> str:
    ch = match.group(0)
    return ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")


def shown(text: Any) -> str:
    """``str(text)`` with every character a terminal would act on escaped (module docstring)."""
    return _ACTIVE.sub(_escape, str(text))


def say(text: Any = "", err: bool = False) -> None:
    """Print ``shown(text)`` as one line on stdout (stderr with ``err``), flushed."""
    print(shown(text), file=sys.stderr if err else sys.stdout, flush=True)


class ShownFormatter(logging.Formatter):
    """A log formatter whose records come out through :func:`shown`."""

    def format(self, record: logging.LogRecord) -> str:
        return shown(super().format(record))
