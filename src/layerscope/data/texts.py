"""A plain list of texts, for measures that need no labels (the atlas study).

    texts = load_texts()                 # bundled: every statement of the bundled pairs, then the bundled prompts
    texts = load_texts("corpus.txt")     # one text per line; blank lines and '# ' lines skipped
    texts = load_texts("languages.json") # the ablation's languages file: every language's texts, in file order
    texts.texts, texts.source, texts.hash

A ``.json`` file is read as a languages file, so one ``--texts`` serves both the ablation and the atlas in a suite.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import DatasetError
from ..provenance import sha256_json
from .languages import load_languages
from .pairs import bundled_pairs_path, load_pairs
from .prompts import bundled_prompts_path, load_prompts

MIN_TEXTS = 3
"""TwoNN needs 3 distinct points (a first and a second neighbour for each)."""


@dataclass(frozen=True)
class TextSet:
    texts: tuple[str, ...]
    source: str

    @property
    def hash(self) -> str:
        return sha256_json(list(self.texts))


def load_texts(path: str | os.PathLike | None = None) -> TextSet:
    """``load_texts("corpus.txt")``: the texts of a text file (the prompts file rules: one per line, blank and
    ``#`` lines skipped) or of a languages ``.json`` file; ``None``: the bundled pair statements and prompts.
    :class:`DatasetError` naming the file and the fix when it cannot be read or holds fewer than ``MIN_TEXTS`` texts."""
    if path is None:
        pairs, prompts = load_pairs(), load_prompts()
        return TextSet(texts=(*pairs.texts(), *prompts.texts),
                       source=f"bundled: {bundled_pairs_path().name} statements + {bundled_prompts_path().name}")
    path = Path(path)
    if path.suffix.lower() == ".json":
        texts = tuple(text for _lang, _i, text in load_languages(path).texts())
    else:
        texts = load_prompts(path, option="--texts", purpose="the atlas", minimum=MIN_TEXTS).texts
    if len(texts) < MIN_TEXTS:
        raise DatasetError(f"{path}: {len(texts)} text(s); the atlas needs at least {MIN_TEXTS} (one per line) for "
                           "a first and a second nearest neighbour (TwoNN); add texts")
    return TextSet(texts=texts, source=str(path))
