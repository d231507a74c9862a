"""`layerscope run atlas --tuned-lens`: both lenses per layer in the table, the tuned lens's profile in the lens
family with the logit lens as a check, the lens's provenance in the manifest and the report, ``auto`` training
once and reusing the cached lens, and bad lens folders refused before any output."""

import hashlib
import json

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import tiny
from layerscope import load_model
from layerscope.cli import app
from layerscope.engine.atlas.stream import atlas_pass
from layerscope.engine.lenses.tuned import TunedLens

runner = CliRunner()
LENS_METRICS = ("lens_ce", "lens_entropy", "lens_kl", "lens_top1_agree")


def run(*args):
    return runner.invoke(app, ["run", "atlas", *map(str, args)])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A tiny 6-layer Llama, a texts file, and a lens folder of random translators saved for that model."""
    root = tmp_path_factory.mktemp("atlas_tuned")
    model = tiny.save(root / "llama", "llama", adds_bos=False, n_layers=6)
    texts = root / "texts.txt"
    texts.write_text("\n".join(tiny.TEXTS))
    lm = load_model(str(model))
    lens = TunedLens.zeros(lm)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in lens.translators:
            t.weight.copy_(torch.randn(t.weight.shape, generator=gen) * 0.2)
    lens.save(root / "lens")
    return root, str(model), texts, lm, lens


@pytest.fixture(scope="module")
def tuned_run(inputs):
    root, model, texts, _, _ = inputs
    out = root / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        result = run("--model", model, "--texts", texts, "--tuned-lens", root / "lens", "--out", out)
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "result.json").read_text()), pd.read_csv(out / "table.csv")


def test_both_lenses_are_in_the_table_with_the_pass_numbers(tuned_run, inputs):
    _, model, texts, lm, lens = inputs
    _, data, table = tuned_run
    want = atlas_pass(lm, tiny.TEXTS, progress=False, tuned=lens.translate)
    for metric in LENS_METRICS:
        for prefix, values in (("", want.lens[metric]), ("tuned_", want.tuned_lens[metric])):
            rows = table[table["metric"] == prefix + metric].sort_values("layer")
            assert rows["layer"].tolist() == list(range(7))
            assert rows["value"].to_numpy() == pytest.approx(values, rel=1e-6, abs=1e-9), prefix + metric
    logit = table[table["metric"] == "lens_kl"].sort_values("layer")["value"].to_numpy()
    tuned = table[table["metric"] == "tuned_lens_kl"].sort_values("layer")["value"].to_numpy()
    assert (abs(logit[:-1] - tuned[:-1]) > 1e-6).all()  # random translators move every state's lens


def test_the_tuned_lens_votes_in_the_lens_family_and_the_logit_lens_is_a_check(tuned_run, inputs):
    root = inputs[0]
    out, data, table = tuned_run
    s = next(iter(data["summary"]["models"].values()))
    b = s["boundaries"]
    assert b["families"]["lens"] == ["tuned_lens_kl", "tuned_lens_top1_agree"]
    assert "logit_lens" in b["variants"] and all("logit_lens" in m for m in b["moved"])
    assert {"tuned_lens_kl", "lens_kl"} <= set(b["per_metric"])
    assert s["lens"]["family"] == "tuned lens"
    info = s["lens"]["tuned_lens"]
    params = (root / "lens" / "params.pt").read_bytes()
    assert info["params_sha256"] == hashlib.sha256(params).hexdigest()
    assert info["folder"] == str(root / "lens") and info["trained_now"] is False
    model_entry = data["manifest"]["models"][0]
    assert model_entry["tuned_lens"] == info
    report = (out / "report.md").read_text()
    assert "The lens family is the tuned lens" in report and "logit_lens" in report
    assert "| tuned-lens KL | lens |" in report and "| logit-lens KL |  |" in report
    assert (out / "atlas_profiles.png").is_file()


def test_without_a_tuned_lens_the_family_is_the_logit_lens(tmp_path, inputs):
    root, model, texts, _, _ = inputs
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        result = run("--model", model, "--texts", texts, "--out", out)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "result.json").read_text())
    s = next(iter(data["summary"]["models"].values()))
    assert s["boundaries"]["families"]["lens"] == ["lens_kl", "lens_top1_agree"]
    assert "logit_lens" not in s["boundaries"]["variants"] and s["lens"] == {"family": "logit lens",
                                                                              "tuned_lens": None}
    assert not pd.read_csv(out / "table.csv")["metric"].str.startswith("tuned_").any()


def test_auto_trains_the_lens_once_then_reuses_it(tmp_path, inputs):
    _, model, texts, _, _ = inputs
    seen = []
    for name in ("first", "second"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LAYERSCOPE_CACHE", str(tmp_path / "cache"))
            result = run("--model", model, "--texts", texts, "--tuned-lens", "auto", "--out", tmp_path / name)
        assert result.exit_code == 0, result.output
        data = json.loads((tmp_path / name / "result.json").read_text())
        seen.append(next(iter(data["summary"]["models"].values()))["lens"]["tuned_lens"])
    assert [s["trained_now"] for s in seen] == [True, False]
    assert seen[0]["params_sha256"] == seen[1]["params_sha256"] and seen[0]["folder"] == seen[1]["folder"]
    assert seen[0]["folder"].startswith(str(tmp_path / "cache" / "lenses"))
    assert seen[0]["steps"] == 40 and seen[0]["tokens_per_step"] == 512 and seen[0]["init"] == "lstsq"
    assert "sampled from the model itself" in seen[0]["corpus"]


def test_bad_lens_folders_are_one_clear_error_and_no_output(tmp_path, inputs):
    root, model, texts, _, _ = inputs
    result = run("--model", model, "--texts", texts, "--tuned-lens", tmp_path / "missing", "--out", tmp_path / "a")
    assert result.exit_code == 2 and "is not a folder" in result.output, result.output
    assert not (tmp_path / "a").exists()
    other = tiny.save(tmp_path / "wide", "llama", adds_bos=False, n_layers=3)  # 3 layers, not 6
    TunedLens.zeros(load_model(str(other))).save(tmp_path / "lens3")
    result = run("--model", model, "--texts", texts, "--tuned-lens", tmp_path / "lens3", "--out", tmp_path / "b")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and "layers" in result.output, result.output
    assert not (tmp_path / "b").exists()
