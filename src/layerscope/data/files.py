"""Reading input files: the checks every loader shares (UTF-8, a byte-order mark, a JSON key given twice).

    require_file(path, "texts file", "--texts")     # DatasetError unless it is a file
    text = read_text(path)                          # UTF-8, BOM dropped
    data = parse_json(path, text)                   # a key repeated within one object is an error
    lines = split_lines(text)                       # as an editor numbers them

Every loader (pairs, prompts, languages, the phase reference, ablation configs) reads through these.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import DatasetError, short
from ..jsonfile import JSONReadError, loads_json


def file_problem(path: Path, option: str | None = None) -> str | None:
    """``file_problem(Path("data"), "--dataset")  # 'is a folder, not a file; pass a file to --dataset'``: why
    ``path`` cannot be read as an input file, completing a sentence that starts with its name (None: it can be)."""
    try:
        folder, exists = path.is_dir(), path.exists()
    except OSError as exc:  # e.g. a name too long for the file system
        return f"cannot be used ({exc.strerror}); check {option or 'the path'}"
    if folder:
        return f"is a folder, not a file; pass {f'a file to {option}' if option else 'a file in it'}"
    if not exists:
        return f"does not exist; check {option or 'the path'}"
    return None


def require_file(path: Path, what: str, option: str | None = None) -> None:
    """``require_file(path, "texts file", "--texts")``: :class:`DatasetError` (``"texts file X does not exist;
    check --texts"``) unless ``path`` is a file."""
    if problem := file_problem(path, option):
        raise DatasetError(f"{what} {path} {problem}")


def read_text(path: Path) -> str:
    """``text = read_text(path)``: the file as UTF-8 text, a leading byte-order mark dropped, newlines as written.

    Raises :class:`DatasetError` when the file cannot be read or is not UTF-8.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the file ({exc.strerror or exc}); check its permissions") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                           "save the file with UTF-8 encoding") from None
    return text.removeprefix("\ufeff")


_NEWLINE = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """``split_lines("a\\r\\nb")  # ['a', 'b']``: lines as an editor numbers them (``\\n``, ``\\r\\n`` or ``\\r``).

    Unlike :meth:`str.splitlines`, characters such as U+2028 or U+0085 inside a line do not end it.
    """
    return _NEWLINE.split(text)


def parse_json(path: Path, text: str, where: str = "") -> Any:
    """``data = parse_json(path, text)``: the JSON value in ``text``; ``where`` (e.g. ``", line 3"``) goes in errors.

    Raises :class:`DatasetError` for invalid JSON, a key repeated within one object (JSON would silently keep
    only the last), nesting too deep to read, or a number too long to convert.
    """
    def unique(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in items:
            if key in obj:
                raise DatasetError(f"{path}{where}: the key {short(key)} appears twice in one object; JSON keeps "
                                   "only the last one, so merge the two entries or rename one")
            obj[key] = value
        return obj

    try:
        return loads_json(text, what=f"{path}{where}", object_pairs_hook=unique)
    except JSONReadError as exc:
        raise DatasetError(str(exc)) from None


def check_text(value: str) -> str | None:
    """``problem = check_text(s)``: why ``s`` cannot be used as text (None when it can).

    Catches what JSON allows but nothing downstream can hash, tokenize or write: unpaired surrogates
    (``"\\ud800"`` escapes), which have no UTF-8 form.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"contains the unpaired surrogate {value[exc.start]!r} at character {exc.start}, which is not a "
                "character; fix the \\u escape (surrogates come in pairs) or remove it")
    return None
