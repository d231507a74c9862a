"""Per-language text sets: ``{lang: {"resource": "high"|"low", "texts": [...], "name"?, "script"?}}``.

    langs = load_languages()                 # bundled: 8 languages, 6 parallel texts each
    langs = load_languages("texts.json")
    [l.code for l in langs.high], langs.texts()   # texts() -> [(lang, sample, text), ...]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import DatasetError, short
from ..paths import name_problem
from ..provenance import sha256_json
from .files import check_text, parse_json, read_text, require_file

RESOURCES = ("high", "low")


@dataclass(frozen=True)
class Language:
    code: str
    resource: str
    texts: tuple[str, ...]
    name: str = ""
    script: str = ""


@dataclass(frozen=True)
class LanguageTexts:
    languages: tuple[Language, ...]
    source: str

    @property
    def high(self) -> list[Language]:
        return [lang for lang in self.languages if lang.resource == "high"]

    @property
    def low(self) -> list[Language]:
        return [lang for lang in self.languages if lang.resource == "low"]

    @property
    def hash(self) -> str:
        return sha256_json([[lang.code, lang.resource, list(lang.texts)] for lang in self.languages])

    def texts(self) -> list[tuple[str, int, str]]:
        """Every text as (language code, index within its language, text), languages in file order."""
        return [(lang.code, i, text) for lang in self.languages for i, text in enumerate(lang.texts)]


def bundled_languages_path() -> Path:
    return Path(str(resources.files("layerscope.data").joinpath("bundled/languages.json")))


def load_languages(path: str | os.PathLike | None = None) -> LanguageTexts:
    """``langs = load_languages("texts.json")``: read and validate a texts file; ``None`` reads the bundled one.

    Any problem with the file raises :class:`DatasetError` naming the file, the language and the fix.
    """
    path = Path(path) if path is not None else bundled_languages_path()
    require_file(path, "texts file", "--texts")
    data = parse_json(path, read_text(path))
    if not isinstance(data, dict) or not data:
        raise DatasetError(f'{path}: expected a JSON object {{lang: {{"resource": "high"|"low", "texts": [...]}}}}')
    languages = []
    for code, body in data.items():
        if not code.strip():
            raise DatasetError(f"{path}: a language has an empty code; give every language a code like 'en'")
        if problem := check_text(code):
            raise DatasetError(f"{path}: the language code {short(code)} {problem}")
        if problem := name_problem(code):  # a code may name a file (a figure, a per-language table)
            raise DatasetError(f"{path}: the language code {short(code)} cannot be used as a file name: it {problem}; "
                               "use a code like 'en' or 'pt-BR' (letters, digits, '-', '_')")
        where = f"{path}: language {code!r}"
        if not isinstance(body, dict):
            raise DatasetError(f'{where}: expected an object with "resource" and "texts", got {short(body)}')
        resource = body.get("resource")
        if not isinstance(resource, str) or resource not in RESOURCES:
            raise DatasetError(f"{where}: resource is {short(resource)}; use \"high\" or \"low\"")
        texts = body.get("texts")
        if not isinstance(texts, list) or not texts:
            raise DatasetError(f"{where}: 'texts' must be a non-empty list of strings, got {short(texts)}")
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise DatasetError(f"{where}, text {i}: expected a non-empty string, got {short(text, 60)}")
            if problem := check_text(text):
                raise DatasetError(f"{where}, text {i} {problem}")
        extra = {}
        for field in ("name", "script"):
            if field in body:
                if not isinstance(body[field], str):
                    raise DatasetError(f"{where}: '{field}' must be a string, got {short(body[field])}")
                if problem := check_text(body[field]):
                    raise DatasetError(f"{where}: '{field}' {problem}")
                extra[field] = body[field]
        languages.append(Language(code=code, resource=resource, texts=tuple(texts),
                                  name=extra.get("name", code), script=extra.get("script", "")))
    result = LanguageTexts(languages=tuple(languages), source=str(path))
    for resource, found in (("high", result.high), ("low", result.low)):
        if not found:
            raise DatasetError(f"{path}: no {resource}-resource language; the disparity between high- and "
                               f"low-resource languages needs at least one of each")
    return result
