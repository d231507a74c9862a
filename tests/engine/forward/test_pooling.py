import math

import numpy as np
import pytest
import torch

from layerscope.engine.forward.batching import collate
from layerscope.engine.forward.pooling import Pooler, mean_mask, pool, pooling_masks, token_nll

BOS = 1


def batch(side="right"):
    # text 0 starts with BOS, text 1 does not; text 1 is padded
    return collate([[BOS, 4, 5], [6, 7]], np.array([0, 1]), pad_id=0, side=side)


def test_mean_mask_drops_bos_by_id_and_seed_drops_token_0_always():
    for side in ("right", "left"):
        b = batch(side)
        real = b.attention_mask.bool()
        default = mean_mask(b, BOS)
        seed = mean_mask(b, BOS, compat="notebooks")
        # text 0: BOS dropped in both modes; text 1: kept by default, dropped by seed
        assert default[0].sum() == 2 and seed[0].sum() == 2
        assert default[1].sum() == 2 and seed[1].sum() == 1
        assert not (default & ~real).any() and not (seed & ~real).any()
    b = batch("right")
    assert mean_mask(b, None)[0].sum() == 3  # a tokenizer without BOS: nothing dropped


def test_pool_by_hand_and_pad_positions_cannot_leak():
    b = batch("right")
    hidden = torch.tensor([
        [[1.0, 1.0], [2.0, 4.0], [3.0, 6.0]],
        [[10.0, 0.0], [20.0, 2.0], [float("nan"), float("inf")]],  # last column is padding
    ])
    out = pool(hidden, b, mean_mask(b, BOS), ("mean", "last", "first"))
    assert out["mean"].tolist() == [[2.5, 5.0], [15.0, 1.0]]
    assert out["last"].tolist() == [[3.0, 6.0], [20.0, 2.0]]
    assert out["first"].tolist() == [[1.0, 1.0], [10.0, 0.0]]


def test_token_nll_by_hand():
    b = batch("left")  # text 1 = [pad, 6, 7]
    logits = torch.zeros(2, 3, 8)
    logits[0, 0, 4] = 2.0  # predicts token 4 after BOS
    logits[1, 1, 7] = 1.0  # predicts token 7 after token 6
    logits[1, 0, :] = float("nan")  # the pad position's prediction must not count
    nll_sum, n = token_nll(logits, b)
    lse2, lse1 = math.log(7 + math.e**2), math.log(7 + math.e)
    # text 0: -log p(4 | BOS) + -log p(5 | 4), the second step uniform over 8 tokens
    assert n.tolist() == [2, 1]
    assert abs(nll_sum[0].item() - (lse2 - 2.0 + math.log(8))) < 1e-6
    assert abs(nll_sum[1].item() - (lse1 - 1.0)) < 1e-6


def test_a_stack_of_layers_pools_like_a_loop_over_layers_and_tokens():
    """pool() on (G, B, T, d): each layer's vectors equal a float64 loop over the masked tokens (NaN at padding in one
    layer, inf at a real token in another, which makes only that text's mean NaN)."""
    rng = np.random.default_rng(3)
    b = collate([[BOS, 4, 5, 6], [7, 8], [9, 3, 2]], np.array([0, 1, 2]), pad_id=0, side="left")
    real = b.attention_mask.bool().numpy()
    states = rng.normal(size=(3, 3, 4, 5)).astype(np.float32)
    states[0][~real] = np.nan
    states[2, 2, -1, 1] = np.inf  # text 2's last token, layer 2
    mask = mean_mask(b, BOS)
    out = pool(torch.from_numpy(states), b, mask, ("mean", "last", "first"))
    for g in range(3):
        for i in range(3):
            tokens = np.flatnonzero(mask[i].numpy())
            want = states[g, i, tokens].astype(np.float64).mean(axis=0)
            got = out["mean"][g, i].numpy()
            if g == 2 and i == 2:
                assert np.isnan(got).all()
            else:
                np.testing.assert_allclose(got, want, rtol=1e-6)
            positions = np.flatnonzero(real[i])
            np.testing.assert_array_equal(out["last"][g, i].numpy(), states[g, i, positions[-1]])
            np.testing.assert_array_equal(out["first"][g, i].numpy(), states[g, i, positions[0]])


def naive_pool(states: np.ndarray, real: np.ndarray, masks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """(B, d) float64 per pooling of one layer's ``states`` (B, T, d): a loop over texts and their masked tokens."""
    out = {p: np.stack([states[i, m].astype(np.float64).mean(axis=0) for i, m in enumerate(mask)])
           for p, mask in masks.items()}
    out["last"] = np.stack([states[i, np.flatnonzero(r)[-1]] for i, r in enumerate(real)])
    out["first"] = np.stack([states[i, np.flatnonzero(r)[0]] for i, r in enumerate(real)])
    return out


@pytest.mark.parametrize("case", ["finite", "inf", "bfloat16"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_the_pooler_writes_what_a_loop_over_tokens_gives_into_its_outputs(case, side):
    """Pooler (once per batch, then per layer into given (B, d) views of one buffer) against a float64 loop: the fast
    CPU float32 path, the fallback for a non-finite value (not finite only where it is pooled) and for 16-bit states;
    on the fast path a mean pooling's numbers are the same bits whichever other poolings are asked for."""
    rng = np.random.default_rng(4)
    b = collate([[BOS, 4, 5, 6], [7, 8], [9, 3, 2]], np.array([0, 1, 2]), pad_id=0, side=side)
    real = b.attention_mask.bool().numpy()
    masks = pooling_masks(b, BOS)
    states = rng.normal(size=(3, 4, 5)).astype(np.float32)
    states[~real] = np.nan  # padding never leaks
    if case == "inf":
        states[1, np.flatnonzero(real[1])[0], 2] = np.inf  # text 1's first token: its mean and "first" are not finite
    hidden = torch.from_numpy(states)
    if case == "bfloat16":
        hidden = hidden.to(torch.bfloat16)
        states = hidden.float().numpy()
    names = ("mean", "last", "first", "mean_no_pos0")
    packed = torch.full((len(names), 2, 3, 5), 7.0)  # (P, layers, B, d): outputs are views of one buffer
    pooler = Pooler(b, masks, names)
    pooler(hidden, {p: packed[i, 1] for i, p in enumerate(names)})
    want = naive_pool(states, real, {p: masks[p].numpy() for p in ("mean", "mean_no_pos0")})
    for i, p in enumerate(names):
        got = packed[i, 1].numpy()
        if case == "inf" and p in ("mean", "first"):  # mean_no_pos0 leaves position 0 out: finite
            assert not np.isfinite(got[1]).all()
            rows = [0, 2]
        else:
            rows = [0, 1, 2]
        np.testing.assert_allclose(got[rows], want[p][rows], rtol=1e-6 if case != "bfloat16" else 1e-2)
    assert (packed[:, 0] == 7.0).all()  # the other layer's slot is untouched
    if case == "finite":  # the CPU float32 path: one product per pooling
        alone = torch.empty(3, 5)
        Pooler(b, masks, ("mean",))(hidden, {"mean": alone})
        assert torch.equal(alone, packed[0, 1])


def test_the_pooler_says_which_path_it_took_and_a_second_pooler_takes_its_answer():
    """``Pooler(...)(hidden, out)`` returns True only for float32 CPU states that sum to a finite number (the short
    path); a second Pooler of the same state given that answer as ``finite=`` pools as if it had checked: told False
    (a NaN at padding), the NaN stays out of every mean; told True, it does not sum the state again but reads it as
    it is (a NaN at padding then reaches the mean: only a Pooler's own answer for these values may be passed on)."""
    rng = np.random.default_rng(7)
    b = collate([[BOS, 4, 5, 6], [7, 8, 9]], np.array([0, 1]), pad_id=0)
    real = b.attention_mask.bool().numpy()
    masks = pooling_masks(b, BOS, massive=torch.tensor([[False, True, False, False], [False, False, False, False]]))
    states = rng.normal(size=(2, 4, 5)).astype(np.float32)
    want = naive_pool(states, real, {"mean_no_massive": masks["mean_no_massive"].numpy()})["mean_no_massive"]
    first, second = Pooler(b, masks, ("last",)), Pooler(b, masks, ("mean_no_massive",))
    out = {"last": torch.empty(2, 5), "mean_no_massive": torch.empty(2, 5)}
    assert first(torch.from_numpy(states), out) is True
    assert second(torch.from_numpy(states), out, finite=True) is True
    np.testing.assert_allclose(out["mean_no_massive"].numpy(), want, rtol=1e-6)

    states[1, 3] = np.nan  # text 1's padding
    hidden = torch.from_numpy(states)
    assert first(hidden, out) is False
    assert second(hidden, out, finite=False) is False
    np.testing.assert_allclose(out["mean_no_massive"].numpy(), want, rtol=1e-6)
    assert second(hidden, out) is False  # no answer given: it checks itself
    np.testing.assert_allclose(out["mean_no_massive"].numpy(), want, rtol=1e-6)
    assert second(hidden, out, finite=True) is True  # told finite, it takes the short path without a sum
    assert np.isnan(out["mean_no_massive"][1].numpy()).all()
    assert first(hidden.to(torch.bfloat16), out) is False  # 16-bit states: never the short path
