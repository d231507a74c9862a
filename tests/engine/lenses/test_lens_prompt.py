"""The lens of one prompt against references computed here: the model's own logits at the last layer, and at the
other layers transformers' hidden states through the final norm module (found by its known path), the head weight
multiplied out in float64 and Gemma's soft-capping written from the config."""

import numpy as np
import pandas as pd
import pytest
import torch

import tiny
from layerscope import ExtractionError
from layerscope.engine.lenses.prompt import COLUMNS, LensTable, display_width, lens, show_token

FINAL_NORM = {"llama": "model.norm", "gpt2": "transformer.ln_f", "gemma3": "model.norm"}
TEXT = "The cat sat on the mat."
TOP_K = 4
SOFTCAP = 1.5
"""Gemma's final soft-capping, set on the tiny gemma3 so that it bites (its logits reach several units)."""


@pytest.fixture(scope="module", params=["llama", "gpt2", "gemma3"])
def case(request):
    """(arch, lm, token ids, transformers' output with hidden states, the lens table)."""
    arch = request.param
    lm = tiny.tiny_lm(arch, adds_bos=arch == "gpt2")
    if arch == "gemma3":
        lm.model.config.final_logit_softcapping = SOFTCAP
    ids = lm.tokenizer(TEXT)["input_ids"]
    with torch.no_grad():
        out = lm.model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    return arch, lm, ids, out, lens(lm, TEXT, top_k=TOP_K)


def reference_top(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(T, k) token ids and probabilities of the k largest of (T, vocab) ``probs``, by a stable numpy sort."""
    order = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    return order, np.take_along_axis(probs, order, axis=-1)


def softmax64(logits: torch.Tensor) -> np.ndarray:
    z = logits.double().numpy()
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_rows(table: pd.DataFrame, layer: int) -> pd.DataFrame:
    return table[table["layer"] == layer].sort_values(["position", "rank"])


def test_last_layer_is_the_models_own_output(case):
    _, lm, ids, out, table = case
    rows = layer_rows(table, lm.info.n_layers)
    probs = softmax64(out.logits[0])
    want_ids, want_p = reference_top(probs, TOP_K)
    got_ids = rows["token_id"].to_numpy().reshape(len(ids), TOP_K)
    assert (got_ids[:, 0] == out.logits[0].argmax(dim=-1).numpy()).all()  # the model's argmax, every position
    assert (got_ids == want_ids).all()
    np.testing.assert_allclose(rows["prob"].to_numpy().reshape(len(ids), TOP_K), want_p, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_other_layers_are_the_hidden_state_through_norm_and_head(case, layer):
    arch, lm, ids, out, table = case
    norm = lm.model.get_submodule(FINAL_NORM[arch])
    head = lm.model.lm_head
    with torch.no_grad():
        logits = norm(out.hidden_states[layer][0]).double() @ head.weight.double().T
        if head.bias is not None:
            logits = logits + head.bias.double()
    if arch == "gemma3":
        logits = torch.tanh(logits / SOFTCAP) * SOFTCAP
    want_ids, want_p = reference_top(softmax64(logits), TOP_K)
    rows = layer_rows(table, layer)
    assert (rows["token_id"].to_numpy().reshape(len(ids), TOP_K) == want_ids).all()
    np.testing.assert_allclose(rows["prob"].to_numpy().reshape(len(ids), TOP_K), want_p, rtol=1e-4, atol=1e-6)


def test_columns_ranges_and_probabilities(case):
    _, lm, ids, _, table = case
    n_layers, t = lm.info.n_layers, len(ids)
    assert isinstance(table, LensTable) and list(table.columns) == COLUMNS
    assert len(table) == (n_layers + 1) * t * TOP_K
    assert sorted(table["layer"].unique()) == list(range(n_layers + 1))
    assert sorted(table["position"].unique()) == list(range(t))
    assert sorted(table["rank"].unique()) == list(range(1, TOP_K + 1))
    probs = table.sort_values(["layer", "position", "rank"])["prob"].to_numpy().reshape(-1, TOP_K)
    assert (np.diff(probs, axis=1) <= 0).all()  # most likely first
    assert (probs.sum(axis=1) <= 1 + 1e-6).all() and (probs > 0).all()
    inputs = table[(table["layer"] == 0) & (table["rank"] == 1)].sort_values("position")["input_token"]
    decoded = lm.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert "".join(t for t, i in zip(inputs, ids, strict=True) if i != lm.tokenizer.bos_token_id) == decoded


def test_top1_grid_and_text(case):
    _, lm, ids, out, table = case
    grid = table.top1()
    assert grid.shape == (lm.info.n_layers + 1, len(ids)) and list(grid.index) == list(range(lm.info.n_layers + 1))
    argmax = out.logits[0].argmax(dim=-1).tolist()
    want = [lm.tokenizer.decode([i], clean_up_tokenization_spaces=False) for i in argmax]
    assert grid.loc[lm.info.n_layers].tolist() == want
    lines = table.grid().splitlines()
    assert len(lines) == lm.info.n_layers + 2
    assert lines[0].split()[0] == "layer" and [line.split()[0] for line in lines[1:]] == \
        [str(layer) for layer in range(lm.info.n_layers + 1)]
    assert len(lines[-1].split()) <= len(ids) + 1


def test_several_prompts_are_indexed_by_text():
    lm = tiny.tiny_lm("gpt2", adds_bos=True)
    texts = [tiny.TEXTS[0], tiny.TEXTS[7]]
    table = lens(lm, texts, top_k=2, progress=False)
    assert table.index.name == "text" and table.texts() == texts
    for text in texts:
        ids = lm.tokenizer(text)["input_ids"]
        with torch.no_grad():
            want = lm.model(input_ids=torch.tensor([ids])).logits[0].argmax(dim=-1).tolist()
        assert table.top1(text, "token_id").loc[lm.info.n_layers].tolist() == want
    assert lens(lm, [texts[0]], top_k=1, progress=False).texts() == [texts[0]]  # a list of one keeps its text
    with pytest.raises(ExtractionError, match="name one"):
        table.top1()


def test_a_repeated_prompt_is_read_twice_keyed_by_its_position():
    lm = tiny.tiny_lm("llama")
    texts = [tiny.TEXTS[0], tiny.TEXTS[3], tiny.TEXTS[0]]
    table = lens(lm, texts, top_k=2, progress=False)
    assert list(table.columns) == ["prompt_index", *COLUMNS]
    assert table.texts() == texts and table.prompt_indices() == [0, 1, 2]
    for i, text in enumerate(texts):
        ids = lm.tokenizer(text)["input_ids"]
        rows = table[table["prompt_index"] == i]
        assert set(rows.index) == {text}
        assert len(rows) == (lm.info.n_layers + 1) * len(ids) * 2  # layers x positions x top_k
        with torch.no_grad():
            want = lm.model(input_ids=torch.tensor([ids])).logits[0].argmax(dim=-1).tolist()
        assert table.top1(i, "token_id").loc[lm.info.n_layers].tolist() == want
        assert table.input_tokens(i) == [lm.tokenizer.decode([t], clean_up_tokenization_spaces=False) for t in ids]
    pd.testing.assert_frame_equal(table.top1(0, "prob"), table.top1(2, "prob"))
    assert table.grid(tiny.TEXTS[3]) == table.grid(1)  # an unrepeated prompt can still be named by its text
    with pytest.raises(ExtractionError, match=r"in this table 2 times, at prompt_index 0, 2; .*top1\(0\)"):
        table.top1(tiny.TEXTS[0])
    with pytest.raises(ExtractionError, match=r"no prompt has prompt_index 3; .*prompt_index 0\.\.2"):
        table.top1(3)
    assert "0: " + tiny.TEXTS[0] in table._repr_html_() and "2: " + tiny.TEXTS[0] in table._repr_html_()


@pytest.mark.parametrize("text, top_k, match", [
    ("   ", 5, "empty"), ([], 5, "needs a prompt"), ([3], 5, "not a string"),
    ("The cat", 0, "at least 1"), ("The cat", True, "at least 1"), ("The cat", 10**6, "vocabulary"),
])
def test_bad_input_is_one_clear_error(text, top_k, match):
    with pytest.raises(ExtractionError, match=match):
        lens(tiny.tiny_lm("llama"), text, top_k=top_k)


def test_show_token_escapes_whitespace_and_cuts():
    assert show_token(" Paris\n") == "·Paris\\n"
    assert show_token("a\tb\r\x00\u200b", None) == "a\\tb\\r\\x00\\u200b"
    assert show_token("") == "''"
    assert show_token("abcdefghijklmnop", 6) == "abcde…"
    assert display_width("日本a") == 5


def test_html_escapes_every_token():
    table = LensTable({"layer": [0, 1], "position": [0, 0], "input_token": ["<b>x"] * 2, "rank": [1, 1],
                       "token": ["<script>", "&amp"], "token_id": [3, 4], "prob": [0.5, 0.25]})
    page = table._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;x" in page and "&amp;amp" in page
    assert page.count("<tr>") == 3  # the header and one row per layer


def test_one_prompt_waits_on_its_device_once_whatever_the_layers(syncs):
    """lens_top copies every layer's top-k and finiteness flag to the host in one go (it did once per layer): the
    syncs it adds to a bare forward of the prompt do not grow with the layers (counted as tests/syncs.py says)."""
    from layerscope.engine.lenses.prompt import lens_top

    added = []
    for n_layers in (2, 5):
        lm = tiny.tiny_lm("llama", adds_bos=True, n_layers=n_layers)
        ids = lm.tokenizer(TEXT)["input_ids"]
        lens_top(lm, ids, TOP_K)  # a model's first pass takes paths the later ones do not
        with torch.no_grad():
            bare = syncs.run(lambda lm=lm, ids=ids: lm.model(input_ids=torch.tensor([ids]), output_hidden_states=True,
                                                             use_cache=False))
            added.append(syncs.run(lambda lm=lm, ids=ids: lens_top(lm, ids, TOP_K)) - bare)
    assert added[0] == added[1] <= 2, (added, syncs.calls)


@pytest.mark.parametrize("block", [0, 2])
def test_a_nan_weight_is_named_at_the_first_layer_it_reaches(block):
    """A NaN planted in decoder block ``block``'s MLP reaches hidden state ``block + 1`` first: the lens names it."""
    lm = tiny.tiny_lm("llama", adds_bos=True, n_layers=4)
    lens(lm, TEXT, top_k=TOP_K)  # the final norm is found (by a probe pass) while the weights are finite
    with torch.no_grad():
        lm.model.model.layers[block].mlp.down_proj.weight[:, 0] = float("nan")
    named = rf"NaN or inf hidden state at layer {block + 1} of 0\.\.4 .*\(\"{TEXT}\"\)"
    with pytest.raises(ExtractionError, match=named):
        lens(lm, TEXT, top_k=TOP_K)
