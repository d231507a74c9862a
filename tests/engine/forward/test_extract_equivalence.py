"""extract() against naive per-text loops written the way the notebooks write them."""

import numpy as np
import pytest
import torch

import tiny
from layerscope import extract

CASES = [(arch, bos) for arch in tiny.ARCHS for bos in (False, True)]
IDS = [f"{a}-{'bos' if b else 'nobos'}" for a, b in CASES]


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest per-vector relative error ||got - ref|| / ||ref|| over all leading axes."""
    got, ref = np.asarray(got), np.asarray(ref)
    diff = np.linalg.norm(got - ref, axis=-1)
    return float(np.max(diff / np.linalg.norm(ref, axis=-1)))


@torch.no_grad()
def naive(lm, text: str, drop_first: bool):
    """One text alone, no padding: hidden states pooled by hand, loss from transformers."""
    enc = lm.tokenizer(text, return_tensors="pt")
    out = lm.model(**enc, labels=enc["input_ids"], output_hidden_states=True)
    hs = [h[0] for h in out.hidden_states]
    start = 1 if drop_first else 0
    return {
        "mean": np.stack([h[start:].mean(dim=0).numpy() for h in hs]),
        "last": np.stack([h[-1].numpy() for h in hs]),
        "first": np.stack([h[0].numpy() for h in hs]),
        "loss": out.loss.item(),
        "ids": enc["input_ids"][0].tolist(),
    }


@pytest.fixture(params=CASES, ids=IDS)
def lm(request):
    arch, bos = request.param
    return tiny.tiny_lm(arch, adds_bos=bos)


def test_tokenizer_fixture_covers_both_bos_behaviours():
    assert tiny.tokenizer(True)("The cat")["input_ids"][0] == tiny.tokenizer(True).bos_token_id
    assert tiny.tokenizer(False)("The cat")["input_ids"][0] != tiny.tokenizer(False).bos_token_id


def test_default_matches_naive_loop_and_drops_bos_by_id(lm):
    acts = extract(lm, tiny.TEXTS, batch_size=4, cache=False)
    n_layers = lm.info.n_layers
    for i, text in enumerate(tiny.TEXTS):
        bos_first = tiny.tokenizer(lm.info.adds_bos)(text)["input_ids"][0] == lm.tokenizer.bos_token_id
        ref = naive(lm, text, drop_first=bos_first)
        assert bos_first == lm.info.adds_bos
        for p in ("mean", "last", "first"):
            assert acts.pooled[p].shape == (len(tiny.TEXTS), n_layers + 1, 32)
            assert acts.pooled[p].dtype == np.float32
            assert rel_err(acts.pooled[p][i], ref[p]) < 1e-4, (p, text)
        assert acts.nll_mean[i] == pytest.approx(ref["loss"], rel=1e-5)
        assert acts.n_scored[i] == len(ref["ids"]) - 1
        assert acts.n_tokens[i] == len(ref["ids"])
        assert acts.nll_sum[i] == pytest.approx(ref["loss"] * (len(ref["ids"]) - 1), rel=1e-5)


def test_seed_compat_matches_notebook_loop(lm):
    """The notebooks: hidden_states[l][0, 1:, :].mean(dim=0), whatever token 0 is."""
    acts = extract(lm, tiny.TEXTS, batch_size=3, compat="notebooks", cache=False)
    for i, text in enumerate(tiny.TEXTS):
        ref = naive(lm, text, drop_first=True)
        assert rel_err(acts.pooled["mean"][i], ref["mean"]) < 1e-4
        assert acts.nll_mean[i] == pytest.approx(ref["loss"], rel=1e-5)


def test_batched_equals_one_at_a_time(lm):
    batched = extract(lm, tiny.TEXTS, batch_size=5, cache=False)
    single = extract(lm, tiny.TEXTS, batch_size=1, cache=False)
    for p in batched.pooled:
        assert rel_err(batched.pooled[p], single.pooled[p]) < 1e-4
    np.testing.assert_allclose(batched.nll_sum, single.nll_sum, rtol=1e-4)
    np.testing.assert_array_equal(batched.n_scored, single.n_scored)


def test_left_padding_equals_right_padding(lm):
    right = extract(lm, tiny.TEXTS, batch_size=6, padding_side="right", cache=False)
    left = extract(lm, tiny.TEXTS, batch_size=6, padding_side="left", cache=False)
    for p in right.pooled:
        assert rel_err(left.pooled[p], right.pooled[p]) < 1e-4
    np.testing.assert_allclose(left.nll_sum, right.nll_sum, rtol=1e-4)


def test_seed_and_default_differ_only_where_token_0_is_not_bos(lm):
    default = extract(lm, tiny.TEXTS, batch_size=4, cache=False)
    seed = extract(lm, tiny.TEXTS, batch_size=4, compat="notebooks", cache=False)
    same = rel_err(default.pooled["mean"], seed.pooled["mean"]) < 1e-6
    assert same == lm.info.adds_bos
    np.testing.assert_array_equal(default.pooled["last"], seed.pooled["last"])
