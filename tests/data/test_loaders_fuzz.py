"""Fuzzing the dataset loaders: any file content either loads to a valid object or raises a DatasetError.

    .venv/bin/python -m pytest -q tests/data/test_loaders_fuzz.py

``load_pairs`` (.json, .jsonl, .csv), ``load_languages`` and ``load_prompts`` get arbitrary bytes, arbitrary
text, random JSON values and near-valid datasets (missing keys, wrong types, empty or whitespace strings,
unpaired surrogates, one-pair categories, duplicate keys, byte-order marks, odd unicode). Whatever loads must be
usable (hashable, every text a non-empty string); whatever fails must fail with a :class:`DatasetError` whose
message names the file, never with a traceback. Valid generated datasets must load back exactly, with the same
``hash`` from all three pair formats. The cases the fuzzing found are pinned down in ``test_loader_errors.py``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataset_files import BOM, load_file, pair_rows, to_csv, to_json, to_jsonl, utf8
from layerscope.data.languages import LanguageTexts, load_languages
from layerscope.data.pairs import PairDataset, load_pairs
from layerscope.data.prompts import MIN_PROMPTS, PromptSet, load_prompts
from layerscope.paths import name_problem

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PAIR_SUFFIXES = (".json", ".jsonl", ".csv")


# --- what a loaded object must satisfy -----------------------------------------------------------------------


def usable(text: Any) -> bool:
    if not isinstance(text, str) or not text.strip():
        return False
    text.encode("utf-8")  # raises on an unpaired surrogate
    return True


def check_pairs(ds: PairDataset) -> None:
    assert ds.categories and all(usable(c.name) for c in ds.categories)
    assert len({c.name for c in ds.categories}) == len(ds.categories)
    for c in ds.categories:
        assert len(c.pairs) >= 2 and all(len(p) == 2 and all(usable(s) for s in p) for p in c.pairs)
        assert isinstance(c.description, str) and isinstance(c.expected_effect, str)
        (c.description + c.expected_effect).encode("utf-8")
    pairs = [p for c in ds.categories for p in c.pairs]
    assert len(set(pairs)) == len(pairs) and all(a != b for a, b in pairs)
    assert len(ds.hash) == 64 and len(ds.texts()) == 2 * ds.n_pairs and len(ds.pair_categories()) == ds.n_pairs


def check_languages(langs: LanguageTexts) -> None:
    assert langs.high and langs.low
    for lang in langs.languages:
        assert usable(lang.code) and lang.resource in ("high", "low") and lang.texts
        assert all(usable(t) for t in lang.texts)
        assert isinstance(lang.name, str) and isinstance(lang.script, str)
        (lang.name + lang.script).encode("utf-8")
    assert len(langs.hash) == 64 and len(langs.texts()) == sum(len(lang.texts) for lang in langs.languages)


def check_prompts(prompts: PromptSet) -> None:
    assert len(prompts.texts) >= MIN_PROMPTS and len(prompts.kinds) == len(prompts.texts)
    for text in prompts.texts:
        assert usable(text) and text == text.strip() and not text.startswith("#")
        assert "\n" not in text and "\r" not in text
    assert all(k is None or usable(k) for k in prompts.kinds)
    assert len(prompts.hash) == 64


def try_pairs(data: bytes, suffix: str) -> PairDataset | None:
    ds = load_file(load_pairs, data, suffix)
    if ds is not None:
        check_pairs(ds)
    return ds


def try_languages(data: bytes) -> LanguageTexts | None:
    langs = load_file(load_languages, data, ".json")
    if langs is not None:
        check_languages(langs)
    return langs


def try_prompts(data: bytes) -> PromptSet | None:
    prompts = load_file(load_prompts, data, ".txt")
    if prompts is not None:
        check_prompts(prompts)
    return prompts


# --- strategies ----------------------------------------------------------------------------------------------

ODD = ["", " ", "\t\n ", "\ud800", "a\udfffb", "\ufeff", "\u2028", "line\u2028break", "x\x85y", "\x00", "\x1c",
       "e\u0301", "\u202eevil", "🙂" * 3, "\U0010ffff", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "a,b", 'say "hi"', "x\r\ny", "#hash", "٣٤"]
"""Strings that have broken parsers: empty, whitespace, surrogates, BOMs, line separators, controls."""

odd_text = st.sampled_from(ODD)
small_text = st.text(max_size=12)
any_text = st.one_of(small_text, odd_text, st.text(min_size=50, max_size=300))
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_text)
json_value = st.recursive(json_scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                st.dictionaries(any_text, inner, max_size=4)),
                          max_leaves=12)
"""Any JSON value, NaN and Infinity included (Python's json reads and writes them)."""

statement = st.one_of(st.text(min_size=1, max_size=30).filter(str.strip), odd_text)
pair = st.one_of(st.lists(statement, min_size=2, max_size=2), st.lists(statement, max_size=3), json_value)
pairs_body = st.fixed_dictionaries({}, optional={
    "pairs": st.one_of(st.lists(pair, max_size=5), json_value),
    "description": st.one_of(small_text, odd_text, json_value),
    "expected_effect": st.one_of(small_text, odd_text),
    "notes": json_value,
})
near_valid_pairs = st.dictionaries(st.one_of(small_text, odd_text), st.one_of(pairs_body, json_value), max_size=4)

row_value = st.one_of(statement, json_value)
jsonl_row = st.one_of(
    st.fixed_dictionaries({"category": st.one_of(st.sampled_from(["c", "d"]), row_value), "a": row_value,
                           "b": row_value}),
    st.fixed_dictionaries({}, optional={"category": row_value, "a": row_value, "b": row_value, "x": row_value}),
    json_value,
)
csv_header = st.one_of(st.just(["category", "a", "b"]), st.permutations(["category", "a", "b", "note"]),
                       st.lists(st.sampled_from(["category", "a", "b", "c", ""]), max_size=5))
csv_row = st.lists(st.one_of(st.sampled_from(["c", "d"]), statement), max_size=5)

lang_body = st.fixed_dictionaries({}, optional={
    "resource": st.one_of(st.sampled_from(["high", "low", "medium", "HIGH", ""]), json_value),
    "texts": st.one_of(st.lists(statement, max_size=4), json_value),
    "name": st.one_of(small_text, odd_text, json_value),
    "script": st.one_of(small_text, json_value),
})
near_valid_languages = st.dictionaries(st.one_of(st.sampled_from(["en", "sw", "ja"]), small_text, odd_text),
                                       st.one_of(lang_body, json_value), max_size=4)

good_text = st.text(min_size=1, max_size=40).filter(str.strip)
"""A usable statement: hypothesis' text() never yields surrogates; leading or trailing spaces are kept."""
good_code = good_text.filter(lambda code: name_problem(code) is None)
"""A usable language code: any text that is safe as a file name (tests/security/test_names.py: the others)."""


def _dataset(sizes: dict[str, int], texts: list[str]) -> dict[str, list[list[str]]]:
    it = iter(texts)
    return {name: [[next(it), next(it)] for _ in range(n)] for name, n in sizes.items()}


good_dataset = st.dictionaries(good_text, st.integers(2, 5), min_size=1, max_size=4).flatmap(
    lambda sizes: st.lists(good_text, min_size=2 * sum(sizes.values()), max_size=2 * sum(sizes.values()),
                           unique=True).map(lambda texts: _dataset(sizes, texts)))
"""``{category: [[a, b], ...]}`` with every statement distinct, so no pair repeats and no pair is A == A."""


def line_text(min_size: int = 1) -> st.SearchStrategy[str]:
    """One line of a prompts file as it loads back: stripped, no line break, no leading '#' or BOM."""
    return st.text(min_size=min_size, max_size=40).map(str.strip).filter(
        lambda t: len(t) >= min_size and "\n" not in t and "\r" not in t and not t.startswith(("#", "\ufeff")))


# --- anything at all -----------------------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=400), bom=st.booleans())
def test_arbitrary_bytes_load_or_raise_a_dataset_error(data, bom):
    data = BOM + data if bom else data
    for suffix in PAIR_SUFFIXES:
        try_pairs(data, suffix)
    try_languages(data)
    try_prompts(data)


@FUZZ
@given(text=st.text(max_size=400), bom=st.booleans())
def test_arbitrary_text_loads_or_raises_a_dataset_error(text, bom):
    data = (BOM if bom else b"") + text.encode("utf-8")
    for suffix in PAIR_SUFFIXES:
        try_pairs(data, suffix)
    try_languages(data)
    try_prompts(data)


@FUZZ
@given(value=json_value, ascii_only=st.booleans())
def test_any_json_value_loads_or_raises_a_dataset_error(value, ascii_only):
    data = to_json(value, ascii_only)
    try_pairs(data, ".json")
    try_pairs(to_jsonl(value if isinstance(value, list) else [value], ascii_only), ".jsonl")
    try_languages(data)


# --- near-valid files ----------------------------------------------------------------------------------------


@FUZZ
@given(data=near_valid_pairs, ascii_only=st.booleans())
def test_near_valid_pairs_json(data, ascii_only):
    ds = try_pairs(to_json(data, ascii_only), ".json")
    if ds is not None:  # a valid file loads to exactly what it says
        assert [c.name for c in ds.categories] == list(data)
        assert [[list(p) for p in c.pairs] for c in ds.categories] == [data[c]["pairs"] for c in data]


@FUZZ
@given(rows=st.lists(jsonl_row, max_size=8), ascii_only=st.booleans(), newline=st.sampled_from(["\n", "\r\n"]),
       blank=st.booleans())
def test_near_valid_pairs_jsonl(rows, ascii_only, newline, blank):
    data = to_jsonl(rows, ascii_only, newline) + (b"\n\n  \n" if blank else b"")
    ds = try_pairs(data, ".jsonl")
    if ds is not None:
        assert ds.n_pairs == len(rows)


@FUZZ
@given(header=csv_header, rows=st.lists(csv_row, max_size=8))
def test_near_valid_pairs_csv(header, rows):
    ds = try_pairs(to_csv([header, *rows]), ".csv")
    if ds is not None:
        assert ds.n_pairs == sum(1 for r in rows if r)


@FUZZ
@given(data=near_valid_languages, ascii_only=st.booleans())
def test_near_valid_languages(data, ascii_only):
    langs = try_languages(to_json(data, ascii_only))
    if langs is not None:
        assert [lang.code for lang in langs.languages] == list(data)
        assert [list(lang.texts) for lang in langs.languages] == [body["texts"] for body in data.values()]


@FUZZ
@given(lines=st.lists(st.one_of(statement, st.builds("# {}".format, small_text), st.just("")), max_size=8),
       newline=st.sampled_from(["\n", "\r\n", "\r"]))
def test_near_valid_prompts(lines, newline):
    try_prompts(utf8(newline.join(lines)))


# --- valid files round-trip ----------------------------------------------------------------------------------


@FUZZ
@given(data=good_dataset, ascii_only=st.booleans(), newline=st.sampled_from(["\n", "\r\n"]), bom=st.booleans())
def test_the_three_spellings_of_a_dataset_load_to_the_same_pairs_and_hash(data, ascii_only, newline, bom):
    data = {name: {"pairs": pairs} for name, pairs in data.items()}
    rows = pair_rows(data)
    prefix = BOM if bom else b""
    loaded = [
        try_pairs(prefix + to_json(data, ascii_only), ".json"),
        try_pairs(prefix + to_jsonl([{"category": c, "a": a, "b": b} for c, a, b in rows], ascii_only, newline),
                  ".jsonl"),
        try_pairs(prefix + to_csv([["category", "a", "b"], *rows]), ".csv"),
    ]
    expected = [(name, tuple(map(tuple, body["pairs"]))) for name, body in data.items()]
    for ds in loaded:
        assert ds is not None
        assert [(c.name, c.pairs) for c in ds.categories] == expected
        assert ds.hash == loaded[0].hash


@FUZZ
@given(data=st.dictionaries(good_code, st.tuples(st.sampled_from(["high", "low"]), st.lists(good_text, min_size=1,
                                                                                             max_size=4)),
                            min_size=1, max_size=5),
       ascii_only=st.booleans(), bom=st.booleans())
def test_valid_languages_load_back(data, ascii_only, bom):
    body = {code: {"resource": resource, "texts": texts} for code, (resource, texts) in data.items()}
    langs = try_languages((BOM if bom else b"") + to_json(body, ascii_only))
    resources = {resource for resource, _ in data.values()}
    assert (langs is not None) == (resources == {"high", "low"})  # fails only for lack of one resource level
    if langs is not None:
        assert [(lang.code, lang.resource, list(lang.texts)) for lang in langs.languages] == [
            (code, resource, texts) for code, (resource, texts) in data.items()]


@FUZZ
@given(groups=st.lists(st.tuples(st.none() | line_text(), st.lists(line_text(), min_size=1, max_size=4)),
                       min_size=1, max_size=4),
       newline=st.sampled_from(["\n", "\r\n", "\r"]), bom=st.booleans())
def test_valid_prompts_load_back(groups, newline, bom):
    lines, texts, kinds, kind = [], [], [], None
    for header, group in groups:
        if header is not None:
            lines += ["", f"# {header}"]
            kind = header
        lines += group
        texts += group
        kinds += [kind] * len(group)
    prompts = try_prompts((BOM if bom else b"") + utf8(newline.join(lines) + newline))
    assert (prompts is not None) == (len(texts) >= MIN_PROMPTS)
    if prompts is not None:
        assert list(prompts.texts) == texts and list(prompts.kinds) == kinds
