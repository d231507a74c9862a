"""The atlas on the real SmolLM2-135M and Gemma 3 270M: the logit lens at the last layer is the model's own NLL
(computed here from the logits, text by text), and `layerscope run atlas` end to end on both models."""

import json

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from layerscope import load_model, load_pairs
from layerscope.cli import app
from layerscope.engine.atlas.stream import atlas_pass

pytestmark = pytest.mark.integration
runner = CliRunner()
ZOO = ("smollm2-135m", "gemma3-270m")
MAX_TOKENS = 200
"""Enough texts (13 or 14 of the bundled ones) for CKA and TwoNN, few enough tokens for Gemma's 262k-word lens on
every one of its 19 layers on a 2-core CPU."""


def short_texts(n=20):
    texts = load_pairs().texts()
    return texts[:: len(texts) // n][:n]


@pytest.fixture(scope="module")
def models(smollm2):
    return {"smollm2-135m": smollm2, "gemma3-270m": load_model("gemma3-270m")}


@torch.no_grad()
def mean_nll(lm, texts) -> tuple[float, int]:
    """Token-weighted mean NLL of each text's next tokens under the model's own logits (one unbatched forward pass
    per text, a BOS included where the tokenizer adds one), and the number of tokens scored."""
    total, scored = 0.0, 0
    for text in texts:
        ids = torch.tensor(lm.tokenizer(text)["input_ids"])
        logits = lm.model(input_ids=ids[None]).logits[0].double()
        total += float(F.cross_entropy(logits[:-1], ids[1:], reduction="sum"))
        scored += len(ids) - 1
    return total / scored, scored


@pytest.mark.parametrize("name", ZOO)
def test_the_lens_at_the_last_layer_is_the_models_own_nll(models, name):
    lm = models[name]
    texts = short_texts()
    n = lm.info.n_layers
    measured = atlas_pass(lm, texts, layers=[0, n // 2, n], progress=False)
    nll, scored = mean_nll(lm, texts)
    assert measured.layers == [0, n // 2, n] and measured.n_scored == scored and measured.n_texts == len(texts)
    assert abs(measured.lens["lens_ce"][-1] - nll) < 1e-4
    assert measured.lens["lens_kl"][-1] == pytest.approx(0.0, abs=1e-6)  # the last layer against itself
    assert measured.lens["lens_top1_agree"][-1] == pytest.approx(1.0)
    assert measured.lens["lens_ce"][0] > nll  # the embeddings predict worse than the model


def test_run_atlas_end_to_end_on_both_models(tmp_path):
    # both models in one run: a one-model run fails on its figures (tests/studies/test_atlas.py,
    # test_a_one_model_run_writes_its_figures)
    out = tmp_path / "atlas"
    result = runner.invoke(app, ["run", "atlas", "--model", ZOO[0], "--model", ZOO[1], "--max-tokens",
                                 str(MAX_TOKENS), "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "result.json").read_text())
    table = pd.read_csv(out / "table.csv")
    names = {p.name for p in out.iterdir()}
    assert {"result.json", "table.csv", "report.md", "atlas_profiles.png", "index.html"} <= names
    assert len(list(out.glob("massive_map_*.png"))) == 2 and len(list(out.glob("cka_*.png"))) == 3
    timings = data["manifest"]["timings"]
    assert {"pass_s", "analysis_s"} <= timings.keys() and timings["after_extraction_s"] < 30
    n_layers = {"smollm2-135m": 30, "gemma3-270m": 18}
    for name, n in n_layers.items():
        s = data["summary"]["models"][name]
        assert s["n_layers"] == n and s["layers"] == list(range(n + 1))
        assert s["n_texts"] >= 10 and s["n_tokens"] <= MAX_TOKENS
        b = s["boundaries"]
        assert b["consensus"] is not None and len(b["per_metric"]) >= 8
        assert set(b["per_family"]) == {"lens", "similarity", "spectrum"} and b["n_resamples"] == 200
        rows = table[(table["model"] == name) & (table["metric"] == "boundary")]
        default = rows[(rows["variant"] == "default") & (rows["family"] == "consensus")].sort_values("boundary")
        assert default["value"].astype(int).tolist() == b["consensus"]
        assert ((default["ci_lo"] <= default["value"]) & (default["value"] <= default["ci_hi"])).all()
        # Gemma 3 flags every token as massive at some block output (100x the median), so nothing is left to fit
        # without them: that check is reported as not run, not as a boundary
        left = s["massive_tokens"] < s["n_tokens"]
        assert set(rows["variant"]) == {"default", "no_layer0", "min_segment_3"} | ({"excl_massive"} if left else set())
        assert (b["variants"]["excl_massive"]["consensus"] is None) == (not left)
        debiased = table[(table["model"] == name) & (table["metric"] == "cka_debiased") & table["model_b"].isna()]
        assert len(debiased) == (n + 1) ** 2
        lens = table[(table["model"] == name) & (table["metric"] == "lens_kl")]
        assert sorted(lens["layer"]) == list(range(n + 1))
        assert lens[lens["layer"] == n]["value"].abs().max() < 1e-6
    cross = table[(table["metric"] == "cka") & table["model_b"].notna()]
    assert len(cross) == 31 * 19 and cross["value"].between(-1e-9, 1 + 1e-9).all()
    assert len(table[(table["metric"] == "cka_debiased") & table["model_b"].notna()]) == 31 * 19
    report = (out / "report.md").read_text()
    assert "debiased CKA" in report and "100x the median" in report and "**Sensitivity.**" in report
    assert "Could not be checked: excl_massive (no token left in the set" in report
