"""Texts that do not fit the model, and NaN or inf numbers, stop every forward path with one clear error."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import tiny
from layerscope.engine import extract
from layerscope.engine.forward.tokens import token_states
from layerscope.engine.interventions.scoring import score_texts
from layerscope.errors import ExtractionError
from layerscope.models import LoadedModel

LONG = "The committee will review every application before the end of March, said the chair of the board."


def short_gpt2(n_positions=16) -> LoadedModel:
    tok = tiny.tokenizer(False)
    config = tiny.config("gpt2", len(tok))
    config.n_positions = n_positions
    torch.manual_seed(0)
    return LoadedModel.wrap(AutoModelForCausalLM.from_config(config).eval(), tok, name="short-gpt2")


def nan_llama(layer=1) -> LoadedModel:
    """A tiny Llama with one NaN weight in decoder block ``layer``: hidden state ``layer + 1`` on is NaN."""
    lm = tiny.tiny_lm("llama", adds_bos=False)
    with torch.no_grad():
        lm.model.model.layers[layer].mlp.down_proj.weight[0, 0] = float("nan")
    return lm


def forwards(lm) -> list:
    """Counts the model's forward passes from now on."""
    calls = []
    lm.model.register_forward_pre_hook(lambda *_: calls.append(1))
    return calls


PATHS = {
    "extract": lambda lm, texts, **kw: extract(lm, texts, cache=False, **kw),
    "token_states": lambda lm, texts, **kw: token_states(lm, texts, **kw),
    "score_texts": lambda lm, texts, **kw: score_texts(lm, texts, **kw),
}


@pytest.mark.parametrize("path", PATHS)
def test_a_text_longer_than_the_model_is_named_before_any_forward_pass(path):
    lm = short_gpt2()
    texts = ["The cat sat.", LONG, "Ice floats on water."]
    n = len(lm.tokenizer(LONG)["input_ids"])
    assert n > 16 and len(lm.tokenizer(texts[0])["input_ids"]) <= 16
    calls = forwards(lm)
    with pytest.raises(ExtractionError) as info:
        PATHS[path](lm, texts)
    message = str(info.value)
    assert message.startswith('text 1 ("The committee will review every application ...") has '
                              f"{n} tokens, more than the 16 positions of model short-gpt2")
    assert "--max-length 16" in message and calls == []


@pytest.mark.parametrize("path", PATHS)
def test_max_length_above_the_limit_says_to_lower_it(path):
    with pytest.raises(ExtractionError, match="--max-length 40 is above that limit: lower it to 16"):
        PATHS[path](short_gpt2(), ["The cat sat.", LONG], max_length=40)


@torch.no_grad()
def test_max_length_truncates_explicitly_and_is_recorded():
    lm = short_gpt2()
    texts = [LONG, "The cat sat on the mat."]
    acts = extract(lm, texts, max_length=16, cache=False)
    ids = [lm.tokenizer(t)["input_ids"][:16] for t in texts]
    assert acts.n_tokens.tolist() == [len(x) for x in ids] and acts.settings.max_length == 16
    for i, x in enumerate(ids):  # reference: HF's own loss on the truncated ids, one text at a time
        enc = torch.tensor([x])
        loss = lm.model(input_ids=enc, labels=enc).loss.item()
        assert acts.nll_mean[i] == pytest.approx(loss, rel=1e-5)
    nll_sum, n_scored = score_texts(lm, texts, max_length=16)
    np.testing.assert_allclose(nll_sum, acts.nll_sum, rtol=1e-6)
    assert token_states(lm, texts, max_length=16).layers.shape[1] == sum(len(x) for x in ids)


@pytest.mark.parametrize("path", ["extract", "score_texts"])
def test_a_single_token_text_has_no_nll_and_is_refused_before_any_forward_pass(path):
    lm = tiny.tiny_lm("llama", adds_bos=False)
    assert len(lm.tokenizer("7")["input_ids"]) == 1
    calls = forwards(lm)
    with pytest.raises(ExtractionError) as info:
        PATHS[path](lm, ["The cat sat.", "Prices rose.", "7"])
    assert str(info.value).startswith('text 2 ("7") has only 1 token for model tiny-llama-nobos')
    assert "no next token to score" in str(info.value) and calls == []


def test_token_states_take_a_single_token_text():
    states = token_states(tiny.tiny_lm("llama", adds_bos=False), ["The cat sat.", "7"])
    assert states.text_index.tolist().count(1) == 1


@torch.no_grad()
def reference_first_nan_layer(lm, text) -> int:
    hs = lm.model(**lm.tokenizer(text, return_tensors="pt"), output_hidden_states=True).hidden_states
    return next(i for i, h in enumerate(hs) if not torch.isfinite(h).all())


@pytest.mark.parametrize("path", PATHS)
def test_a_nan_weight_is_an_error_naming_model_layer_and_text(path):
    lm = nan_llama(layer=1)
    texts = ["The cat sat on the mat.", "Prices rose by four percent."]
    assert reference_first_nan_layer(lm, texts[0]) == 2
    with pytest.raises(ExtractionError) as info:
        PATHS[path](lm, texts)  # one batch: the first text of the caller's list is named
    message = str(info.value)
    assert message.startswith("model tiny-llama-nobos computed a NaN or inf hidden state at layer 2 of 0..3 "
                              '(0 = embeddings) for text 0 ("The cat sat on the mat.")')
    assert "check the weights" in message


def test_an_inf_nll_with_finite_hidden_states_is_named():
    lm = tiny.tiny_lm("llama", adds_bos=False)
    with torch.no_grad():
        lm.model.lm_head.weight[5] = float("inf")
    for path in ("extract", "score_texts"):
        with pytest.raises(ExtractionError, match=r"computed a NaN or inf NLL \(every hidden state finite"):
            PATHS[path](lm, ["The cat sat on the mat.", "Prices rose."])


def poison_store(folder, how: str) -> None:
    """Put NaN in every stored pooled vector of the cache entry ``folder``: in the file's bytes alone, or
    written through the store, journal line and all (as if NaN had been computed and stored)."""
    import json

    from layerscope.engine.cache.store import LayerStore, Layout

    keys = [p.stem for p in folder.glob("pooled_*.npy")]
    assert keys
    if how == "bytes":
        for key in keys:
            stored = np.load(folder / f"{key}.npy", mmap_mode="r+")
            stored[...] = np.nan
            stored.flush()
            del stored
        return
    layout = json.loads((folder / "meta.json").read_text())["layout"]
    layout = Layout(**{**layout, "layers": tuple(layout["layers"]), "poolings": tuple(layout["poolings"])})
    arrays = {key: np.load(folder / f"{key}.npy") for key in layout.shapes()}  # rows in store order
    arrays.update({key: np.full_like(arrays[key], np.nan) for key in keys})
    LayerStore(folder, layout, np.load(folder / "order.npy")).write(0, arrays)


@pytest.mark.parametrize("how", ["bytes", "journalled"])
def test_a_nan_batch_in_the_cache_is_not_reused(tmp_path, how):
    lm = tiny.tiny_lm("llama", adds_bos=False)
    texts = ["The cat sat on the mat.", "Prices rose by four percent."]
    clean = extract(lm, texts, cache=tmp_path)
    (folder,) = [p for p in tmp_path.glob("*/*") if p.is_dir()]
    poison_store(folder, how)
    assert np.isnan(np.load(folder / "pooled_mean.npy")).all()
    acts = extract(lm, texts, cache=tmp_path)  # the entry opens without reading a vector
    calls = []
    handle = lm.model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        pooled = np.asarray(acts.pooled["mean"])  # the first read finds the NaN rows and computes them again
    finally:
        handle.remove()
    assert len(calls) == 1 and np.isfinite(pooled).all()
    np.testing.assert_array_equal(pooled, np.asarray(clean.pooled["mean"]))


@torch.no_grad()
def test_a_vector_too_large_for_a_float16_store_is_an_error():
    lm = tiny.tiny_lm("llama", adds_bos=False)
    lm.model.model.embed_tokens.weight.mul_(1e6)
    texts = ["The cat sat on the mat.", "Prices rose by four percent."]
    embeddings = lm.model(**lm.tokenizer(texts[0], return_tensors="pt"), output_hidden_states=True).hidden_states[0]
    assert embeddings.mean(dim=1).abs().max() > np.finfo(np.float16).max  # mean-pooled state 0 overflows float16
    with pytest.raises(ExtractionError, match="float16"):
        extract(lm, texts, store_dtype="float16", cache=False)


def test_max_length_is_recorded_in_every_study_manifest(tmp_path):
    """--max-length truncates a prompt the 16-position model could not take; ablation's seed compat keeps its
    256 unless --max-length is given."""
    import json

    from typer.testing import CliRunner

    from layerscope.cli import app

    tok = tiny.tokenizer(False)
    config = tiny.config("gpt2", len(tok))
    config.n_positions = 16
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "short")
    tok.save_pretrained(tmp_path / "short")
    (tmp_path / "p.txt").write_text(f"Short prompt one.\nAnother prompt.\n{LONG}\n")
    (tmp_path / "t.json").write_text(json.dumps({
        "en": {"resource": "high", "texts": ["The cat sat on the mat.", "Prices rose."]},
        "xx": {"resource": "low", "texts": ["Ice floats on water.", "Bread dough rises."]}}))

    def manifest(*args):
        out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
        result = CliRunner().invoke(app, ["run", *args, "--out", str(out)])
        assert result.exit_code == 0, result.output
        return json.loads((out / "result.json").read_text())["manifest"]

    short = str(tmp_path / "short")
    m = manifest("anisotropy", "--model", short, "--prompts", str(tmp_path / "p.txt"), "--max-length", "16")
    assert m["max_length"] == 16 and m["models"][0]["max_positions"] == 16
    llama = str(tiny.save(tmp_path / "llama", "llama", adds_bos=False))
    texts = str(tmp_path / "t.json")
    assert manifest("ablation", "--model", llama, "--texts", texts, "--compat", "notebooks")["max_length"] == 256
    assert manifest("ablation", "--model", llama, "--texts", texts, "--compat", "notebooks",
                    "--max-length", "5")["max_length"] == 5
    assert manifest("ablation", "--model", llama, "--texts", texts)["max_length"] is None
