"""Per-language text sets: ``{lang: {"resource": "high"|"low", "texts": [...], "name"?, "script"?}}``.

    langs = load_languages()                 # bundled: 8 languages, 6 parallel texts each
    langs = load_languages("texts.json")
    [l.code for l in langs.high], langs.texts()   # texts() -> [(lang, sample, text), ...]
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import DatasetError
from ..provenance import sha256_json

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
    path = Path(path) if path is not None else bundled_languages_path()
    if not path.is_file():
        raise DatasetError(f"texts file {path} does not exist; check --texts")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict) or not data:
        raise DatasetError(f'{path}: expected a JSON object {{lang: {{"resource": "high"|"low", "texts": [...]}}}}')
    languages = []
    for code, body in data.items():
        where = f"{path}: language '{code}'"
        if not code.strip():
            raise DatasetError(f"{path}: a language has an empty code; give every language a code like 'en'")
        if not isinstance(body, dict):
            raise DatasetError(f'{where}: expected an object with "resource" and "texts"')
        if body.get("resource") not in RESOURCES:
            raise DatasetError(f"{where}: resource is {body.get('resource')!r}; use \"high\" or \"low\"")
        texts = body.get("texts")
        if not isinstance(texts, list) or not texts:
            raise DatasetError(f"{where}: 'texts' must be a non-empty list of strings")
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise DatasetError(f"{where}, text {i}: expected a non-empty string, got {text!r:.60}")
        languages.append(Language(code=code, resource=body["resource"], texts=tuple(texts),
                                  name=str(body.get("name", code)), script=str(body.get("script", ""))))
    result = LanguageTexts(languages=tuple(languages), source=str(path))
    for resource, found in (("high", result.high), ("low", result.low)):
        if not found:
            raise DatasetError(f"{path}: no {resource}-resource language; the disparity between high- and "
                               f"low-resource languages needs at least one of each")
    return result
