"""A study's result: a summary, one tidy table, and how it was made.

    result = run_study(StudyConfig(study="divergence"))
    result.summary["models"]["smollm2-135m"]["divergence_points"]
    result.table.query("metric == 'r_ua_pref' and pooling == 'mean'")
    result.write("runs/div")            # result.json, table.csv, figures, report.md
    StudyResult.load("runs/div")        # back from disk, without the model
    result                              # in Jupyter: its section of index.html (verdicts, figures, report)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ResultFileError
from ..jsonfile import JSONReadError, read_json
from ..modes import renamed_config
from ..provenance import jsonable
from . import hooks

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
    folder: Path | None = field(default=None, repr=False, compare=False)
    """The run folder it was loaded from or last written to (None: in memory only)."""

    def to_json(self) -> dict[str, Any]:
        return jsonable({"schema_version": SCHEMA_VERSION, "study": self.study, "config": self.config,
                         "manifest": self.manifest, "summary": self.summary})

    def write(self, out: str | os.PathLike, force: bool = False) -> Path:
        """Write the run folder atomically: nothing appears in ``out`` unless all of it does."""
        self.folder = hooks.write(self, Path(out), force=force)
        return self.folder

    def _repr_html_(self) -> str:
        """In a notebook: the study's section of ``index.html`` (verdicts with their checks, figures, report)."""
        return hooks.html(self)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> StudyResult:
        """``StudyResult.load("runs/div")``: a run folder back from disk. A :class:`ResultFileError` naming the
        file when its result.json or table.csv is missing, truncated or not what layerscope writes."""
        folder = Path(folder)
        data = _read_result_json(folder / "result.json")
        return cls(study=data["study"], config=renamed_config(data["config"]), manifest=data["manifest"],
                   summary=data["summary"], table=_read_table(folder / "table.csv"), folder=folder)


def rerun_hint(folder: Path) -> str:
    """The fix for a run folder whose files are damaged: they are written whole, so only a rerun remakes them."""
    if (folder / "config.yaml").is_file():
        return f"rerun the study: layerscope run --config {folder / 'config.yaml'} --out NEW_FOLDER"
    return "rerun the study with layerscope run"


def _read_result_json(path: Path) -> dict[str, Any]:
    fix = rerun_hint(path.parent)
    try:
        data = read_json(path)
    except FileNotFoundError:
        raise ResultFileError(f"{path} is missing; pass a folder written by `layerscope run`, or {fix}") from None
    except (OSError, JSONReadError) as exc:
        why = (exc.strerror.lower() if exc.strerror else str(exc)) if isinstance(exc, OSError) else \
            str(exc).removeprefix(f"{path}: ")
        raise ResultFileError(f"cannot read {path}: {why}; the file is damaged or truncated: {fix}") from None
    parts = {"study": str, "config": dict, "manifest": dict, "summary": dict}
    bad = [key for key, kind in parts.items() if not isinstance(data, dict) or not isinstance(data.get(key), kind)]
    if bad:
        raise ResultFileError(f"{path} is not a layerscope result (no valid {', '.join(map(repr, bad))}); the "
                              f"file is damaged: {fix}")
    return data


def _read_table(path: Path) -> pd.DataFrame:
    fix = rerun_hint(path.parent)
    try:
        table = pd.read_csv(path)
    except FileNotFoundError:
        raise ResultFileError(f"{path} is missing beside its result.json; {fix}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # pandas' EmptyDataError and ParserError too
        first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise ResultFileError(f"cannot read {path}: {first}; the file is damaged or truncated: {fix}") from None
    missing = [c for c in TABLE_COLUMNS if c not in table]
    if missing or (len(table) and not pd.api.types.is_numeric_dtype(table["value"])):
        what = f"no column {missing[0]!r}" if missing else "a 'value' that is not a number"
        raise ResultFileError(f"{path} has {what}; the file is damaged: {fix}")
    return table


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


