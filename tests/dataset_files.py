"""Dataset files for the loader tests: write bytes to a fresh temp file, load them, check the error.

    from dataset_files import load_file, to_json
    ds = load_file(load_pairs, to_json({"c": {"pairs": [["a", "b"], ["c", "d"]]}}), ".json")  # or None

Shared by ``tests/data/test_loaders_fuzz.py`` (generated files) and ``tests/data/test_loader_errors.py`` (the
cases the fuzzing found, pinned down).
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from layerscope.errors import DatasetError, LayerscopeError

BOM = b"\xef\xbb\xbf"


def load_file(loader: Callable[[Path], Any], data: bytes, suffix: str) -> Any:
    """``obj = load_file(load_pairs, b"...", ".json")``: write ``data`` to a fresh temp file and load it.

    Returns the loaded object, or None when the loader raised a DatasetError that names the file; any other
    exception propagates and fails the test. (tmp_path is shared by all examples of a test, so each example
    gets its own temp folder instead.)
    """
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"data{suffix}"
        path.write_bytes(data)
        try:
            return loader(path)
        except LayerscopeError as exc:
            assert isinstance(exc, DatasetError), f"{type(exc).__name__}: {exc}"
            message = str(exc)
            assert str(path) in message, message
            assert message.strip() and "Traceback" not in message
            chained = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
            assert chained is None, f"raise DatasetError(...) from None, not from {chained!r}"
            message.encode("utf-8")  # printable as it is: no unpaired surrogates from the file in the message
            return None


def utf8(text: str) -> bytes:
    """Text as a file's bytes; an unpaired surrogate becomes the invalid UTF-8 a careless writer would produce."""
    return text.encode("utf-8", "surrogatepass")


def to_json(value: Any, ascii_only: bool = True) -> bytes:
    return utf8(json.dumps(value, ensure_ascii=ascii_only))


def to_jsonl(rows: list[Any], ascii_only: bool = True, newline: str = "\n") -> bytes:
    return utf8(newline.join(json.dumps(r, ensure_ascii=ascii_only) for r in rows))


def to_csv(rows: list[list[Any]]) -> bytes:
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    return utf8(buf.getvalue())


def pair_rows(data: dict[str, dict]) -> list[tuple[str, str, str]]:
    return [(name, a, b) for name, body in data.items() for a, b in body["pairs"]]
