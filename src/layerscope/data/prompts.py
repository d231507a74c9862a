"""Prompt sets: one prompt per line; blank lines are skipped and ``# kind`` lines name the
kind of the prompts that follow.

    prompts = load_prompts()                # the bundled set (36 prompts, 6 kinds)
    prompts = load_prompts("mine.txt")
    prompts.texts, prompts.kinds, prompts.hash
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import DatasetError
from ..provenance import sha256_json
from .files import read_text, require_file, split_lines

MIN_PROMPTS = 2


@dataclass(frozen=True)
class PromptSet:
    texts: tuple[str, ...]
    kinds: tuple[str | None, ...]
    """The ``# kind`` header each prompt stood under (None before any header)."""
    source: str

    @property
    def hash(self) -> str:
        return sha256_json(list(self.texts))


def bundled_prompts_path() -> Path:
    return Path(str(resources.files("layerscope.data").joinpath("bundled/prompts.txt")))


def load_prompts(path: str | os.PathLike | None = None) -> PromptSet:
    """``prompts = load_prompts("mine.txt")``: read a prompts file; ``None`` reads the bundled one.

    Lines end at ``\\n``, ``\\r\\n`` or ``\\r``; a leading byte-order mark is dropped. A file that cannot be read,
    is not UTF-8 or has fewer than ``MIN_PROMPTS`` prompts raises :class:`DatasetError`.
    """
    path = Path(path) if path is not None else bundled_prompts_path()
    require_file(path, "prompts file", "--prompts")
    texts, kinds, kind = [], [], None
    for line in (raw.strip() for raw in split_lines(read_text(path))):
        if line.startswith("#"):
            kind = line.lstrip("#").strip() or None
        elif line:
            texts.append(line)
            kinds.append(kind)
    if len(texts) < MIN_PROMPTS:
        raise DatasetError(f"{path}: {len(texts)} prompt(s); anisotropy needs at least {MIN_PROMPTS} "
                           "(one per line) to compare token states across prompts")
    return PromptSet(texts=tuple(texts), kinds=tuple(kinds), source=str(path))
