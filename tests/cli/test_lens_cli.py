"""`layerscope lens` on a tiny saved Llama: the grid it prints (its last row the model's own argmax, computed here
with transformers), the files --out writes (CSV, PNG, SVG that parses as XML), refusal to overwrite, one error line
for each bad input."""

import xml.etree.ElementTree as ET

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from conftest import error_line
from layerscope.cli import app
from layerscope.engine.lenses.prompt import show_token

runner = CliRunner()
PROMPT = "The cat sat on the mat."
SVG = "{http://www.w3.org/2000/svg}"


def run(*args):
    return runner.invoke(app, ["lens", *args])


def test_prints_the_grid_with_the_models_argmax_last(out_model):
    result = run(PROMPT, "--model", out_model)
    assert result.exit_code == 0, result.output
    model, tok = AutoModelForCausalLM.from_pretrained(out_model), AutoTokenizer.from_pretrained(out_model)
    ids = tok(PROMPT)["input_ids"]
    with torch.no_grad():
        argmax = model(input_ids=torch.tensor([ids])).logits[0].argmax(dim=-1).tolist()
    n_layers = model.config.num_hidden_layers
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("layer "))
    grid = lines[start : start + n_layers + 2]
    assert grid[0].split()[1:] == [show_token(tok.decode([i])) for i in ids]
    assert [line.split()[0] for line in grid[1:]] == [str(layer) for layer in range(n_layers + 1)]
    assert grid[-1].split()[1:] == [show_token(tok.decode([i])) for i in argmax]


def test_out_writes_csv_png_svg_and_refuses_to_overwrite(tmp_path, out_model):
    out = tmp_path / "lens"
    result = run(PROMPT, "--model", out_model, "--top-k", "3", "--out", str(out))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "lens.csv")
    assert list(table.columns) == ["layer", "position", "input_token", "rank", "token", "token_id", "prob"]
    assert sorted(table["rank"].unique()) == [1, 2, 3] and table["prob"].between(0, 1).all()
    assert (out / "lens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    root = ET.parse(out / "lens.svg").getroot()
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert texts and "top-1 probability" in texts
    assert not list(tmp_path.glob("lens/.*"))  # no temp file left beside them
    before = (out / "lens.csv").read_bytes()
    line = error_line(run(PROMPT, "--model", out_model, "--out", str(out)))
    assert "lens.csv already exists" in line and "--force" in line
    assert (out / "lens.csv").read_bytes() == before
    assert run(PROMPT, "--model", out_model, "--top-k", "1", "--out", str(out), "--force").exit_code == 0
    assert pd.read_csv(out / "lens.csv")["rank"].unique().tolist() == [1]


def test_texts_file_runs_each_prompt(tmp_path, out_model):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The cat sat.\n\n# a comment\nIce floats on water.\n")
    result = run("--texts", str(prompts), "--model", out_model, "--top-k", "2", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert "text 1: The cat sat." in result.output and "text 2: Ice floats on water." in result.output
    table = pd.read_csv(tmp_path / "o" / "lens.csv")
    assert table.columns[0] == "text" and table["text"].unique().tolist() == ["The cat sat.", "Ice floats on water."]
    for name in ("lens-1.png", "lens-1.svg", "lens-2.png", "lens-2.svg"):
        assert (tmp_path / "o" / name).stat().st_size > 0


def test_a_repeated_prompt_in_texts_is_read_once_per_line(tmp_path, out_model):
    prompts = tmp_path / "prompts.txt"
    lines = ["The cat sat.", "Ice floats on water.", "The cat sat."]
    prompts.write_text("\n".join(lines) + "\n")
    result = run("--texts", str(prompts), "--model", out_model, "--top-k", "2", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    for n, line in enumerate(lines, start=1):
        assert f"text {n}: {line}" in result.output
    table = pd.read_csv(tmp_path / "o" / "lens.csv")
    assert list(table.columns) == ["text", "prompt_index", "layer", "position", "input_token", "rank", "token",
                                   "token_id", "prob"]
    assert table.drop_duplicates("prompt_index")[["prompt_index", "text"]].values.tolist() == \
        [[0, lines[0]], [1, lines[1]], [2, lines[2]]]
    model, tok = AutoModelForCausalLM.from_pretrained(out_model), AutoTokenizer.from_pretrained(out_model)
    n_layers = model.config.num_hidden_layers
    for i, line in enumerate(lines):
        ids = tok(line)["input_ids"]
        rows = table[table["prompt_index"] == i]
        assert len(rows) == (n_layers + 1) * len(ids) * 2  # layers x positions x --top-k
        with torch.no_grad():
            argmax = model(input_ids=torch.tensor([ids])).logits[0].argmax(dim=-1).tolist()
        last = rows[(rows["layer"] == n_layers) & (rows["rank"] == 1)].sort_values("position")
        assert last["token_id"].tolist() == argmax
    for name in ("lens-1.png", "lens-2.png", "lens-3.png", "lens-3.svg"):
        assert (tmp_path / "o" / name).stat().st_size > 0


@pytest.mark.parametrize("args, match", [
    (["  "], "PROMPT is empty"),
    ([], "give one PROMPT or --texts"),
    ([PROMPT, "--texts", "TEXTS"], "not both"),
    ([PROMPT, "--top-k", "0"], "--top-k 0"),
    ([PROMPT, "--top-k", "100000"], "vocabulary"),
    (["--texts", "EMPTY"], "holds no prompt"),
    (["--texts", "MISSING"], "MISSING"),
    ([PROMPT, "--out", "FILE"], "not a folder"),
])
def test_bad_input_is_one_error_line(tmp_path, out_model, args, match):
    (tmp_path / "TEXTS").write_text("The cat sat.\n")
    (tmp_path / "EMPTY").write_text("\n# nothing\n")
    (tmp_path / "FILE").write_text("x")
    args = [str(tmp_path / a) if a in ("TEXTS", "EMPTY", "MISSING", "FILE") else a for a in args]
    line = error_line(run(*args, "--model", out_model))
    assert match in line
