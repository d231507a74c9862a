"""Small markdown builders for reports.

    md_table(["layer", "r"], [[0, signed(0.12)], [4, signed(-0.3)]])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def signed(x: Any, digits: int = 3) -> str:
    """``+0.123`` style, or ``n/a`` for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.{digits}f}"


def number(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
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
