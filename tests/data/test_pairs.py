import csv
import json

import pytest

from layerscope import DatasetError, load_pairs

TWO_CATS = {
    "numbers": {"description": "digits vs words", "pairs": [["It costs 5 euros.", "It costs five euros."],
                                                           ["We met 2 times.", "We met twice."]]},
    "voice": {"pairs": [["The dog chased the cat.", "The cat was chased by the dog."],
                        ["Ann wrote the memo.", "The memo was written by Ann."],
                        ["Rain flooded the road.", "The road was flooded by rain."]]},
}


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def as_jsonl(data):
    return "\n".join(json.dumps({"category": c, "a": a, "b": b}) for c, body in data.items() for a, b in body["pairs"])


def as_csv(tmp_path, data):
    path = tmp_path / "pairs.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["category", "a", "b"])
        for c, body in data.items():
            for a, b in body["pairs"]:
                w.writerow([c, a, b])
    return path


def test_bundled_dataset_is_big_enough_and_valid():
    ds = load_pairs()
    assert len(ds.categories) >= 6 and ds.n_pairs >= 120
    texts = ds.texts()
    assert len(texts) == 2 * ds.n_pairs and all(t.strip() for t in texts)
    assert all(len(c.pairs) >= 2 and c.description for c in ds.categories)


def test_three_formats_give_the_same_dataset_and_hash(tmp_path):
    from_json = load_pairs(write(tmp_path, "pairs.json", TWO_CATS))
    from_jsonl = load_pairs(write(tmp_path, "pairs.jsonl", as_jsonl(TWO_CATS)))
    from_csv = load_pairs(as_csv(tmp_path, TWO_CATS))
    for ds in (from_jsonl, from_csv):
        assert [(c.name, c.pairs) for c in ds.categories] == [(c.name, c.pairs) for c in from_json.categories]
        assert ds.hash == from_json.hash
    assert from_json.texts()[:4] == ["It costs 5 euros.", "It costs five euros.", "We met 2 times.", "We met twice."]
    assert from_json.pair_categories().tolist() == [0, 0, 1, 1, 1]
    assert from_json.categories[0].description == "digits vs words"


def test_hash_changes_with_content(tmp_path):
    changed = json.loads(json.dumps(TWO_CATS))
    changed["voice"]["pairs"][0][1] = "The cat was chased."
    assert load_pairs(write(tmp_path, "a.json", TWO_CATS)).hash != load_pairs(write(tmp_path, "b.json", changed)).hash


def error_of(path) -> str:
    with pytest.raises(DatasetError) as info:
        load_pairs(path)
    return str(info.value)


def with_pair(category, index, value):
    data = json.loads(json.dumps(TWO_CATS))
    data[category]["pairs"][index] = value
    return data


@pytest.mark.parametrize("bad_pair", [["only one"], ["a", ""], ["a", 3], "a string", ["a", "b", "c"], ["  ", "b"]])
def test_bad_pair_names_file_category_and_index(tmp_path, bad_pair):
    path = write(tmp_path, "d.json", with_pair("voice", 2, bad_pair))
    message = error_of(path)
    assert str(path) in message and "category 'voice'" in message and "pair 2" in message


def test_malformed_files_get_one_clear_error(tmp_path):
    assert "not valid JSON (line 1" in error_of(write(tmp_path, "x.json", "{not json"))
    assert "does not exist" in error_of(tmp_path / "missing.json")
    assert "unknown dataset format '.txt'" in error_of(write(tmp_path, "x.txt", "hello"))
    assert "no categories" in error_of(write(tmp_path, "empty.json", {}))
    assert "expected a JSON object" in error_of(write(tmp_path, "list.json", [["a", "b"]]))
    assert "'pairs'" in error_of(write(tmp_path, "nopairs.json", {"c": {"items": []}}))
    one = {"c": {"pairs": [["a", "b"]]}}
    assert "category 'c' has 1 pair(s)" in error_of(write(tmp_path, "one.json", one))
    assert "has 0 pair(s)" in error_of(write(tmp_path, "zero.json", {"c": {"pairs": []}}))
    assert "empty name" in error_of(write(tmp_path, "noname.json", {"": TWO_CATS["voice"]}))


def test_jsonl_and_csv_errors_name_the_line(tmp_path):
    lines = as_jsonl(TWO_CATS).splitlines()
    lines[3] = '{"category": "voice", "a": "x"}'
    assert "line 4" in error_of(write(tmp_path, "d.jsonl", "\n".join(lines)))
    lines[3] = '{"category": "voice", "a": "x", "b": ""}'
    message = error_of(write(tmp_path, "e.jsonl", "\n".join(lines)))
    assert "category 'voice', pair 1 (line 4)" in message
    assert "header" in error_of(write(tmp_path, "h.csv", "cat,x,y\nc,a,b\n"))
    message = error_of(write(tmp_path, "r.csv", "category,a,b\nc,one,two\nc,three\n"))
    assert "category 'c', pair 1 (line 3)" in message
