"""A store entry's journal: which rows were written, and a checksum of every chunk they were written in.

    line = Journal.line(start, stop, sums)           # one JSON line: {"start", "stop", "xxh3": {key: hex}}
    entries, lines = parse(folder / "journal.jsonl", n)   # the usable lines (later ones replacing earlier); lines read
    digest(chunk)                                    # XXH3-64 of an array's bytes, read from its buffer (no copy)

A batch's rows ``[start, stop)`` are written as chunks: one per stored layer of each ``pooled_<p>`` array (layer
``l``'s rows are one contiguous run) and one for each other array. The journal line written after them holds each
chunk's XXH3-64 (16 hex digits; a ``pooled_<p>`` key holds its layers' digests one after another), so a reader
checks exactly the chunks it reads, when it first reads them, and nothing else. XXH3 runs at tens of GB/s (SHA-256,
the journal's former checksum, at about 1.4 GB/s on a server core sat on the critical path of every batch); it is a
checksum against damage and killed writers, not a signature against an attacker who can write the cache.

Only journalled rows count as written. A line that does not parse (a killed writer's torn last line), that names
rows outside the entry, or that lacks the ``xxh3`` key (a journal of an older store format) is ignored: its rows
are computed again. A line for rows that a later line covers again (the rows were written again) is superseded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

HEX = 16
"""Hex digits of one chunk's XXH3-64."""


def digest(chunk: np.ndarray) -> str:
    """``digest(array)``: XXH3-64 of a C-contiguous array's bytes as 16 hex digits, hashed from its buffer."""
    return f"{xxhash.xxh3_64_intdigest(memoryview(chunk).cast('B')):016x}"


@dataclass(frozen=True)
class Entry:
    """One journal line: rows ``[start, stop)`` and their chunks' digests ``{key: hex}``."""

    start: int
    stop: int
    sums: dict[str, str]

    def chunk(self, key: str, slot: int = 0) -> str | None:
        """The digest of ``key``'s chunk (layer ``slot`` of a pooled array), or None when the line has none."""
        value = self.sums.get(key)
        if not isinstance(value, str) or len(value) < (slot + 1) * HEX:
            return None
        return value[slot * HEX : (slot + 1) * HEX]

    def line(self) -> str:
        return json.dumps({"start": self.start, "stop": self.stop, "xxh3": self.sums}, separators=(",", ":"))


def parse(path: Path, n_rows: int) -> tuple[list[Entry], int]:
    """``(entries, n_lines)``: the journal's usable lines in file order (a line whose rows a later one covers again
    left out) and how many lines the file holds; ``([], 0)`` when it cannot be read."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return [], 0
    entries: list[Entry] = []
    for text in lines:
        try:
            raw = json.loads(text)
            entry = Entry(int(raw["start"]), int(raw["stop"]), dict(raw["xxh3"]))
        except (ValueError, KeyError, TypeError):
            continue  # torn, foreign, or of an older format
        if 0 <= entry.start < entry.stop <= n_rows:
            entries = [e for e in entries if e.stop <= entry.start or e.start >= entry.stop]
            entries.append(entry)
    return entries, len(lines)


def text(entries: list[Entry]) -> bytes:
    """The journal file holding exactly ``entries``."""
    return "".join(e.line() + "\n" for e in entries).encode()
