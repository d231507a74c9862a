"""Statement-pair datasets: categories of (A, B) statements on the same topic.

    ds = load_pairs()                       # the bundled dataset
    ds = load_pairs("dataset.json")         # seed format, or .jsonl / .csv
    texts = ds.texts()                      # [a0, b0, a1, b1, ...] in category order
    ds.hash, ds.n_pairs, [c.name for c in ds.categories]

Formats (one dataset, three spellings; all give the same ``hash``):

- ``.json``: ``{category: {"description"?: str, "expected_effect"?: str, "pairs": [[a, b], ...]}}``
- ``.jsonl``: one ``{"category": str, "a": str, "b": str}`` object per line
- ``.csv``: a header ``category,a,b`` and one pair per row
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..provenance import sha256_json

MIN_PAIRS_PER_CATEGORY = 2


@dataclass(frozen=True)
class Category:
    name: str
    pairs: tuple[tuple[str, str], ...]
    description: str = ""
    expected_effect: str = ""


@dataclass(frozen=True)
class PairDataset:
    categories: tuple[Category, ...]
    source: str
    """The file it was read from."""

    @property
    def n_pairs(self) -> int:
        return sum(len(c.pairs) for c in self.categories)

    @property
    def hash(self) -> str:
        """SHA-256 of the categories and pairs (not of descriptions, file format or layout)."""
        return sha256_json([[c.name, [list(p) for p in c.pairs]] for c in self.categories])

    def texts(self) -> list[str]:
        """All statements, ``[a0, b0, a1, b1, ...]``: pair i has A at 2i and B at 2i + 1."""
        return [text for c in self.categories for pair in c.pairs for text in pair]

    def pair_categories(self) -> np.ndarray:
        """(n_pairs,) index into ``categories`` of every pair, in :meth:`texts` order."""
        return np.repeat(np.arange(len(self.categories)), [len(c.pairs) for c in self.categories])


def bundled_pairs_path() -> Path:
    return Path(str(resources.files("layerscope.data").joinpath("bundled/pairs.json")))


def load_pairs(path: str | os.PathLike | None = None) -> PairDataset:
    """Read and validate a pair dataset; ``None`` reads the bundled one."""
    path = Path(path) if path is not None else bundled_pairs_path()
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist; check the path")
    readers = {".json": _read_json, ".jsonl": _read_jsonl, ".csv": _read_csv}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise DatasetError(f"{path}: unknown dataset format '{path.suffix}'; use .json, .jsonl or .csv")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    categories = reader(path, text)
    if not categories:
        raise DatasetError(f"{path}: no categories; a dataset needs at least one category of pairs")
    return PairDataset(categories=tuple(categories), source=str(path))


def _category(path: Path, name: Any, pairs: Any, description: Any = "", expected: Any = "",
              where: list[str] | None = None) -> Category:
    if not isinstance(name, str) or not name.strip():
        raise DatasetError(f"{path}: a category has an empty name {name!r}; give every category a name")
    if not isinstance(pairs, list):
        raise DatasetError(f"{path}: category '{name}': 'pairs' must be a list of [a, b] pairs")
    checked = []
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                and all(isinstance(s, str) and s.strip() for s in pair)):
            at = f" ({where[i]})" if where else ""
            raise DatasetError(
                f"{path}: category '{name}', pair {i}{at}: expected two non-empty strings [a, b], "
                f"got {_short(pair)}"
            )
        checked.append((pair[0], pair[1]))
    if len(checked) < MIN_PAIRS_PER_CATEGORY:
        raise DatasetError(
            f"{path}: category '{name}' has {len(checked)} pair(s); each category needs at least "
            f"{MIN_PAIRS_PER_CATEGORY} so statements can be compared within it"
        )
    for field, value in (("description", description), ("expected_effect", expected)):
        if not isinstance(value, str):
            raise DatasetError(f"{path}: category '{name}': '{field}' must be a string")
    return Category(name=name, pairs=tuple(checked), description=description, expected_effect=expected)


def _read_json(path: Path, text: str) -> list[Category]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected a JSON object {{category: {{\"pairs\": [[a, b], ...]}}}}")
    categories = []
    for name, body in data.items():
        if not isinstance(body, dict) or "pairs" not in body:
            raise DatasetError(f"{path}: category '{name}': expected an object with a 'pairs' list")
        categories.append(_category(path, name, body["pairs"], body.get("description", ""),
                                    body.get("expected_effect", "")))
    return categories


def _group(path: Path, rows: list[tuple[str, Any, Any, Any]]) -> list[Category]:
    """Rows of (where, category, a, b), grouped by category in first-seen order."""
    groups: dict[Any, tuple[list, list[str]]] = {}
    for where, name, a, b in rows:
        if not isinstance(name, str) or not name.strip():
            raise DatasetError(f"{path}, {where}: empty category name; give every pair a category")
        pairs, wheres = groups.setdefault(name, ([], []))
        pairs.append([a, b])
        wheres.append(where)
    return [_category(path, name, pairs, where=wheres) for name, (pairs, wheres) in groups.items()]


def _read_jsonl(path: Path, text: str) -> list[Category]:
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}, line {n}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict) or not {"category", "a", "b"} <= obj.keys():
            raise DatasetError(f"{path}, line {n}: expected an object with keys category, a, b")
        rows.append((f"line {n}", obj["category"], obj["a"], obj["b"]))
    return _group(path, rows)


def _read_csv(path: Path, text: str) -> list[Category]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None or not {"category", "a", "b"} <= set(reader.fieldnames):
        raise DatasetError(f"{path}: expected a CSV header with the columns category,a,b")
    try:
        rows = [(f"line {reader.line_num}", r["category"], r["a"], r["b"]) for r in reader]
    except csv.Error as exc:
        raise DatasetError(f"{path}, line {reader.line_num}: malformed CSV ({exc})") from None
    return _group(path, rows)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
