"""--compat seed against the notebooks' procedures, re-implemented here as plain per-text loops
on the real SmolLM2 (one text at a time, hidden_states[l][0, 1:].mean(0), outputs.loss,
np.random.seed(42) and one np.random.choice per bootstrap resample)."""

import json

import numpy as np
import pytest
import torch
from scipy import stats

import notebook_reference as notebook
from layerscope import load_pairs
from layerscope.run import run_study
from layerscope.study import StudyConfig

pytestmark = pytest.mark.integration
LAYERS = [0, 4, 8, 12, 16, 20, 24, 28, 30]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Six categories of eight pairs from the bundled dataset, in the notebooks' JSON format."""
    pairs = load_pairs()
    data = {c.name: {"pairs": [list(p) for p in c.pairs[:8]]} for c in pairs.categories[:6]}
    path = tmp_path_factory.mktemp("seed") / "dataset.json"
    path.write_text(json.dumps(data))
    return path, data


@pytest.fixture(scope="module")
@torch.no_grad()
def reference(smollm2, dataset):
    """What the notebooks compute, text by text."""
    _, data = dataset
    model, tok = smollm2.model, smollm2.tokenizer
    rows = []
    for category, body in data.items():
        for a, b in body["pairs"]:
            per_text = []
            for text in (a, b):
                inputs = tok(text, return_tensors="pt")
                out = model(**inputs, labels=inputs["input_ids"], output_hidden_states=True)
                hs = out.hidden_states
                per_text.append({
                    "layers": {layer: hs[layer][0, 1:, :].mean(dim=0).numpy().astype(np.float32) for layer in LAYERS},
                    "last": hs[-1][0, inputs["attention_mask"][0].sum() - 1, :].numpy().astype(np.float32),
                    "first": hs[-1][0, 0, :].numpy().astype(np.float32),
                    "loss": out.loss.item(),
                })
            rows.append({"cat": category, "a": per_text[0], "b": per_text[1],
                         "pref": per_text[1]["loss"] - per_text[0]["loss"]})
    return rows


def category_r(rows, get):
    cats = list(dict.fromkeys(r["cat"] for r in rows))
    uas = [notebook.uniformity(np.array([get(r["a"]) for r in rows if r["cat"] == c]))
           - notebook.uniformity(np.array([get(r["b"]) for r in rows if r["cat"] == c])) for c in cats]
    prefs = [np.mean([r["pref"] for r in rows if r["cat"] == c]) for c in cats]
    return stats.pearsonr(uas, prefs)[0]


def test_divergence_and_scaling_match_the_notebooks(dataset, reference):
    path, _ = dataset
    div = run_study(StudyConfig(study="divergence", models=("smollm2-135m",), dataset=str(path), compat="notebooks"))
    table = div.table[div.table["metric"] == "r_ua_pref"]
    mean = table[table["pooling"] == "mean"].set_index("layer")["value"]
    assert list(mean.index) == LAYERS
    expected = {layer: category_r(reference, lambda t, layer=layer: t["layers"][layer]) for layer in LAYERS}
    for layer in LAYERS:
        assert mean[layer] == pytest.approx(expected[layer], abs=1e-4)
    comparison = {c["pooling"]: c["r"] for c in div.summary["models"]["smollm2-135m"]["pooling_comparison"]}
    assert comparison["mean"] == pytest.approx(expected[30], abs=1e-4)
    assert comparison["last"] == pytest.approx(category_r(reference, lambda t: t["last"]), abs=1e-4)
    assert comparison["first"] == pytest.approx(category_r(reference, lambda t: t["first"]), abs=1e-4)

    scaling = run_study(StudyConfig(study="scaling", models=("smollm2-135m",), dataset=str(path), compat="notebooks"))
    s = scaling.summary["models"]["smollm2-135m"]
    peak = max(LAYERS, key=lambda layer: expected[layer])
    assert s["max_pos_layer"] == peak and s["max_pos_r"] == pytest.approx(expected[peak], abs=1e-4)
    assert s["final_r"] == pytest.approx(expected[30], abs=1e-4)


def test_phases_match_the_notebook_including_bootstrap_cis(dataset, reference):
    path, _ = dataset
    result = run_study(StudyConfig(study="phases", models=("smollm2-135m",), dataset=str(path), compat="notebooks"))
    table = result.table[result.table["metric"] == "r_centroid_pref"].set_index("layer")
    prefs = np.array([r["pref"] for r in reference])
    np.random.seed(42)
    for layer in LAYERS:
        ea = np.array([r["a"]["layers"][layer] for r in reference])
        eb = np.array([r["b"]["layers"][layer] for r in reference])
        metric = notebook.centroid_asymmetry(ea, eb)
        r_obs = stats.pearsonr(metric, prefs)[0]
        lo, hi = notebook.bootstrap_ci(metric, prefs, 10_000)
        row = table.loc[layer]
        assert row["value"] == pytest.approx(r_obs, abs=1e-4)
        assert row["ci_lo"] == pytest.approx(lo, abs=0.02) and row["ci_hi"] == pytest.approx(hi, abs=0.02)
