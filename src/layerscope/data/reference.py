"""Reference phase means for cross-model comparison (CSV: model,early,mid,late[,source]).

    rows = load_phase_reference()          # the published figures the phases notebook quotes
    rows = load_phase_reference("mine.csv")
"""

from __future__ import annotations

import csv
import io
import math
import os
from importlib import resources
from pathlib import Path

from ..errors import DatasetError
from .pairs import read_text, require_file


def bundled_reference_path() -> Path:
    return Path(str(resources.files("layerscope.data").joinpath("bundled/phase_reference.csv")))


def load_phase_reference(path: str | os.PathLike | None = None) -> list[dict]:
    path = Path(path) if path is not None else bundled_reference_path()
    require_file(path, "reference file", "--reference")
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    if reader.fieldnames is None or not {"model", "early", "mid", "late"} <= set(reader.fieldnames):
        raise DatasetError(f"{path}: expected a CSV header with the columns model,early,mid,late")
    rows = []
    for row in reader:
        entry = {"model": (row["model"] or "").strip(), "source": (row.get("source") or "reference file").strip()}
        if not entry["model"]:
            raise DatasetError(f"{path}, line {reader.line_num}: empty model name")
        for phase in ("early", "mid", "late"):
            try:
                entry[phase] = float(row[phase])
            except (TypeError, ValueError):
                raise DatasetError(f"{path}, line {reader.line_num}: {phase} = {row[phase]!r} is not a number") from None
            if not math.isfinite(entry[phase]):
                raise DatasetError(f"{path}, line {reader.line_num}: {phase} must be a finite number")
        rows.append(entry)
    return rows
