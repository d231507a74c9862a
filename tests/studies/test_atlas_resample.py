"""The atlas's boundary profiles on resamples of the texts (:mod:`layerscope.studies.atlas.resample`), on a real pass
of a tiny model, against hand computations from the model's own hidden states (one unbatched forward pass per
text, :mod:`atlas_reference`): a resample row of a sum over texts is the count-weighted mean of per-text
quantities, a loop over texts with the draw's counts; debiased CKA with the next layer is the unbiased HSIC of
Song et al. 2012 written out here, on the distinct texts of the resample."""

import math

import numpy as np
import pytest
import torch

import tiny
from atlas_reference import FINAL_NORM, cos, make_lm, reference
from layerscope.engine.atlas.stream import atlas_pass
from layerscope.studies.atlas.resample import draw_weights, resampled_profiles

TEXTS = tiny.TEXTS + tiny.CORPUS
"""21 texts of 4 to 39 tokens (no BOS): a resample draws a handful of them twice or more and leaves others out."""
ARCH = "llama"
N_RESAMPLES, SEED = 4, 3
SUMMED = ("lens_kl", "block_influence", "norm", "angular_distance", "prompt_entropy")


@pytest.fixture(scope="module")
def case():
    lm = make_lm(ARCH)
    p = atlas_pass(lm, TEXTS, batch_size=4, progress=False)
    weights = draw_weights(len(TEXTS), N_RESAMPLES, SEED)
    return lm, p, weights, resampled_profiles(p, weights, token_set=0), reference(lm, TEXTS)


def counts_of_a_draw(n, n_resamples, seed):
    """The draw's counts, by hand: resample r picks ``n`` text indices with replacement; text i's count is how
    often it was picked (the same seeded integers ``draw_weights`` documents)."""
    picks = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    rows = [[1] * n]
    for r in range(n_resamples):
        row = [0] * n
        for i in picks[r]:
            row[int(i)] += 1
        rows.append(row)
    return rows


@torch.no_grad()
def lens_token_kl(lm, r, layer):
    """(T - 1,) KL(final || logit lens at ``layer``) in nats at each scored position of reference text ``r``, a
    token at a time in float64: the lens is head(final_norm(h_layer)), the final the model's own logits."""
    norm = lm.model.get_submodule(FINAL_NORM[ARCH])
    head = lm.model.get_output_embeddings()
    out = []
    for k in range(len(r["ids"]) - 1):
        log_p = torch.log_softmax(r["logits"][k], dim=-1)
        log_q = torch.log_softmax(norm(r["hidden"][layer][k]).double() @ head.weight.double().T, dim=-1)
        out.append(float((log_p.exp() * (log_p - log_q)).sum()))
    return np.array(out)


def weighted_mean_by_hand(per_text, counts):
    """sum_i c_i a_i / sum_i c_i b_i over the texts i, ``per_text`` a list of (a_i, b_i): a loop, a text at a time."""
    top = bottom = 0.0
    for (a, b), c in zip(per_text, counts, strict=True):
        top += c * a
        bottom += c * b
    return top / bottom


def test_the_draws_are_counts_of_a_bootstrap_and_row_0_the_full_data():
    weights = draw_weights(len(TEXTS), N_RESAMPLES, SEED)
    assert weights.tolist() == counts_of_a_draw(len(TEXTS), N_RESAMPLES, SEED)
    assert all(sum(row) == len(TEXTS) and min(row) == 0 for row in weights[1:].tolist())  # each leaves a text out


def test_resampled_rows_differ_from_the_full_data(case):
    _, _, weights, profiles, _ = case
    assert (weights[1:] != 1).any(axis=1).all()
    for name in (*SUMMED, "cka_next", "twonn_id", "dataset_entropy", "top1_ratio"):
        values = profiles[name][1]
        for r in range(1, len(weights)):
            assert np.abs(values[r] - values[0]).max() > 1e-4, (name, r)


@pytest.mark.parametrize("r", [0, 1, N_RESAMPLES])
def test_a_resample_of_a_sum_over_texts_is_the_count_weighted_mean_of_the_texts(case, r):
    lm, _, weights, profiles, ref = case
    counts = counts_of_a_draw(len(TEXTS), N_RESAMPLES, SEED)[r]  # not the code's weights: the draw, by hand
    n_layers = lm.info.n_layers
    for layer in range(n_layers):
        per_text = []  # (sum over the text's tokens of 1 - cos(h_l, h_l+1), its tokens)
        for x in ref:
            s = x["states"]
            per_text.append((sum(1 - cos(s[layer, k], s[layer + 1, k]) for k in range(s.shape[1])), s.shape[1]))
        want = weighted_mean_by_hand(per_text, counts)
        assert profiles["block_influence"][1][r, layer] == pytest.approx(want, rel=1e-5)
        last = [(np.arccos(np.clip(cos(x["states"][layer, -1], x["states"][layer + 1, -1]), -1, 1)) / np.pi, 1)
                for x in ref]  # one per text: its last token
        assert profiles["angular_distance"][1][r, layer] == pytest.approx(weighted_mean_by_hand(last, counts),
                                                                          rel=1e-5)
    for layer in range(n_layers + 1):
        norms = [(sum(np.linalg.norm(x["states"][layer, k]) for k in range(len(x["ids"]))), len(x["ids"]))
                 for x in ref]
        want = math.log10(weighted_mean_by_hand(norms, counts))
        assert profiles["norm"][1][r, layer] == pytest.approx(want, rel=1e-6, abs=1e-7)
        kl = [(lens_token_kl(lm, x, layer).sum(), len(x["ids"]) - 1) for x in ref]
        assert profiles["lens_kl"][1][r, layer] == pytest.approx(weighted_mean_by_hand(kl, counts), rel=1e-4,
                                                                 abs=1e-6)


def unbiased_hsic(k, l):  # noqa: E741 (the paper's name)
    """Song et al. 2012's unbiased HSIC estimator of two (n, n) kernel matrices, written from the formula with
    K~ and L~ the matrices with their diagonal set to 0:
    [tr(K~ L~) + (1' K~ 1)(1' L~ 1) / ((n - 1)(n - 2)) - 2 / (n - 2) 1' K~ L~ 1] / (n (n - 3)), sums as loops."""
    n = len(k)
    trace = k_total = l_total = cross = 0.0
    for i in range(n):
        k_row = l_row = 0.0
        for j in range(n):
            if i != j:
                trace += k[i, j] * l[j, i]
                k_total += k[i, j]
                l_total += l[i, j]
                k_row += k[i, j]
                l_row += l[i, j]
        cross += k_row * l_row  # (1' K~)_i (L~ 1)_i, K~ symmetric
    return (trace + k_total * l_total / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * cross) / (n * (n - 3))


def debiased_cka_by_hand(x, y):
    """Debiased CKA (Nguyen, Raghu & Kornblith 2021) of x (n, d1) and y (n, d2): the unbiased HSIC of the linear
    kernels over the square root of the two self-HSICs. The raw (uncentred) Gram matrices: HSIC_u does not change
    when every input moves by the same vector."""
    k, l = x @ x.T, y @ y.T  # noqa: E741
    return unbiased_hsic(k, l) / math.sqrt(unbiased_hsic(k, k) * unbiased_hsic(l, l))


def linear_cka_by_hand(x, y):
    """The biased linear CKA of Kornblith et al. 2019, for contrast: ||Yc' Xc||_F^2 / (||Xc' Xc||_F ||Yc' Yc||_F)."""
    xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
    return np.linalg.norm(yc.T @ xc) ** 2 / (np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc))


@pytest.mark.parametrize("r", [0, 1, 2])
def test_resampled_cka_next_is_the_debiased_cka_of_the_distinct_texts(case, r):
    lm, _, weights, profiles, ref = case
    counts = counts_of_a_draw(len(TEXTS), N_RESAMPLES, SEED)[r]
    distinct = [i for i, c in enumerate(counts) if c > 0]  # each drawn text once
    assert len(distinct) >= 4 and (r == 0) == (len(distinct) == len(TEXTS))
    layers, values = profiles["cka_next"]
    assert layers == list(range(lm.info.n_layers))
    gaps = []
    for layer in layers:
        # mean pooling (no BOS here): the mean of the text's token states
        x = np.stack([ref[i]["states"][layer].mean(axis=0) for i in distinct])
        y = np.stack([ref[i]["states"][layer + 1].mean(axis=0) for i in distinct])
        want = debiased_cka_by_hand(x, y)
        assert values[r, layer] == pytest.approx(want, abs=1e-6), (r, layer)
        gaps.append(abs(linear_cka_by_hand(x, y) - want))
    assert min(gaps) > 100 * 1e-6 and max(gaps) > 0.05, gaps  # the biased CKA would be told apart
