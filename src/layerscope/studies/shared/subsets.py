"""Which data a table row was computed on: its ``subset`` (all pairs, or a sensitivity check's changed data) and,
for the final layer, its ``stage`` (before or after the model's final norm).

    rows = in_subset(rows, subset_name(None))            # subset "all"
    rows += in_subset(without_rows, subset_name("c2"))   # subset "without c2"
    rows = with_stage(rows, n_layers, "pre_norm")        # the rows at layer n_layers get stage "pre_norm"
    main = on_subset(result.table)                       # the rows of subset "all"
"""

from __future__ import annotations

import pandas as pd


def in_subset(rows: list[dict], subset: str) -> list[dict]:
    """The rows, each with column ``subset`` set."""
    return [{**row, "subset": subset} for row in rows]


def subset_name(category: str | None) -> str:
    """``"all"``, or ``"without NAME"`` for the analysis without category NAME."""
    return "all" if category is None else f"without {category}"


def with_stage(rows: list[dict], n_layers: int, stage: str) -> list[dict]:
    """The rows, those at layer ``n_layers`` with column ``stage`` set (``"pre_norm"``: the last block's output
    before the final norm; ``"post_norm"``: after it); other rows unchanged."""
    return [{**row, "stage": stage} if row.get("layer") == n_layers else row for row in rows]


def on_subset(table: pd.DataFrame, subset: str = "all") -> pd.DataFrame:
    """The rows of one ``subset`` (all of them for a table written before the column existed)."""
    return table[table["subset"] == subset] if "subset" in table else table
