"""A user's label file: texts with a class label each, and optionally a group, for the probes.

    labels = load_labels("sentiment.csv")              # or .jsonl; folds: the probes' cross-validation folds
    labels.texts, labels.labels, labels.groups         # tuples of str, one entry per row, in file order
    labels.classes, labels.name, labels.hash           # sorted classes; the file's stem; content hash

Formats (one label set, two spellings; both give the same ``hash``):

- ``.csv``: a header ``text,label`` or ``text,label,group`` and one row per text
- ``.jsonl``: one ``{"text": str, "label": str | number, "group"?: str | number}`` object per line

Files are UTF-8 (a byte-order mark is fine); blank JSONL lines are skipped. Labels and groups are strings (a JSON
number or boolean is read as it is written, ``1`` as ``"1"``). Without groups every row is its own group, named by
its index (``"0"``, ``"1"``, ...); with groups, every row names one. Rows of one group stay in one fold of the
probes' cross-validation, so every class needs at least ``folds`` groups, and a group holds one label unless
``allow_mixed_groups`` (e.g. a statement pair's sides A and B as two classes in one group). Anything else raises
:class:`DatasetError` naming the file, the line and the fix.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DatasetError, short
from ..provenance import sha256_json
from .files import check_text, parse_json, read_text, require_file, split_lines

COLUMNS = ("text", "label", "group")
"""The columns (CSV) or keys (JSONL) of a label file; ``group`` is optional."""


@dataclass(frozen=True)
class LabelSet:
    name: str
    """The file's stem: what a table's label_set column says."""
    texts: tuple[str, ...]
    labels: tuple[str, ...]
    groups: tuple[str, ...]
    hash: str
    """SHA-256 of the texts, labels and groups (not of the file's format or layout)."""

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.labels)))


def load_labels(path: str | os.PathLike, *, folds: int = 5, allow_mixed_groups: bool = False) -> LabelSet:
    """``load_labels("sentiment.csv", folds=5)``: read and check a label file (see the module docstring).

    Raises :class:`DatasetError` naming the file, the line and the fix for anything the probes could not use.
    """
    path = Path(path)
    require_file(path, "label file")
    readers = {".csv": _read_csv, ".jsonl": _read_jsonl}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        kind = f"unknown label file format '{path.suffix}'" if path.suffix else "no extension"
        raise DatasetError(f"{path}: {kind}; use .csv (a header text,label[,group]) or .jsonl (one object "
                           '{"text": ..., "label": ...} a line), named so')
    rows = reader(path, read_text(path))
    if not rows:
        raise DatasetError(f"{path}: no rows; a label file needs one text and its label per row, e.g. a CSV with "
                           "the header text,label")
    rows = _fill_groups(path, rows)
    _check_repeats(path, rows)
    _check_classes(path, rows, folds, allow_mixed_groups)
    texts, labels, groups = (tuple(r[k] for r in rows) for k in COLUMNS)
    return LabelSet(name=path.stem, texts=texts, labels=labels, groups=groups,
                    hash=sha256_json({"texts": texts, "labels": labels, "groups": groups}))


def _row(path: Path, where: str, text: Any, label: Any, group: Any = None) -> dict[str, Any]:
    """One checked row {"where", "text", "label", "group"}; group None when the row gives none."""
    if not isinstance(text, str) or not text.strip():
        raise DatasetError(f"{path}, {where}: the text is {'empty' if text in ('', None) else short(text)}; give "
                           "every row a non-empty text (a string)")
    if problem := check_text(text):
        raise DatasetError(f"{path}, {where}: the text {problem}")
    return {"where": where, "text": text, "label": _name(path, where, "label", label),
            "group": None if group is None else _name(path, where, "group", group)}


def _name(path: Path, where: str, field: str, value: Any) -> str:
    """A label or group as a string: a string as it is, a JSON number or boolean as JSON writes it."""
    if isinstance(value, (bool, int, float)):
        value = json.dumps(value)
    if not isinstance(value, str) or not value.strip():
        got = "empty" if value in ("", None) else short(value)
        raise DatasetError(f"{path}, {where}: the {field} is {got}; give every row a non-empty {field} (a string "
                           f"or a number){' or leave the group out of every row' if field == 'group' else ''}")
    if problem := check_text(value):
        raise DatasetError(f"{path}, {where}: the {field} {problem}")
    return value


def _fill_groups(path: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every row its own group ("0", "1", ...) when no row gives one; an error when only some do."""
    given = [r["group"] is not None for r in rows]
    if not any(given):
        return [{**r, "group": str(i)} for i, r in enumerate(rows)]
    if not all(given):
        where = rows[given.index(False)]["where"]
        raise DatasetError(f"{path}, {where}: no group, but other rows name one; give every row a group, or leave "
                           "the group out of every row (then each row is its own group)")
    return rows


def _check_repeats(path: Path, rows: list[dict[str, Any]]) -> None:
    """A text on two rows is refused: with two labels it is a contradiction, and with one it can sit in a training
    fold and a test fold at once (in different groups) and be scored on what the probe memorised."""
    first: dict[str, dict[str, Any]] = {}
    for r in rows:
        seen = first.setdefault(r["text"], r)
        if seen is r:
            continue
        if seen["label"] != r["label"]:
            raise DatasetError(f"{path}, {r['where']}: the text {short(r['text'])} has the label {r['label']!r}, but "
                               f"{seen['where']} gives it {seen['label']!r}; a text has one label, so keep one of "
                               "the two rows")
        raise DatasetError(f"{path}, {r['where']}: the text {short(r['text'])} repeats {seen['where']}; a repeated "
                           "text can sit in a training fold and a test fold at once, so keep one of the two rows")


MAX_IMBALANCE = 0.95
"""Largest share of the rows one class may hold: beyond it a probe that always answers that class looks accurate,
and the minority class is too thin to fit a direction on."""


def _check_classes(path: Path, rows: list[dict[str, Any]], folds: int, allow_mixed_groups: bool) -> None:
    group_label: dict[str, tuple[str, str]] = {}  # group -> (its first label, where)
    for r in rows:
        first = group_label.setdefault(r["group"], (r["label"], r["where"]))
        if first[0] != r["label"] and not allow_mixed_groups:
            raise DatasetError(
                f"{path}, {r['where']}: group {r['group']!r} has the label {r['label']!r}, but {first[1]} gave it "
                f"{first[0]!r}; a group holds one label, so fix the label or the group (or pass "
                "allow_mixed_groups=True when a group rightly holds several, e.g. a statement pair's two sides)")
    classes = sorted({r["label"] for r in rows})
    if len(classes) < 2:
        raise DatasetError(f"{path}: every row has the label {classes[0]!r}; a probe needs at least two classes, "
                           "so add rows of another class")
    counts = {c: sum(r["label"] == c for r in rows) for c in classes}
    top = max(counts, key=counts.get)
    if counts[top] > MAX_IMBALANCE * len(rows):
        raise DatasetError(f"{path}: the class {top!r} holds {counts[top]} of the {len(rows)} rows "
                           f"({counts[top] / len(rows):.1%}), more than {MAX_IMBALANCE:.0%}; balance the classes "
                           f"(add rows of {', '.join(repr(c) for c in classes if c != top)} or drop rows of {top!r})")
    unit = "rows" if all(r["group"] == str(i) for i, r in enumerate(rows)) else "groups"
    for c in classes:
        if len(groups := {r["group"] for r in rows if r["label"] == c}) < folds:
            raise DatasetError(f"{path}: the class {c!r} has {len(groups)} {unit}, fewer than the {folds} folds of "
                               f"the probes' cross-validation; add {unit} of that class or lower folds")


def _read_jsonl(path: Path, text: str) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        obj = parse_json(path, line, where=f", line {n}")
        if not isinstance(obj, dict) or not {"text", "label"} <= obj.keys():
            raise DatasetError(f'{path}, line {n}: expected an object with the keys text and label (and optionally '
                               f'group), like {{"text": "I loved it", "label": "positive"}}')
        if unknown := sorted(obj.keys() - set(COLUMNS)):
            raise DatasetError(f"{path}, line {n}: unknown key {unknown[0]!r}; the keys are text, label and "
                               "optionally group, so remove or rename it")
        rows.append(_row(path, f"line {n}", obj["text"], obj["label"], obj.get("group")))
    return rows


def _read_csv(path: Path, text: str) -> list[dict[str, Any]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames
        if header is None:
            return []
        if not {"text", "label"} <= set(header):
            raise DatasetError(f"{path}: the CSV header is {short(','.join(header))}; it needs the columns text,label "
                               "(and optionally group) in its first line")
        if len(set(header)) < len(header):
            twice = next(h for i, h in enumerate(header) if h in header[:i])
            raise DatasetError(f"{path}: the column {twice!r} appears twice in the CSV header; rename or drop one")
        if unknown := [h for h in header if h not in COLUMNS]:
            raise DatasetError(f"{path}: unknown column {unknown[0]!r} in the CSV header; the columns are text, "
                               "label and optionally group, so remove or rename it")
        rows = []
        for r in reader:
            if None in r:  # more fields than the header has columns
                raise DatasetError(f"{path}, line {reader.line_num}: {len(header) + len(r[None])} fields but the "
                                   f"header has {len(header)} columns; put texts that contain commas in double quotes")
            rows.append(_row(path, f"line {reader.line_num}", r["text"], r["label"], r.get("group", None)))
    except csv.Error as exc:
        line = reader.reader.line_num  # DictReader.line_num is only updated after a row is read whole
        raise DatasetError(f"{path}, line {line}: malformed CSV ({exc}); check the quotes on that line") from None
    return rows
