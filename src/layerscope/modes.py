"""The names of the method a run follows: the layerscope default (``compat=None``) or ``"notebooks"``.

    NOTEBOOKS                              # "notebooks": --compat notebooks, --layers notebooks
    notebooks_alias("seed", "compat")      # "notebooks", with a DeprecationWarning naming the new spelling
    notebooks_alias("all", "layers")       # "all": anything else passes through untouched
    renamed_config({"compat": "seed"})     # {"compat": "notebooks"}: an old result.json's config, no warning

``--compat notebooks`` reproduces the five research notebooks' numbers (token 0 dropped, every 4th layer plus the
last, their statistics); ``--layers notebooks`` is their layer choice alone. Up to layerscope 0.4.0 both were
spelled ``seed``; that spelling is still accepted, with a ``DeprecationWarning``, until 0.5.0. (``--seed``, the
random seed, is another setting and keeps its name.)
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

NOTEBOOKS = "notebooks"
"""The value of ``compat`` (and of ``layers``) that reproduces the research notebooks."""

OLD_NOTEBOOKS = "seed"
"""The deprecated spelling of :data:`NOTEBOOKS` (accepted until :data:`REMOVED_IN`)."""

REMOVED_IN = "0.5.0"

class RenamedValueWarning(DeprecationWarning):
    """A setting's value under its old name (``compat="seed"``); the CLI prints it as one ``note:`` line."""


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside layerscope (and outside dataclass-made ``__init__``s), so
    the warning names the user's line."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        file = frame.f_code.co_filename
        if not (file.startswith(_PACKAGE) or file.startswith("<")):
            return level
        frame, level = frame.f_back, level + 1
    return 1


def alias_note(option: str) -> str:
    """The one line that says ``option seed`` is now ``option notebooks``."""
    return (f"{option} {OLD_NOTEBOOKS!r} is deprecated: use {option} {NOTEBOOKS!r} (the same thing, renamed; "
            f"{OLD_NOTEBOOKS!r} stops working in layerscope {REMOVED_IN})")


def notebooks_alias(value: Any, option: str) -> Any:
    """``value`` with the old spelling ``"seed"`` of ``option`` (``compat``, ``layers``) made ``"notebooks"``,
    with a ``DeprecationWarning``; any other value unchanged."""
    if isinstance(value, str) and value.strip() == OLD_NOTEBOOKS:
        warnings.warn(alias_note(option), RenamedValueWarning, stacklevel=_caller_level())
        return NOTEBOOKS
    return value


def renamed_config(config: dict[str, Any]) -> dict[str, Any]:
    """A config as an older layerscope wrote it (result.json) with ``compat``/``layers`` ``"seed"`` spelled
    ``"notebooks"``, quietly: the folder is a record, not something its reader can fix."""
    renamed = {key: NOTEBOOKS for key in ("compat", "layers") if config.get(key) == OLD_NOTEBOOKS}
    return {**config, **renamed} if renamed else config
