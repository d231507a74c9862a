"""The dataset loaders' errors on the inputs fuzzing broke them with, pinned down one case at a time.

    .venv/bin/python -m pytest -q tests/data/test_loader_errors.py

Each case was once a crash (RecursionError, ValueError, UnicodeEncodeError, csv.Error) or a silent misread (a key
given twice, a byte-order mark, a line separator inside a string); now it loads as meant or raises a
:class:`DatasetError` that says where and what to fix. The generated inputs are in ``test_loaders_fuzz.py``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dataset_files import BOM, load_file, pair_rows, to_csv, to_json, to_jsonl
from layerscope.data.languages import load_languages
from layerscope.data.pairs import load_pairs
from layerscope.data.prompts import load_prompts
from layerscope.errors import DatasetError

GOOD_PAIRS = {"c": {"pairs": [["One cat.", "One dog."], ["Two cats.", "Two dogs."]]}}
GOOD_LANGS = {"en": {"resource": "high", "texts": ["Hello."]}, "sw": {"resource": "low", "texts": ["Habari."]}}


def error(loader: Callable[[Path], Any], data: bytes, suffix: str) -> str:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"data{suffix}"
        path.write_bytes(data)
        with pytest.raises(DatasetError) as info:
            loader(path)
        return str(info.value)


@pytest.mark.parametrize("loader, suffix", [(load_pairs, ".json"), (load_pairs, ".jsonl"), (load_languages, ".json")])
@pytest.mark.parametrize("data, message", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),  # was RecursionError
    (b"1" * 5000, "Exceeds the limit"),  # was ValueError (int digit limit)
    (b'{"x": "\xed\xa0\x80"}', "not UTF-8 text"),  # an encoded surrogate is not UTF-8
])
def test_json_readers_turn_parser_crashes_into_dataset_errors(loader, suffix, data, message):
    assert message in error(loader, data, suffix)


def test_unpaired_surrogate_escapes_are_rejected_with_their_place():
    """JSON allows "\\ud800"; it loaded fine and then crashed ``.hash`` (UnicodeEncodeError) and every writer."""
    bad = {"c": {"pairs": [["One cat.", "One dog."], ["Two cats.", "Two \ud800dogs."]]}}
    message = error(load_pairs, to_json(bad), ".json")
    assert "category 'c', pair 1: statement B contains the unpaired surrogate" in message
    assert "surrogate" in error(load_pairs, to_json({"\udc00": GOOD_PAIRS["c"]}), ".json")
    assert "surrogate" in error(load_pairs, to_json({"c": {**GOOD_PAIRS["c"], "description": "\ud83d"}}), ".json")
    assert "language 'sw', text 0 contains the unpaired surrogate" in error(
        load_languages, to_json({**GOOD_LANGS, "sw": {"resource": "low", "texts": ["\udfff"]}}), ".json")


def test_a_key_twice_in_one_object_is_an_error_not_silently_dropped_pairs():
    twice = b'{"c": {"pairs": [["a", "b"], ["c", "d"]]}, "c": {"pairs": [["e", "f"], ["g", "h"]]}}'
    assert "the key 'c' appears twice" in error(load_pairs, twice, ".json")
    twice = b'{"en": {"resource": "high", "texts": ["x"]}, "en": {"resource": "low", "texts": ["y"]}}'
    assert "the key 'en' appears twice" in error(load_languages, twice, ".json")


def test_byte_order_marks_are_accepted():
    """Files saved by Excel or Notepad start with a BOM: CSV said 'expected a CSV header', JSON 'not valid JSON',
    and a prompts file's first '# kind' header became a prompt."""
    csv_data = to_csv([["category", "a", "b"], *pair_rows(GOOD_PAIRS)])
    assert load_file(load_pairs, BOM + csv_data, ".csv").hash == load_file(load_pairs, csv_data, ".csv").hash
    assert load_file(load_pairs, BOM + to_json(GOOD_PAIRS), ".json") is not None
    assert load_file(load_languages, BOM + to_json(GOOD_LANGS), ".json") is not None
    prompts = load_file(load_prompts, BOM + b"# facts\nWater is wet.\nFire is hot.\n", ".txt")
    assert prompts.texts == ("Water is wet.", "Fire is hot.") and prompts.kinds == ("facts", "facts")


def test_line_separators_inside_jsonl_strings_do_not_split_the_line():
    """str.splitlines() also splits at U+2028, U+0085 and others, which json.dumps(ensure_ascii=False) writes raw."""
    rows = [{"category": "c", "a": f"One{sep}cat.", "b": f"One dog {i}."} for i, sep in enumerate("\u2028\x85\x1c")]
    ds = load_file(load_pairs, to_jsonl(rows, ascii_only=False), ".jsonl")
    assert [p[0] for p in ds.categories[0].pairs] == ["One\u2028cat.", "One\x85cat.", "One\x1ccat."]


def test_csv_problems_name_the_line_and_the_fix():
    unquoted = b"category,a,b\nc,One cat.,One dog.\nc,Hello, world.,Bye.\n"
    assert "line 3: 4 fields but the header has 3 columns; put statements that contain commas in double quotes" in (
        error(load_pairs, unquoted, ".csv"))
    assert "the column 'a' appears twice" in error(load_pairs, b"category,a,b,a\nc,x,y,z\n", ".csv")
    huge = b"category,a,b\nc," + b"x" * 200_000 + b",y\n"  # csv's field size limit
    assert "line 2: malformed CSV" in error(load_pairs, huge, ".csv")
    assert "line 1: malformed CSV" in error(load_pairs, b"category,a," + b"b" * 200_000, ".csv")  # was csv.Error
    assert "the category is 5; give every pair a category name" in error(
        load_pairs, b'{"category": 5, "a": "x", "b": "y"}', ".jsonl")


def test_a_pair_twice_or_a_pair_of_one_statement_twice_is_an_error():
    """Either would only add a copy to every statistic; a statement may recur in other pairs, though."""
    repeated = {"a": GOOD_PAIRS["c"], "b": {"pairs": [["Red fish.", "Blue fish."], ["Two cats.", "Two dogs."]]}}
    assert "category 'b', pair 1 is a duplicate of category 'a', pair 1 (['Two cats.', 'Two dogs.'])" in error(
        load_pairs, to_json(repeated), ".json")
    same = {"c": {"pairs": [["One cat.", "One cat."], ["Two cats.", "Two dogs."]]}}
    assert "category 'c', pair 0 has statement A the same as statement B ('One cat.')" in error(
        load_pairs, to_json(same), ".json")
    shared = {"a": GOOD_PAIRS["c"], "b": {"pairs": [["Red fish.", "One dog."], ["Two cats.", "Ten dogs."]]}}
    assert load_file(load_pairs, to_json(shared), ".json").n_pairs == 4
