"""Names a package imports on first use (PEP 562), so importing it stays cheap (no torch for ``--help``).

    __getattr__, __dir__ = lazy(__name__, {"load_model": "load"}, __all__)   # in a package's __init__
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy(package: str, names: dict[str, str], public: list[str]
         ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: ``names`` maps each lazy name to the sub-module
    (relative to ``package``) that defines it; the value is kept in the package once imported."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{names[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *public})

    return __getattr__, __dir__
