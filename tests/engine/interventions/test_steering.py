"""Steering at a hidden state against independent references: each text alone (and a left-padded batch) through
a plain forward with an ordinary hook that adds the vector, the loss computed here from the logits; prefix reuse
counted block by block; several vectors and alphas at once against one at a time; bad inputs refused."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tiny
from layerscope.engine.interventions.scoring import Scorer, score_texts
from layerscope.engine.interventions.steering import Steering, steer
from layerscope.models import decoder_layers

L = 4
D = 32  # tiny models' hidden size
BATCH = 3  # tiny.TEXTS in 4 right-padded batches


def direction(seed: int, scale: float = 0.5) -> torch.Tensor:
    return scale * torch.randn(D, generator=torch.Generator().manual_seed(seed))


def hooked(lm, state: int, delta: torch.Tensor):
    """An ordinary forward hook adding ``delta`` to the output of the embeddings module (state 0) or of block
    state - 1; returns the handle."""
    module = lm.model.get_input_embeddings() if state == 0 else decoder_layers(lm.model)[state - 1]

    def add(_module, _args, output):
        return (output[0] + delta, *output[1:]) if isinstance(output, tuple) else output + delta

    return module.register_forward_hook(add)


def mean_nll(logits: torch.Tensor, ids: torch.Tensor, real: torch.Tensor) -> np.ndarray:
    """(B,) mean next-token cross-entropy over the positions t where tokens t and t + 1 are both real."""
    nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")
    scored = real[:, 1:] & real[:, :-1]
    return (torch.where(scored, nll, 0.0).double().sum(1) / scored.sum(1)).numpy()


@torch.no_grad()
def alone(lm, texts, state=None, delta=None) -> np.ndarray:
    """Each text alone, a plain forward (with the hook when ``state`` is given)."""
    handle = hooked(lm, state, delta) if state is not None else None
    try:
        out = []
        for text in texts:
            ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
            out.append(mean_nll(lm.model(ids).logits, ids, torch.ones_like(ids, dtype=torch.bool))[0])
        return np.array(out)
    finally:
        if handle is not None:
            handle.remove()


@torch.no_grad()
def left_padded(lm, texts, state, delta) -> np.ndarray:
    """All texts in one left-padded batch (positions counted over real tokens), the hook adding to pads too."""
    ids = [lm.tokenizer(text)["input_ids"] for text in texts]
    width = max(map(len, ids))
    input_ids = torch.tensor([[0] * (width - len(x)) + x for x in ids])
    real = torch.tensor([[False] * (width - len(x)) + [True] * len(x) for x in ids])
    positions = (real.long().cumsum(1) - 1).clamp(min=0)
    handle = hooked(lm, state, delta)
    try:
        logits = lm.model(input_ids=input_ids, attention_mask=real.long(), position_ids=positions).logits
    finally:
        handle.remove()
    return mean_nll(logits, input_ids, real)


def test_the_intact_nll_and_a_zero_vector_or_alpha():
    lm = tiny.tiny_lm("llama", n_layers=L)
    steering = Steering(lm, tiny.TEXTS, batch_size=BATCH)
    intact = steering.intact()
    nll_sum, count = score_texts(lm, tiny.TEXTS)
    np.testing.assert_allclose(intact, nll_sum / count, rtol=1e-6)
    np.testing.assert_allclose(intact, alone(lm, tiny.TEXTS), rtol=1e-5)
    labels = [lm.model(ids, labels=ids).loss.item() for ids in
              (lm.tokenizer(text, return_tensors="pt")["input_ids"] for text in tiny.TEXTS)]
    np.testing.assert_allclose(intact, labels, rtol=1e-5)
    for state in range(L + 1):
        zero = steering.steered(state, np.zeros(D))
        scaled = steering.steered(state, direction(state), alphas=(0.0, 1.0))
        np.testing.assert_array_equal(zero[0, 0], intact)
        np.testing.assert_array_equal(scaled[0, 0], intact)
        assert not np.allclose(scaled[0, 1], intact, rtol=1e-3), state  # the vector does change the NLL


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_steered_equals_a_plain_forward_with_a_hook(arch):
    lm = tiny.tiny_lm(arch, n_layers=L)
    steering = Steering(lm, tiny.TEXTS, batch_size=BATCH)
    intact = steering.intact()
    alpha = 1.5
    for state in (0, 1, L // 2, L):
        v = direction(10 + state)
        nll = steering.steered(state, v, (alpha,))[0, 0]
        expected = alone(lm, tiny.TEXTS, state, alpha * v)
        np.testing.assert_allclose(nll, expected, rtol=1e-5, err_msg=f"{arch} state {state}")
        np.testing.assert_allclose(nll, left_padded(lm, tiny.TEXTS, state, alpha * v), rtol=1e-5,
                                   err_msg=f"{arch} state {state}, left-padded")
        assert not np.allclose(nll, intact, rtol=1e-3), (arch, state)


def test_prefix_reuse_runs_only_the_blocks_above_the_state():
    lm = tiny.tiny_lm("gpt2", n_layers=L)
    steering = Steering(lm, tiny.TEXTS, batch_size=BATCH)
    n_batches = len(steering.batches)
    assert n_batches == 4
    steering.intact()
    assert steering.blocks_run == L * n_batches and steering.kept == list(range(1, L + 1))
    v = direction(3)
    for state in range(L + 1):
        before = steering.blocks_run
        nll = steering.steered(state, v, (2.0,))[0, 0]
        assert steering.blocks_run - before == (L - state if state else L) * n_batches  # state 0: a whole pass
        assert steering.kept == list(range(max(state, 1), L + 1))  # the states below are dropped

        # A whole pass, independently hooked: block state - 1's output (or block 0's input) plus the vector.
        module = decoder_layers(lm.model)[state - 1] if state else decoder_layers(lm.model)[0]
        add = (lambda _m, args, kwargs: ((args[0] + 2.0 * v, *args[1:]), kwargs)) if state == 0 else (
            lambda _m, _a, out: out + 2.0 * v)
        handle = (module.register_forward_pre_hook(add, with_kwargs=True) if state == 0
                  else module.register_forward_hook(add))
        try:
            nll_sum, count = Scorer(lm, tiny.TEXTS, batch_size=BATCH).score()
        finally:
            handle.remove()
        np.testing.assert_allclose(nll, nll_sum / count, rtol=1e-6, err_msg=f"state {state}")
        before = steering.blocks_run
        whole = steering.steered(state, v, (2.0,), prefix_reuse=False)[0, 0]
        assert steering.blocks_run - before == L * n_batches
        np.testing.assert_allclose(nll, whole, rtol=1e-6)
    assert steering.kept_bytes == steering.state_bytes  # only state L left


def test_a_small_memory_budget_keeps_a_window_of_states():
    lm = tiny.tiny_lm("llama", n_layers=L)
    probe = Steering(lm, tiny.TEXTS, batch_size=BATCH)
    steering = Steering(lm, tiny.TEXTS, batch_size=BATCH, max_kept_bytes=2 * probe.state_bytes)
    n_batches = len(steering.batches)
    v = direction(4)
    reference = {s: probe.steered(s, v)[0, 0] for s in range(1, L + 1)}
    for state in range(1, L + 1):
        nll = steering.steered(state, v)[0, 0]
        assert steering.kept_bytes <= 2 * steering.state_bytes
        np.testing.assert_array_equal(nll, reference[state])
    # intact passes at states 1 and 3 (each keeping two states), then L - s blocks per steered pass
    assert steering.blocks_run == n_batches * (2 * L + sum(L - s for s in range(1, L + 1)))
    steering.drop(L)
    assert steering.kept == [] and steering.kept_bytes == 0


def test_steer_and_several_vectors_and_alphas_at_once():
    lm = tiny.tiny_lm("gemma3", n_layers=L)
    steering = Steering(lm, tiny.TEXTS, batch_size=BATCH)
    vectors = torch.stack([direction(20 + i) for i in range(3)])
    alphas = (-2.0, 0.5, 3.0)
    for state in (0, 2, L):
        many = steering.steered(state, vectors, alphas)
        assert many.shape == (3, 3, len(tiny.TEXTS))
        for i in range(3):
            for j, alpha in enumerate(alphas):
                one = steering.steered(state, vectors[i], (alpha,))
                np.testing.assert_array_equal(many[i, j], one[0, 0])
        one_off = steer(lm, tiny.TEXTS, state, vectors[1].numpy(), alphas[2], batch_size=BATCH)
        assert one_off.shape == (len(tiny.TEXTS),) and one_off.dtype == np.float64
        np.testing.assert_allclose(one_off, many[1, 2], rtol=1e-6)


def test_bad_inputs_raise_before_any_pass():
    lm = tiny.tiny_lm("llama", n_layers=L)
    steering = Steering(lm, tiny.TEXTS[:3])
    v = direction(0)
    for state in (-1, L + 1):
        with pytest.raises(ValueError, match=rf"hidden states 0\.\.{L}"):
            steering.steered(state, v)
    with pytest.raises(ValueError, match="whole hidden-state number"):
        steering.steered(1.5, v)
    for bad in (np.zeros(D + 1), np.zeros((2, D - 1)), np.zeros((1, 2, D))):
        with pytest.raises(ValueError, match=f"d = {D}"):
            steering.steered(1, bad)
    nan = v.clone()
    nan[3] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        steering.steered(1, torch.stack([v, nan]))
    with pytest.raises(ValueError, match="NaN or inf"):
        steering.steered(1, np.full(D, np.inf))
    with pytest.raises(ValueError, match="alphas must be finite"):
        steering.steered(1, v, (1.0, float("inf")))
    with pytest.raises(ValueError, match="one \\(d,\\) vector"):
        steer(lm, tiny.TEXTS[:3], 1, np.zeros((2, D)))
    with pytest.raises(ValueError, match=rf"hidden states 0\.\.{L}"):
        steer(lm, tiny.TEXTS[:3], L + 1, v)
    assert steering.blocks_run == 0 and steering.kept_bytes == 0
