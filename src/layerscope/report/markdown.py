"""Small markdown builders for reports.

    md_table(["layer", "r"], [[0, signed(0.12)], [4, signed(-0.3)]])
    number(1940821235921.001, 4)   # "1.941e+12": from LARGE on, scientific notation
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

LARGE = 1e5
"""From this magnitude on, ``number`` and ``signed`` print scientific notation (``digits`` significant digits)."""


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _large(x: Any) -> bool:
    return math.isfinite(x) and abs(x) >= LARGE


def signed(x: Any, digits: int = 3) -> str:
    """``signed(0.1234)`` -> ``+0.123``; ``signed(-2.5e6)`` -> ``-2.50e+06`` (|x| >= 1e5: ``digits``
    significant digits); ``n/a`` for a missing value."""
    if _missing(x):
        return "n/a"
    return f"{x:+.{max(digits - 1, 0)}e}" if _large(x) else f"{x:+.{digits}f}"


def number(x: Any, digits: int = 3) -> str:
    """``number(0.1234)`` -> ``0.123``; ``number(2e-5)`` -> ``2e-05`` (|x| < 1e-3: ``digits`` significant
    digits); ``number(1.94e12)`` -> ``1.94e+12`` (|x| >= 1e5 likewise); ``n/a`` for a missing value."""
    if _missing(x):
        return "n/a"
    if _large(x):
        return f"{x:.{max(digits - 1, 0)}e}"
    return f"{x:.{digits}g}" if isinstance(x, float) and abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def method_line(config: dict) -> str:
    if config.get("compat") == "seed":
        return ("Method: **seed compat** (the notebooks' numerics: token 0 always dropped from mean pooling, "
                "every 4th layer plus the last).")
    return "Method: **corrected** (a BOS token dropped by its id, never by position)."
