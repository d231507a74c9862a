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


def load_prompts(path: str | os.PathLike | None = None, *, option: str = "--prompts",
                 purpose: str = "anisotropy", minimum: int = MIN_PROMPTS) -> PromptSet:
    """``prompts = load_prompts("mine.txt")``: read a prompts file; ``None`` reads the bundled one.

    Lines end at ``\\n``, ``\\r\\n`` or ``\\r``; a leading byte-order mark is dropped. A file that cannot be read,
    is not UTF-8 or has fewer than ``minimum`` prompts raises :class:`DatasetError`; its message names
    ``option`` and ``purpose`` (the study that reads the file).
    """
    path = Path(path) if path is not None else bundled_prompts_path()
    require_file(path, "prompts file" if option == "--prompts" else "texts file", option)
    texts, kinds, kind = [], [], None
    for line in (raw.strip() for raw in split_lines(read_text(path))):
        if line.startswith("#"):
            kind = line.lstrip("#").strip() or None
        elif line:
            texts.append(line)
            kinds.append(kind)
    if len(texts) < minimum:
        raise DatasetError(f"{path}: {len(texts)} prompt(s); {purpose} needs at least {minimum} "
                           "(one per line) to compare token states across prompts")
    return PromptSet(texts=tuple(texts), kinds=tuple(kinds), source=str(path))
