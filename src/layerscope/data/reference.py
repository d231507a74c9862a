"""Reference phase means for cross-model comparison, with how each was computed.

CSV columns: ``model,early,mid,late`` (required), ``source`` and the method columns ``data``, ``layers``,
``token_rule`` (optional; an absent column or an empty cell reads "not stated"). Files with only the first four
or five columns still load.

    rows = load_phase_reference()          # the published figures the phases notebook quotes
    rows = load_phase_reference("mine.csv")
    mark_comparable(rows + [this_run_row])   # each row gains "comparable" and "comparability" against this run
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections import Counter
from importlib import resources
from pathlib import Path

from ..errors import DatasetError
from .files import read_text, require_file

REQUIRED = ("model", "early", "mid", "late")
METHOD_FIELDS = ("data", "layers", "token_rule")
"""How a row's phase means were computed: the pairs, the tested layers, the pooling and BOS rule."""
NOT_STATED = "not stated"
THIS_RUN = "this run"
"""The ``source`` of the rows this run computed; the first one is the basis the others are compared with."""


def bundled_reference_path() -> Path:
    return Path(str(resources.files("layerscope.data").joinpath("bundled/phase_reference.csv")))


def load_phase_reference(path: str | os.PathLike | None = None) -> list[dict]:
    """``rows = load_phase_reference("ref.csv")``: one dict per row with ``model``, ``early``, ``mid``, ``late``
    (finite numbers), ``source`` and each of :data:`METHOD_FIELDS` (one line of text, "not stated" if absent).

    :class:`DatasetError` naming the file and line for a missing or repeated column, a row with more cells than
    the header, an empty model name, a phase mean that is not a finite number or a method cell over two lines.
    """
    path = Path(path) if path is not None else bundled_reference_path()
    require_file(path, "reference file", "--reference")
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    header = reader.fieldnames
    if header is None or not set(REQUIRED) <= set(header):
        raise DatasetError(f"{path}: expected a CSV header with the columns model,early,mid,late (optional: source, "
                           f"{', '.join(METHOD_FIELDS)})")
    if repeated := sorted(name for name, count in Counter(header).items() if count > 1):
        raise DatasetError(f"{path}: the header repeats the column(s) {', '.join(repeated)}; name each column once")
    return [_row(path, reader.line_num, row) for row in reader]


def _row(path: Path, line: int, row: dict) -> dict:
    """One validated reference row (``line``: where it ends in the file, for messages)."""
    if any((cell or "").strip() for cell in row.get(None, [])):
        raise DatasetError(f"{path}, line {line}: more cells than the header has columns; quote a cell that holds "
                           "a comma, or add the column to the header")
    entry = {"model": (row["model"] or "").strip(), "source": (row.get("source") or "reference file").strip()}
    if not entry["model"]:
        raise DatasetError(f"{path}, line {line}: empty model name")
    for phase in ("early", "mid", "late"):
        try:
            entry[phase] = float(row[phase])
        except (TypeError, ValueError):
            raise DatasetError(f"{path}, line {line}: {phase} = {row[phase]!r} is not a number") from None
        if not math.isfinite(entry[phase]):
            raise DatasetError(f"{path}, line {line}: {phase} must be a finite number")
    for field in METHOD_FIELDS:
        value = (row.get(field) or "").strip()
        if "\n" in value or "\r" in value:
            raise DatasetError(f"{path}, line {line}: the {field} cell spans several lines; write it on one line")
        entry[field] = value or NOT_STATED
    return entry


def mark_comparable(rows: list[dict]) -> list[dict]:
    """The ``rows`` (each with :data:`METHOD_FIELDS`), each with ``comparable`` (True/False; None for the basis,
    the first row whose source is "this run") and ``comparability``: "basis of the comparison", "directly
    comparable" or "not directly comparable (FIELDS differ or are not stated)"."""
    basis = next((row for row in rows if row.get("source") == THIS_RUN), None)
    out = []
    for row in rows:
        if basis is None or row is basis:
            out.append({**row, "comparable": None, "comparability": "basis of the comparison" if basis else ""})
            continue
        differs = [f for f in METHOD_FIELDS if row.get(f, NOT_STATED) in (NOT_STATED, "") or row[f] != basis[f]]
        verb = "differs or is" if len(differs) == 1 else "differ or are"
        note = (f"not directly comparable ({', '.join(f.replace('_', ' ') for f in differs)} {verb} not stated)"
                if differs else "directly comparable")
        out.append({**row, "comparable": not differs, "comparability": note})
    return out
