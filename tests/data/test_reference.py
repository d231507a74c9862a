"""Reference phase means: the method columns (data, layers, token_rule), old 4-5 column files, and the rows
marked as comparable with this run only when they were computed the same way."""

import pytest

from layerscope import DatasetError
from layerscope.data.reference import load_phase_reference, mark_comparable


def write(tmp_path, text):
    path = tmp_path / "ref.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_bundled_rows_say_what_the_phases_notebook_states_about_them():
    rows = load_phase_reference()
    assert [(r["model"], r["early"], r["mid"], r["late"]) for r in rows] == [
        ("Pythia-6.9B (base)", 0.44, 0.36, -0.17), ("Llama-3.1-8B (base)", 0.05, -0.16, -0.30),
        ("Llama-3.1-8B-Instruct (chat template)", -0.47, -0.58, -0.60)]
    assert all(r["source"].startswith("published") and r["data"] == "not stated" for r in rows)
    assert rows[0]["layers"].startswith("every 4th layer") and rows[1]["layers"] == "not stated"
    assert rows[2]["token_rule"].startswith("chat template applied")


@pytest.mark.parametrize("text", ["model,early,mid,late\nM,0.1,0.2,-0.3\n",
                                  "model,early,mid,late,source\nM,0.1,0.2,-0.3,my paper\n"])
def test_old_four_and_five_column_files_still_load_with_the_method_not_stated(tmp_path, text):
    (row,) = load_phase_reference(write(tmp_path, text))
    assert (row["model"], row["early"], row["mid"], row["late"]) == ("M", 0.1, 0.2, -0.3)
    assert row["source"] == ("my paper" if "source" in text else "reference file")
    assert (row["data"], row["layers"], row["token_rule"]) == ("not stated",) * 3


def test_the_method_columns_load_and_an_empty_cell_is_not_stated(tmp_path):
    path = write(tmp_path, "model,early,mid,late,source,data,layers,token_rule\n"
                           'M,0.1,0.2,-0.3,paper,"pairs.json, 230 pairs",0-30,  \n'
                           "N,0,0,0,,,every 4th,last token\n")
    m, n = load_phase_reference(path)
    assert (m["data"], m["layers"], m["token_rule"]) == ("pairs.json, 230 pairs", "0-30", "not stated")
    assert (n["source"], n["data"], n["layers"], n["token_rule"]) == ("reference file", "not stated", "every 4th",
                                                                      "last token")


@pytest.mark.parametrize("text, message", [
    ("model,early,mid,late,data,data\nM,0,0,0,a,b\n", r"repeats the column\(s\) data"),
    ("model,early,mid,late\nM,0,0,0,extra\n", r"line 2: more cells than the header"),
    ('model,early,mid,late,layers\nM,0,0,0,"0-4\n8"\n', r"line 3: the layers cell spans several lines"),
    ("model,early,mid\nM,0,0\n", r"expected a CSV header with the columns model,early,mid,late"),
    ("model,early,mid,late\nM,0,nan,0\n", r"line 2: mid must be a finite number"),
])
def test_bad_reference_files_name_the_problem(tmp_path, text, message):
    with pytest.raises(DatasetError, match=message):
        load_phase_reference(write(tmp_path, text))


def test_trailing_empty_cells_are_tolerated(tmp_path):
    (row,) = load_phase_reference(write(tmp_path, "model,early,mid,late\nM,0.1,0.2,-0.3,,\n"))
    assert row["late"] == -0.3


def test_only_rows_computed_the_same_way_as_this_run_are_directly_comparable():
    method = {"data": "pairs.json (154 pairs)", "layers": "0-30 of 30", "token_rule": "mean"}
    rows = mark_comparable([{"model": "same", "source": "paper", **method},
                            {"model": "other", "source": "paper", **method, "layers": "every 4th"},
                            {"model": "vague", "source": "paper", **method, "token_rule": "not stated"},
                            {"model": "me", "source": "this run", **method},
                            {"model": "me too", "source": "this run", **method, "data": "other.json"}])
    assert [(r["model"], r["comparable"], r["comparability"]) for r in rows] == [
        ("same", True, "directly comparable"),
        ("other", False, "not directly comparable (layers differs or is not stated)"),
        ("vague", False, "not directly comparable (token rule differs or is not stated)"),
        ("me", None, "basis of the comparison"),
        ("me too", False, "not directly comparable (data differs or is not stated)")]
