"""Anisotropy and ablation end to end on the real models, through the CLI; ablation's seed
mode against the notebook's reload-per-configuration loop."""

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import notebook_reference as notebook
from layerscope import load_model
from layerscope.cli import app
from layerscope.data.languages import load_languages
from layerscope.measures.spectrum import anisotropy_metrics
from layerscope.models.zoo import _smollm2_gguf
from layerscope.studies.ablation.configs import standard_configs

pytestmark = pytest.mark.integration
runner = CliRunner()


def run(out, *args):
    result = runner.invoke(app, ["run", *map(str, args), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "result.json").read_text()), pd.read_csv(out / "table.csv")


@pytest.fixture(scope="module")
def two_texts_each(tmp_path_factory):
    """The bundled languages, two texts each: every language, a fraction of the time."""
    data = json.loads(open(load_languages().source, encoding="utf-8").read())
    for body in data.values():
        body["texts"] = body["texts"][:2]
    path = tmp_path_factory.mktemp("texts") / "texts.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_anisotropy_on_smollm2_says_where_the_saturation_comes_from(real_suite):
    data, table, out = real_suite.study("anisotropy")
    s = data["summary"]["models"]["smollm2-135m"]
    assert s["n_prompts"] >= 32 and set(s["token_sets"]) == {"all", "excl_pos0", "excl_massive", "excl_pos0_massive"}
    top1 = table[(table["metric"] == "top1_ratio") & (table["tokens"] == "all")].sort_values("layer")
    top1 = top1[top1["stage"] != "post_norm"]  # the profile takes layer 30 before the final norm
    assert len(top1) == 31 and s["l_star"] == int(top1["value"].to_numpy().argmax())
    assert (top1[top1["layer"].between(12, 28)]["value"] > 0.99).all()  # the notebook's "1.000"
    without = table[(table["metric"] == "top1_ratio") & (table["tokens"] == "excl_pos0")]
    assert (without[without["layer"].between(12, 28)]["value"] < 0.5).all()
    report = (out / "report.md").read_text()
    assert "Is the top-1 share an outlier-dimension effect?" in report and "position-0 token" in report
    assert (out / "anisotropy_results.zip").stat().st_size > 10_000


def test_anisotropy_metrics_on_real_states_equal_the_d_by_d_computation():
    lm = load_model("smollm2-135m")
    ids = lm.tokenizer(["The river carried small boats past the old mill every morning."] * 2
                       + ["Seven of the twelve students passed the exam."], return_tensors="pt", padding=True)
    hidden = lm.model(**ids, output_hidden_states=True).hidden_states[20]
    x = hidden[ids["attention_mask"].bool()].detach().numpy().astype(np.float64)
    cov = np.cov(x, rowvar=False)
    eig = np.maximum(np.sort(np.linalg.eigvalsh(cov))[::-1], 1e-10)
    ours = anisotropy_metrics(x)
    assert ours["top1_ratio"] == pytest.approx(eig[0] / eig.sum(), rel=1e-6)
    assert ours["eigenvalue_variance"] == pytest.approx(np.var(eig), rel=1e-6)


def test_ablation_on_smollm2_primary_and_notebook_schemes(tmp_path, two_texts_each):
    data, table = run(tmp_path / "ab", "ablation", "--texts", two_texts_each)
    s = data["summary"]["models"]["smollm2-135m"]
    assert list(s["variants"]) == ["per-channel/linear", "per-tensor/all-weights (notebook)"]
    ppl = table[table["metric"] == "ppl"]
    assert len(ppl) == 2 * 8 * 16
    med = {scheme: np.median(g[g["config"] == "all_quantized"]["value"].to_numpy()
                             / g[g["config"] == "baseline"]["value"].to_numpy())
           for scheme, g in ppl.groupby("scheme")}
    assert med["per-tensor"] > 1e3 and 1.0 < med["per-channel"] < 100  # the notebook's scheme breaks the model
    text = (tmp_path / "ab" / "result.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    # the report names the checkpoint and its grid as the packaged file does, and says the weights were 4-bit already
    checkpoint, quant, _ = Path(_smollm2_gguf(None)).name.rsplit(".", 2)
    entry = data["manifest"]["models"][0]
    assert (entry["exact"], entry["prequantized"]) == (f"{checkpoint}, {quant} GGUF dequantized to float32", quant)
    report = (tmp_path / "ab" / "report.md").read_text()
    quant_md = quant.replace("_", "\\_")
    assert f"Model: smollm2-135m = {checkpoint}, {quant_md} GGUF dequantized to float32 (weights SHA-256 " \
           f"{entry['weights_hash'][:16]})." in report
    assert f"already lie on a {quant_md} grid" in report and "rounds a quantized model a second time" in report


def test_ablation_seed_mode_equals_the_notebooks_reload_loop(tmp_path, two_texts_each):
    data, table = run(tmp_path / "ab", "ablation", "--texts", two_texts_each, "--compat", "notebooks")
    lm = load_model("smollm2-135m")
    configs = {k: v for k, v in standard_configs(30).items()
               if k in ("baseline", "gateway_protected", "first_half_protected")}
    texts = load_languages(two_texts_each).texts()
    reference = notebook.ablation_perplexities(lm.info.source, lm.tokenizer, [t for _, _, t in texts], configs)
    ppl = table[table["metric"] == "ppl"].set_index(["config", "lang", "sample"])["value"]
    for (name, k), expected in reference.items():
        lang, sample, _ = texts[k]
        assert ppl[(name, lang, sample)] == pytest.approx(expected, rel=1e-3), (name, lang, sample)


def test_ablation_on_gemma3_multilingual(tmp_path, two_texts_each):
    data, table = run(tmp_path / "ab", "ablation", "--model", "gemma3-270m", "--texts", two_texts_each,
                      "--compat", "notebooks")
    s = data["summary"]["models"]["gemma3-270m"]
    assert s["n_layers"] == 18
    ppl = table[table["metric"] == "ppl"]
    assert len(ppl) == 8 * 16 and set(ppl["lang"]) == {lang.code for lang in load_languages().languages}
    assert np.isfinite(ppl["value"]).all() and (ppl["value"] > 1).all()
    by = {c["config"]: c for c in s["variants"]["per-tensor/all-weights"]["per_config"]}
    assert by["all_quantized"]["d_hr"] > 0 and by["baseline"]["disparity_ratio"] is None


def _group128(w):
    """Naive symmetric 4-bit round-to-nearest with one scale per 128 inputs of each output row."""
    out = torch.empty_like(w)
    for r in range(w.shape[0]):
        for c in range(0, w.shape[1], 128):
            g = w[r, c:c + 128]
            s = g.abs().max() / 7
            out[r, c:c + 128] = g if s == 0 else torch.clamp(torch.round(g / s), -8, 7) * s
    return out


def test_ablation_sweep_with_the_group128_recipe_on_smollm2(tmp_path, two_texts_each):
    data, table = run(tmp_path / "ab", "ablation", "--texts", two_texts_each, "--sweep", "--recipe", "group128")
    s = data["summary"]["models"]["smollm2-135m"]
    assert data["summary"]["recipe"] == "group128"
    assert list(s["variants"]) == ["group:128/linear", "per-tensor/all-weights (notebook)"]
    assert s["prefix_reuse"]["on"] and s["prefix_reuse"]["layers_run"] < s["prefix_reuse"]["layers_whole"]
    per_layer = table[table["metric"].isin(["sqnr_db", "weight_rel_err"]) & table["lang"].isna()]
    err = per_layer.pivot_table(index="layer", columns=["recipe", "metric"], values="value")
    assert len(err) == 30 and np.isfinite(err.to_numpy()).all()
    assert (err[("group128", "weight_rel_err")] < err[("notebook", "weight_rel_err")]).all()
    assert (err[("group128", "sqnr_db")] > 0).all()
    # Layer 5's SQNR against a text-by-text computation on a fresh copy with only layer 5 quantized by hand.
    lm = load_model("smollm2-135m")
    reference = copy.deepcopy(lm.model)
    with torch.no_grad():
        for name, p in reference.model.layers[5].named_parameters():
            if name.endswith("proj.weight"):
                p.copy_(_group128(p))
    signal = noise = 0.0
    with torch.no_grad():
        for _, _, text in load_languages(two_texts_each).texts():
            ids = lm.tokenizer(text, return_tensors="pt")
            y = lm.model(**ids, output_hidden_states=True).hidden_states[6].double()
            y_q = reference(**ids, output_hidden_states=True).hidden_states[6].double()
            signal += float((y**2).sum())
            noise += float(((y - y_q) ** 2).sum())
    assert err.loc[5, ("group128", "sqnr_db")] == pytest.approx(10 * np.log10(signal / noise), abs=0.02)
    report = (tmp_path / "ab" / "report.md").read_text()
    assert "Recipe: **group128**" in report and "Each quantized layer's own error" in report
    assert "Spearman rho of SQNR" in report and (tmp_path / "ab" / "ablation_layer_error.png").exists()
