"""A study's result: a summary, one tidy table, and how it was made.

    result = run_study(StudyConfig(study="divergence"))
    result.summary["models"]["smollm2-135m"]["divergence_points"]
    result.table.query("metric == 'r_ua_pref' and pooling == 'mean'")
    result.write("runs/div")            # result.json, table.csv, figures, report.md
    StudyResult.load("runs/div")        # back from disk, without the model
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SCHEMA_VERSION = 1

TABLE_COLUMNS = ["model", "layer", "n_layers", "depth", "pooling", "metric", "value", "ci_lo", "ci_hi", "p", "n"]
"""The columns every table starts with; studies may add more after them (e.g. ``category``)."""


@dataclass
class StudyResult:
    study: str
    config: dict[str, Any]
    manifest: dict[str, Any]
    """Models (with weights hash and layer count), dataset hash, library versions, seed, timings."""
    summary: dict[str, Any]
    """The study's verdicts and headline numbers, JSON-ready."""
    table: pd.DataFrame = field(repr=False)
    """Every per-layer number, one row each, ``TABLE_COLUMNS`` first."""

    def to_json(self) -> dict[str, Any]:
        return jsonable({"schema_version": SCHEMA_VERSION, "study": self.study, "config": self.config,
                         "manifest": self.manifest, "summary": self.summary})

    def write(self, out: str | os.PathLike, force: bool = False) -> Path:
        """Write the run folder atomically: nothing appears in ``out`` unless all of it does."""
        from .output import write_result

        return write_result(self, Path(out), force=force)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> StudyResult:
        folder = Path(folder)
        data = json.loads((folder / "result.json").read_text())
        table = pd.read_csv(folder / "table.csv")
        return cls(study=data["study"], config=data["config"], manifest=data["manifest"],
                   summary=data["summary"], table=table)


def make_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A tidy table from row dicts: ``TABLE_COLUMNS`` first (empty where absent), extras after."""
    table = pd.DataFrame(rows)
    for column in TABLE_COLUMNS:
        if column not in table:
            table[column] = np.nan
    for column in ("layer", "n_layers", "n"):
        table[column] = table[column].astype("Int64")  # integers that may be missing
    extras = [c for c in table.columns if c not in TABLE_COLUMNS]
    return table[TABLE_COLUMNS + extras]


def layer_row(model, layer: int, n_layers: int, metric: str, value: float, **extra) -> dict[str, Any]:
    return {"model": model, "layer": layer, "n_layers": n_layers, "depth": layer / n_layers,
            "metric": metric, "value": value, **extra}


def jsonable(obj: Any) -> Any:
    """Plain JSON types: numpy scalars and arrays converted, NaN and inf as null."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj
