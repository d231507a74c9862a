"""data.labels: one label set spelled as CSV and as JSONL gives one LabelSet and one hash; groups default to the
row's own index; every refusal is a DatasetError naming the file, the line where there is one, and the fix."""

import json

import pytest

from layerscope.data.labels import LabelSet, load_labels
from layerscope.errors import DatasetError

ROWS = [("I loved it, truly", "pos", "a"), ("Dull.", "neg", "b"), ('She said "fine"', "pos", "c"),
        ("Never again", "neg", "d"), ("Great fun", "pos", "e"), ("Too long", "neg", "f")]


def write_csv(path, rows, header="text,label,group", bom=False):
    def quote(field):
        return '"' + field.replace('"', '""') + '"' if any(ch in field for ch in ',"\n') else field

    lines = [header] + [",".join(quote(f) for f in row) for row in rows]
    path.write_text(("\ufeff" if bom else "") + "\r\n".join(lines) + "\r\n", encoding="utf-8")
    return path


def write_jsonl(path, objects):
    path.write_text("\n".join(json.dumps(o, ensure_ascii=False) for o in objects) + "\n", encoding="utf-8")
    return path


def objects(rows, keys=("text", "label", "group")):
    return [dict(zip(keys, row, strict=False)) for row in rows]


def test_csv_and_jsonl_spellings_give_equal_label_sets_and_hashes(tmp_path):
    from_csv = load_labels(write_csv(tmp_path / "mood.csv", ROWS, bom=True), folds=3)
    from_jsonl = load_labels(write_jsonl(tmp_path / "mood.jsonl", objects(ROWS)), folds=3)
    assert from_csv == from_jsonl
    assert from_csv.hash == from_jsonl.hash and len(from_csv.hash) == 64
    assert from_csv.name == "mood"
    assert from_csv.texts[0] == "I loved it, truly" and from_csv.texts[2] == 'She said "fine"'
    assert from_csv.labels == ("pos", "neg", "pos", "neg", "pos", "neg")
    assert from_csv.groups == ("a", "b", "c", "d", "e", "f")
    assert from_csv.classes == ("neg", "pos")
    other = load_labels(write_jsonl(tmp_path / "other.jsonl", objects(ROWS[1:] + ROWS[:1])), folds=3)
    assert other.hash != from_csv.hash


def test_groups_default_to_the_row_index_and_numbers_read_as_written(tmp_path):
    rows = [(f"text {i}", i % 2) for i in range(6)]
    jsonl = load_labels(write_jsonl(tmp_path / "n.jsonl", objects(rows, ("text", "label"))), folds=3)
    csv = load_labels(write_csv(tmp_path / "n.csv", [(t, str(y)) for t, y in rows], header="text,label"), folds=3)
    assert jsonl.groups == ("0", "1", "2", "3", "4", "5") and jsonl.labels == ("0", "1") * 3
    assert csv == LabelSet(name="n", texts=jsonl.texts, labels=jsonl.labels, groups=jsonl.groups, hash=jsonl.hash)


def test_a_group_column_keeps_rows_together_and_counts_groups_per_class(tmp_path):
    rows = [(f"t{i}", "pos" if i < 6 else "neg", f"g{i // 2}") for i in range(12)]  # 3 groups per class
    labels = load_labels(write_csv(tmp_path / "g.csv", rows), folds=3)
    assert labels.groups[:4] == ("g0", "g0", "g1", "g1")
    with pytest.raises(DatasetError, match=r"'neg' has 3 groups, fewer than the 4 folds.*add groups.*lower folds"):
        load_labels(tmp_path / "g.csv", folds=4)


def test_a_group_with_two_labels_is_refused_unless_allowed(tmp_path):
    pairs = [(f"side {s} of {i}", s, f"pair{i}") for i in range(5) for s in "AB"]
    path = write_jsonl(tmp_path / "pairs.jsonl", objects(pairs))
    with pytest.raises(DatasetError, match=r"pairs.jsonl, line 2: group 'pair0' has the label 'B', but line 1 gave "
                                           r"it 'A'.*allow_mixed_groups=True"):
        load_labels(path)
    assert load_labels(path, allow_mixed_groups=True).classes == ("A", "B")


@pytest.mark.parametrize("name, content, message", [
    ("rows.txt", "text,label\n", r"unknown label file format '\.txt'; use \.csv .* or \.jsonl"),
    ("rows", "text,label\n", r"no extension; use \.csv"),
    ("cols.csv", "text,class\na,b\n", r"needs the columns text,label"),
    ("extra.csv", "text,label,groups\na,b,c\n", r"unknown column 'groups'.*remove or rename it"),
    ("keys.jsonl", '{"text": "a"}\n', r"line 1: expected an object with the keys text and label"),
    ("emptytext.csv", "text,label\n  ,pos\n", r"line 2: the text is .*give every row a non-empty text"),
    ("emptylabel.jsonl", '{"text": "a", "label": "pos"}\n{"text": "b", "label": ""}\n',
     r"line 2: the label is empty; give every row a non-empty label"),
    ("oneclass.csv", "text,label\n" + "".join(f"t{i},pos\n" for i in range(6)),
     r"every row has the label 'pos'; a probe needs at least two classes, so add rows of another class"),
    ("few.csv", "text,label\n" + "".join(f"t{i},{'pos' if i < 7 else 'neg'}\n" for i in range(10)),
     r"the class 'neg' has 3 rows, fewer than the 5 folds.*add rows of that class or lower folds"),
    ("empty.csv", "", r"no rows; a label file needs one text and its label per row"),
    ("blank.jsonl", "\n\n", r"no rows"),
    ("somegroups.jsonl", '{"text": "a", "label": "x", "group": "g"}\n{"text": "b", "label": "y"}\n',
     r"line 2: no group, but other rows name one; give every row a group, or leave the group out"),
])
def test_bad_files_name_the_file_the_line_and_the_fix(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError, match=message) as info:
        load_labels(path)
    assert str(path) in str(info.value)


def test_a_file_that_is_not_utf8_or_missing_is_refused(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("text,label\ncaf\u00e9,pos\n".encode("latin-1"))
    with pytest.raises(DatasetError, match=r"latin.csv: not UTF-8 text .*save the file with UTF-8 encoding"):
        load_labels(path)
    with pytest.raises(DatasetError, match=r"label file .*missing.csv does not exist"):
        load_labels(tmp_path / "missing.csv")


def test_a_text_given_two_labels_is_refused_naming_both_lines(tmp_path):
    rows = [*ROWS, ("Dull.", "pos", "g")]  # "Dull." is line 3 with "neg"; the repeat is line 8
    with pytest.raises(DatasetError, match=r"line 8: the text 'Dull\.' has the label 'pos', but line 3 gives it "
                                           r"'neg'.*keep one of the two rows"):
        load_labels(write_csv(tmp_path / "two.csv", rows), folds=3)


def test_a_repeated_text_is_refused_naming_both_lines(tmp_path):
    rows = [*ROWS, ("Great fun", "pos", "z")]  # the same label, another group: it could sit in train and test
    with pytest.raises(DatasetError, match=r"line 7: the text 'Great fun' repeats line 5.*training fold and a test "
                                           r"fold"):
        load_labels(write_jsonl(tmp_path / "rep.jsonl", objects(rows)), folds=3)


def test_classes_unbalanced_beyond_95_to_5_are_refused_with_the_counts(tmp_path):
    rows = [(f"yes {i}", "yes") for i in range(58)] + [(f"no {i}", "no") for i in range(3)]  # 95.08 %
    with pytest.raises(DatasetError, match=r"'yes' holds 58 of the 61 rows \(95\.1%\), more than 95%.*balance"):
        load_labels(write_csv(tmp_path / "skew.csv", rows, header="text,label"), folds=3)
    ok = rows[:57] + rows[58:]  # 57 of 60: exactly 95 %, accepted
    assert load_labels(write_csv(tmp_path / "edge.csv", ok, header="text,label"), folds=3).classes == ("no", "yes")
