"""`layerscope train-lens` and `layerscope lens --tuned` on a tiny model, and `ls.lens(..., lens=...)`: the grid a
tuned lens prints is the top-1 of a hand computation (h + h W^T + b, the final norm, the head), a zero lens
prints the logit lens's grid, a trained lens is found again in the cache, and a lens of another model is one error
line."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import tiny
from conftest import error_line
from layerscope.cli import app
from layerscope.engine.lenses.prompt import lens
from layerscope.engine.lenses.tuned import TunedLens
from layerscope.models import load_model
from layerscope.report.lens_figure import lens_comparison_figure

runner = CliRunner()
PROMPT = "the cat sat on the mat"


@pytest.fixture(autouse=True)
def one_thread_and_own_cache(monkeypatch, tmp_path):
    """One torch thread inside each test (restored after: later tests compare against subprocesses bitwise)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(tmp_path / "cache"))
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def model(tmp_path):
    return str(tiny.save(tmp_path / "tiny", "llama", adds_bos=False, n_layers=3))


def random_lens(lm, seed=3, scale=0.3):
    out = TunedLens.zeros(lm)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in out.translators:
            t.weight.copy_(scale * torch.randn(t.weight.shape, generator=g))
            t.bias.copy_(scale * torch.randn(t.bias.shape, generator=g))
    return out


def hand_top1(lm, tuned, prompt):
    """(L + 1, T) top-1 token ids: a plain forward, then h + h W^T + b -> final norm -> head per state < L."""
    ids = lm.tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = lm.model(input_ids=ids, output_hidden_states=True)
        rows = []
        for state in range(lm.info.n_layers):
            h = out.hidden_states[state][0]
            t = tuned.translators[state]
            moved = h + h @ t.weight.T + t.bias
            rows.append(lm.model.lm_head(lm.model.model.norm(moved)).argmax(-1))
        rows.append(out.logits[0].argmax(-1))
    return torch.stack(rows).numpy()


def test_ls_lens_through_a_tuned_lens_is_the_hand_computation_and_a_zero_lens_the_logit_lens(model):
    lm = load_model(model)
    tuned = random_lens(lm)
    table = lens(lm, PROMPT, top_k=1, lens=tuned)
    grid = table["token_id"].to_numpy().reshape(lm.info.n_layers + 1, -1)
    np.testing.assert_array_equal(grid, hand_top1(lm, tuned, PROMPT))
    plain, zero = lens(lm, PROMPT, top_k=3), lens(lm, PROMPT, top_k=3, lens=TunedLens.zeros(lm))
    assert plain.equals(zero)
    assert not plain.equals(lens(lm, PROMPT, top_k=3, lens=tuned))  # the translators change the grid


def test_train_lens_writes_the_format_finds_it_again_and_lens_reads_through_it(model, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(tiny.TEXTS) + "\n")
    out = tmp_path / "lens"
    args = ["train-lens", "--model", model, "--corpus", str(corpus), "--steps", "3", "--batch-size", "2",
            "--out", str(out)]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "trained the tuned lens" in first.output and "bits per token; held out" in first.output
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 3 and config["lens_type"] == "linear_tuned_lens"
    assert config["layerscope"]["steps"] == 3 and config["layerscope"]["corpus"]["description"] == str(corpus)
    assert config["layerscope"]["batch_size"] == 2 and config["layerscope"]["tokens_per_step"] is None
    params = torch.load(out / "params.pt", weights_only=True)
    assert sorted(params) == sorted(f"{i}.{k}" for i in range(3) for k in ("weight", "bias"))
    assert any(float(v.abs().max()) > 0 for v in params.values())  # the start and three steps moved them
    fig = lens_comparison_figure(config["layerscope"]["heldout"])  # what lens_eval.png shows
    drawn = {line.get_label(): line.get_ydata() for ax in fig.axes for line in ax.get_lines()
             if line.get_label().endswith("lens")}
    assert len(drawn) == 2 and (out / "lens_eval.png").stat().st_size > 0
    kl = [line.get_ydata() for line in fig.axes[0].get_lines() if line.get_label().endswith("lens")]
    held = config["layerscope"]["heldout"]["metrics"]
    assert np.allclose(kl[0], held["logit_kl"]) and np.allclose(kl[1], held["tuned_kl"])
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "found the tuned lens" in again.output  # the second use costs nothing
    assert torch.equal(torch.load(out / "params.pt", weights_only=True)["0.weight"], params["0.weight"])

    shown = runner.invoke(app, ["lens", PROMPT, "--model", model, "--tuned", str(out), "--top-k", "1"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("tuned lens of")
    lm = load_model(model)
    tuned = TunedLens.load(out, lm)  # checked against the hand computation in the test above
    assert lens(lm, PROMPT, top_k=1, lens=tuned).grid() in shown.output
    plain = runner.invoke(app, ["lens", PROMPT, "--model", model, "--top-k", "1"])
    assert plain.output.startswith("logit lens of") and lens(lm, PROMPT, top_k=1).grid() in plain.output


def test_tuned_auto_without_a_trained_lens_and_a_lens_of_another_model_are_one_error_line(model, tmp_path):
    line = error_line(runner.invoke(app, ["lens", PROMPT, "--model", model, "--tuned", "auto"]))
    assert "train-lens --model" in line
    other = str(tiny.save(tmp_path / "deeper", "llama", adds_bos=False, n_layers=4))
    TunedLens.zeros(load_model(other)).save(tmp_path / "other-lens")
    line = error_line(runner.invoke(app, ["lens", PROMPT, "--model", model, "--tuned", str(tmp_path / "other-lens")]))
    assert "4" in line and "3" in line


def test_train_lens_with_its_defaults_samples_the_model_and_lens_tuned_auto_finds_it(model):
    trained = runner.invoke(app, ["train-lens", "--model", model])
    assert trained.exit_code == 0, trained.output
    folder = trained.output.split(" in ", 1)[1].splitlines()[0].strip()
    record = json.loads((Path(folder) / "config.json").read_text())["layerscope"]
    assert "sampled from the model itself" in record["corpus"]["description"] and record["steps"] == 40
    assert record["tokens_per_step"] == 512 and record["init"] == "lstsq" and record["optimizer"] == "adam"
    assert record["tokens"]["token_draws"] == 40 * 512
    assert record["tokens"]["distinct_train_rows"] <= record["tokens"]["train_rows"]
    assert record["corpus"]["heldout_texts"] >= 1 and record["heldout"]["metrics"]["tuned_kl"][-1] == 0
    assert len(record["in_sample"]["metrics"]["tuned_kl"]) == 4 and record["in_sample"]["metrics"]["tuned_kl"][-1] == 0
    assert "logit_kl" not in record["in_sample"]["metrics"]  # in sample: the tuned lens only
    shown = runner.invoke(app, ["lens", PROMPT, "--model", model, "--tuned", "auto"])
    assert shown.exit_code == 0 and shown.output.startswith("tuned lens of"), shown.output


def lens_files(root):
    return sorted(p for pattern in ("config.json", "params.pt") for p in Path(root).rglob(pattern)
                  if "tiny" not in p.parts)  # the saved model's own config.json is not a lens


@pytest.mark.parametrize(("extra", "named"), [
    (["--steps", "0"], "steps must be at least 1"),
    (["--max-tokens", "10", "--tokens-per-step", "64"], "--max-tokens 10 is below"),
])
def test_train_lens_settings_that_cannot_train_are_one_error_line(model, tmp_path, extra, named):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(tiny.TEXTS) + "\n")
    out = tmp_path / "lens"
    line = error_line(runner.invoke(app, ["train-lens", "--model", model, "--corpus", str(corpus), "--out", str(out),
                                          *extra]))
    assert named in line, line
    assert not out.exists() and lens_files(tmp_path) == []


def test_train_lens_corpora_that_cannot_train_are_one_error_line(model, tmp_path):
    out = tmp_path / "lens"
    one = tmp_path / "one.txt"
    one.write_text("# a comment\nThe cat sat on the mat.\n\n")
    line = error_line(runner.invoke(app, ["train-lens", "--model", model, "--corpus", str(one), "--out", str(out)]))
    assert "one.txt" in line and "1 text" in line and "at least 2" in line, line

    short = tmp_path / "short.txt"
    words = ["a", "b", "x"]
    tok = load_model(model).tokenizer
    assert [len(tok(w)["input_ids"]) for w in words] == [1, 1, 1]  # one token each: nothing to predict
    short.write_text("\n".join(words) + "\n")
    line = error_line(runner.invoke(app, ["train-lens", "--model", model, "--corpus", str(short), "--out", str(out)]))
    assert "two tokens" in line, line
    assert not out.exists() and lens_files(tmp_path) == []


def test_train_lens_below_a_file_is_one_error_line(model, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(tiny.TEXTS) + "\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "lens"  # below a file: cannot be made, whoever runs the test
    line = error_line(runner.invoke(app, ["train-lens", "--model", model, "--corpus", str(corpus), "--out", str(out)]))
    assert "cannot write the lens" in line and str(out) in line, line
    assert lens_files(tmp_path) == []


def test_train_lens_into_a_read_only_folder_is_one_error_line(model, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(tiny.TEXTS) + "\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as root: a 0o500 folder is still writable")
        for target in (locked, locked / "lens"):
            line = error_line(runner.invoke(app, ["train-lens", "--model", model, "--corpus", str(corpus),
                                                  "--out", str(target)]))
            assert "cannot write the lens" in line and str(target) in line, line
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)
    assert lens_files(tmp_path) == []


def test_train_lens_full_vocab_reads_the_whole_vocabulary_and_keys_its_own_lens(model, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(tiny.TEXTS) + "\n")
    args = ["train-lens", "--model", model, "--corpus", str(corpus), "--steps", "2", "--tokens-per-step", "16"]
    full = runner.invoke(app, [*args, "--full-vocab"])
    assert full.exit_code == 0, full.output
    shortlist = runner.invoke(app, args)
    assert shortlist.exit_code == 0 and "trained the tuned lens" in shortlist.output  # not the --full-vocab lens
    folders = [Path(r.output.split(" in ", 1)[1].splitlines()[0].strip()) for r in (full, shortlist)]
    assert folders[0] != folders[1]
    records = [json.loads((f / "config.json").read_text())["layerscope"] for f in folders]
    assert records[0]["normaliser"] == "full vocabulary" and records[1]["normaliser"].startswith("shortlist")
