"""layerscope.jsonfile: the nesting counted as a parsed value's depth, the limit at MAX_DEPTH exactly, strings
that hold brackets, and the files it refuses to read."""

import json
import os
import random

import pytest

from layerscope.jsonfile import MAX_DEPTH, JSONReadError, loads_json, nesting, read_json


def depth(value) -> int:
    """The nesting of a parsed value, by recursion: 0 for a scalar."""
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


def random_value(rng: random.Random, levels: int):
    if levels == 0 or rng.random() < 0.2:
        return rng.choice([1, "a]]}", '{"[', None, 2.5, "\\\"[", ""])
    if rng.random() < 0.5:
        return [random_value(rng, levels - 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}[": random_value(rng, levels - 1) for i in range(rng.randint(0, 3))}


def test_nesting_is_the_parsed_depth_whatever_the_strings_hold():
    rng = random.Random(0)
    for _ in range(300):
        value = random_value(rng, rng.randint(0, 12))
        text = json.dumps(value)
        assert nesting(text) == depth(value), text


def test_the_limit_is_max_depth_exactly_and_deeper_is_one_clear_error():
    assert loads_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(JSONReadError, match=r"x\.json: JSON nested too deeply \(more than 64 levels\)"):
        loads_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), what="x.json")
    with pytest.raises(JSONReadError, match="nested too deeply"):  # Python's parser alone: RecursionError
        loads_json('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")


def test_unreadable_files_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(JSONReadError, match="bad.json: not UTF-8"):
        read_json(bad)
    bad.write_text('{"a": 1')
    with pytest.raises(JSONReadError, match=r"bad.json: not valid JSON \(line 1"):
        read_json(bad)
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(JSONReadError, match="not a regular file"):  # an open() would block forever
        read_json(fifo)
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")
