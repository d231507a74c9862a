"""`layerscope train-lens` and `layerscope lens --tuned` on a tiny model, and `ls.lens(..., lens=...)`: the grid a
tuned lens prints is the top-1 of a hand computation (h + h W^T + b, the final norm, the head), a zero lens
prints the logit lens's grid, a trained lens is found again in the cache, and a lens of another model is one error
line."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import tiny
from conftest import error_line
from layerscope.cli import app
from layerscope.engine.lens_prompt import lens
from layerscope.engine.tuned_lens import TunedLens
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
    assert "trained the tuned lens" in first.output and "held-out, bits per token" in first.output
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 3 and config["lens_type"] == "linear_tuned_lens"
    assert config["layerscope"]["steps"] == 3 and config["layerscope"]["corpus"]["description"] == str(corpus)
    params = torch.load(out / "params.pt", weights_only=True)
    assert sorted(params) == sorted(f"{i}.{k}" for i in range(3) for k in ("weight", "bias"))
    assert any(float(v.abs().max()) > 0 for v in params.values())  # three SGD steps moved the translators
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
    assert "sampled from the model itself" in record["corpus"]["description"] and record["steps"] == 250
    assert record["corpus"]["heldout_texts"] >= 1 and record["heldout"]["metrics"]["tuned_kl"][-1] == 0
    shown = runner.invoke(app, ["lens", PROMPT, "--model", model, "--tuned", "auto"])
    assert shown.exit_code == 0 and shown.output.startswith("tuned lens of"), shown.output
