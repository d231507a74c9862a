"""Statement-pair datasets: categories of (A, B) statements on the same topic.

    ds = load_pairs()                       # the bundled dataset
    ds = load_pairs("dataset.json")         # seed format, or .jsonl / .csv
    texts = ds.texts()                      # [a0, b0, a1, b1, ...] in category order
    ds.hash, ds.n_pairs, [c.name for c in ds.categories]

Formats (one dataset, three spellings; all give the same ``hash``):

- ``.json``: ``{category: {"description"?: str, "expected_effect"?: str, "pairs": [[a, b], ...]}}``
- ``.jsonl``: one ``{"category": str, "a": str, "b": str}`` object per line
- ``.csv``: a header ``category,a,b`` and one pair per row

Files are UTF-8 (a byte-order mark is fine). Every category needs a name and at least
``MIN_PAIRS_PER_CATEGORY`` pairs of two different non-empty statements, and no pair may appear
twice. Anything else raises :class:`DatasetError` naming the file, the place and the fix.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError, short
from ..provenance import sha256_json
from .files import check_text, parse_json, read_text, require_file, split_lines

MIN_PAIRS_PER_CATEGORY = 2
MIN_CATEGORIES = 4
"""Fewest categories the pair studies (divergence, scaling, phases) run on; :func:`check_categories`.

Divergence and scaling correlate per-category means: over 2 points r is +1 or -1 whatever the data,
over 3 it has a single degree of freedom, and its Fisher-z interval, tanh(atanh(r) -+ z / sqrt(n - 3)),
exists only from 4 on, so 4 is the least n at which r, its p and its interval all mean something (the
reports still warn below 10). Phases takes the same minimum, so one dataset runs in every pair study
(a suite runs them together); ``--drop-category`` must leave as many."""
CATEGORY_RULE = (f"the pair studies (divergence, scaling, phases) need at least {MIN_CATEGORIES} categories: a "
                 "correlation over 2 category means is +1 or -1 whatever the data, and with fewer than "
                 f"{MIN_CATEGORIES} it has no confidence interval")


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
    """Read and validate a pair dataset; ``None`` reads the bundled one.

    Any problem with the file raises :class:`DatasetError` naming the file, the place in it and the fix.
    """
    path = Path(path) if path is not None else bundled_pairs_path()
    require_file(path, "dataset file", "--dataset")
    readers = {".json": _read_json, ".jsonl": _read_jsonl, ".csv": _read_csv}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise DatasetError(f"{path}: unknown dataset format '{path.suffix}'; use .json, .jsonl or .csv")
    categories = reader(path, read_text(path))
    if not categories:
        raise DatasetError(f"{path}: no categories; a dataset needs at least one category of pairs")
    _check_distinct(path, categories)
    return PairDataset(categories=tuple(categories), source=str(path))


def check_categories(pairs: PairDataset) -> PairDataset:
    """``pairs = check_categories(load_pairs(path))``: the dataset, if a pair study can run on it.

    Raises :class:`DatasetError` naming the file and its categories when it has fewer than ``MIN_CATEGORIES``.
    """
    n = len(pairs.categories)
    if n < MIN_CATEGORIES:
        names = ", ".join(short(c.name) for c in pairs.categories)
        raise DatasetError(f"{pairs.source}: {n} {'category' if n == 1 else 'categories'} ({names}); "
                           f"{CATEGORY_RULE}, so add categories of pairs to the dataset")
    return pairs


def _check_distinct(path: Path, categories: list[Category]) -> None:
    """No pair twice, and no pair of two equal statements: either would only add a copy to every statistic."""
    seen: dict[tuple[str, str], str] = {}
    for c in categories:
        for i, pair in enumerate(c.pairs):
            where = f"category {c.name!r}, pair {i}"
            if pair[0] == pair[1]:
                raise DatasetError(f"{path}: {where} has statement A the same as statement B ({short(pair[0])}); "
                                   "a pair compares two different statements, so reword one")
            if pair in seen:
                raise DatasetError(f"{path}: {where} is a duplicate of {seen[pair]} ({short(list(pair))}); "
                                   "every pair must be distinct, so remove or reword one")
            seen[pair] = where


def _category(path: Path, name: Any, pairs: Any, description: Any = "", expected: Any = "",
              where: list[str] | None = None) -> Category:
    if not isinstance(name, str) or not name.strip():
        raise DatasetError(f"{path}: a category has an empty name {short(name)}; give every category a name")
    if problem := check_text(name):
        raise DatasetError(f"{path}: the category name {short(name)} {problem}")
    if not isinstance(pairs, list):
        raise DatasetError(f"{path}: category {name!r}: 'pairs' must be a list of [statement A, statement B] pairs, "
                           f"got {short(pairs)}")
    checked = []
    for i, pair in enumerate(pairs):
        at = f" ({where[i]})" if where else ""
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                and all(isinstance(s, str) and s.strip() for s in pair)):
            raise DatasetError(
                f"{path}: category {name!r}, pair {i}{at}: expected two non-empty strings "
                f"[statement A, statement B], got {short(pair)}"
            )
        for label, text in zip("AB", pair, strict=False):
            if problem := check_text(text):
                raise DatasetError(f"{path}: category {name!r}, pair {i}{at}: statement {label} {problem}")
        checked.append((pair[0], pair[1]))
    if len(checked) < MIN_PAIRS_PER_CATEGORY:
        raise DatasetError(
            f"{path}: category {name!r} has {len(checked)} pair(s); each category needs at least "
            f"{MIN_PAIRS_PER_CATEGORY} so statements can be compared within it"
        )
    for field, value in (("description", description), ("expected_effect", expected)):
        if not isinstance(value, str):
            raise DatasetError(f"{path}: category {name!r}: '{field}' must be a string, got {short(value)}")
        if problem := check_text(value):
            raise DatasetError(f"{path}: category {name!r}: '{field}' {problem}")
    return Category(name=name, pairs=tuple(checked), description=description, expected_effect=expected)


def _read_json(path: Path, text: str) -> list[Category]:
    data = parse_json(path, text)
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected a JSON object {{category: {{\"pairs\": [[a, b], ...]}}}}, "
                           f"got {type(data).__name__}")
    categories = []
    for name, body in data.items():
        if not isinstance(body, dict) or "pairs" not in body:
            raise DatasetError(f"{path}: category {short(name)}: expected an object with a 'pairs' list, "
                               f"like {{\"pairs\": [[a, b], ...]}}")
        categories.append(_category(path, name, body["pairs"], body.get("description", ""),
                                    body.get("expected_effect", "")))
    return categories


def _group(path: Path, rows: list[tuple[str, Any, Any, Any]]) -> list[Category]:
    """Rows of (where, category, a, b), grouped by category in first-seen order."""
    groups: dict[Any, tuple[list, list[str]]] = {}
    for where, name, a, b in rows:
        if not isinstance(name, str) or not name.strip():
            raise DatasetError(f"{path}, {where}: the category is {short(name)}; give every pair a category name")
        pairs, wheres = groups.setdefault(name, ([], []))
        pairs.append([a, b])
        wheres.append(where)
    return [_category(path, name, pairs, where=wheres) for name, (pairs, wheres) in groups.items()]


def _read_jsonl(path: Path, text: str) -> list[Category]:
    rows = []
    for n, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        obj = parse_json(path, line, where=f", line {n}")
        if not isinstance(obj, dict) or not {"category", "a", "b"} <= obj.keys():
            raise DatasetError(f'{path}, line {n}: expected an object with keys category, a, b, like '
                               f'{{"category": "c", "a": "statement A", "b": "statement B"}}')
        rows.append((f"line {n}", obj["category"], obj["a"], obj["b"]))
    return _group(path, rows)


def _read_csv(path: Path, text: str) -> list[Category]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames
        if header is None or not {"category", "a", "b"} <= set(header):
            raise DatasetError(f"{path}: expected a CSV header with the columns category,a,b")
        if len(set(header)) < len(header):
            twice = next(h for i, h in enumerate(header) if h in header[:i])
            raise DatasetError(f"{path}: the column {twice!r} appears twice in the CSV header; rename or drop one")
        rows = []
        for r in reader:
            if None in r:  # more fields than the header has columns
                raise DatasetError(
                    f"{path}, line {reader.line_num}: {len(header) + len(r[None])} fields but the header has "
                    f"{len(header)} columns; put statements that contain commas in double quotes"
                )
            rows.append((f"line {reader.line_num}", r["category"], r["a"], r["b"]))
    except csv.Error as exc:
        line = reader.reader.line_num  # DictReader.line_num is only updated after a row is read whole
        raise DatasetError(f"{path}, line {line}: malformed CSV ({exc}); check the quotes on that line") from None
    return _group(path, rows)
