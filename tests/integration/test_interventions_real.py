"""Rank-one edits on the real SmolLM2-135M and Gemma 3 270M: removal and addition at an early and a late state,
on six bundled pairs, against each text alone through HF's forward with an ordinary hook (the NLL summed here
from the logits over the full text): the preference B - A must agree, the shared prefix cancelling."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import layerscope
from layerscope.engine.interventions.edit_scores import Interventions, add, project_out, token_norms
from layerscope.models import decoder_layers

pytestmark = pytest.mark.integration

N_PAIRS = 6


@pytest.fixture(scope="module")
def pairs():
    texts = layerscope.load_pairs().texts()[: 2 * N_PAIRS]  # A0, B0, A1, B1, ...
    return texts, np.arange(len(texts)) ^ 1


@torch.no_grad()
def full_nll(lm, texts, state, change) -> np.ndarray:
    """Each text alone, hidden state ``state`` replaced by ``change(h)`` at positions >= 1 by an ordinary forward
    hook on block state - 1; minus the log-probability of every next token, summed in float64."""
    def hook(_m, _a, out):
        h = out[0] if isinstance(out, tuple) else out
        edited = h.clone()
        edited[0, 1:] = change(h[0, 1:].double()).to(h.dtype)
        return (edited, *out[1:]) if isinstance(out, tuple) else edited

    out = []
    for text in texts:
        ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
        handle = decoder_layers(lm.model)[state - 1].register_forward_hook(hook)
        try:
            logits = lm.model(ids, use_cache=False).logits
        finally:
            handle.remove()
        log_p = F.log_softmax(logits[0, :-1].double(), dim=-1)
        out.append(float(-log_p.gather(1, ids[0, 1:, None]).sum()))
    return np.array(out)


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_removal_and_addition_agree_with_a_hand_hooked_forward_on_pref(name, pairs, request):
    texts, partners = pairs
    lm = request.getfixturevalue("smollm2") if name == "smollm2-135m" else layerscope.load_model(name)
    n_layers, n = lm.info.n_layers, len(texts)
    iv = Interventions(lm, texts, partners=partners)
    assert (iv.score_from > 1).any()  # some pairs share a start past the first token
    a, b = np.arange(0, n, 2), np.arange(1, n, 2)
    base = iv.intact()
    sums, counts = token_norms(lm, texts)
    states = (3, n_layers - 4)
    _, pooled = iv.run(states[0], [add(np.zeros((n, lm.info.hidden_size)))], capture=states)  # the intact states
    for j, state in enumerate(states):
        # removed: the difference of the B and A texts' mean pooled states (a direction a probe might find);
        # added: a random direction, half the mean token norm at this state long
        u = (pooled[0, j, b].mean(axis=0) - pooled[0, j, a].mean(axis=0)).astype(np.float64)
        u /= np.linalg.norm(u)
        w = np.random.default_rng(state).standard_normal(lm.info.hidden_size)
        v = 0.5 * sums[:, state].sum() / counts.sum() * w / np.linalg.norm(w)
        got = iv.run(state, [project_out(np.tile(u, (n, 1))), add(np.tile(v, (n, 1)))])
        tu, tv = torch.from_numpy(u), torch.from_numpy(v)
        for k, change in enumerate((lambda h, u=tu: h - (h @ u)[:, None] * u, lambda h, v=tv: h + v)):
            full = full_nll(lm, texts, state, change)
            pref, want = got[k, b] - got[k, a], full[b] - full[a]
            np.testing.assert_allclose(pref, want, rtol=1e-4, err_msg=f"{name} edit {k} at state {state}")
            assert np.abs(pref - (base[b] - base[a])).max() > 1e-2, (name, k, state)  # the edit does move pref
