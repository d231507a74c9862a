"""The atlas pass against oracles built by hand: one plain forward pass per text (no batching, no padding), the last
block's output taken with a forward hook, then naive per-token numpy loops for every measure.

State ``l < n_layers`` is ``hidden_states[l]``; at ``l = n_layers`` every measure reads the last block's output
before the final norm, except the logit lens, whose layer ``n_layers`` is the model's own prediction."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tiny
from atlas_reference import TEXTS, cos, lens_token_ce, make_lm, massive_flags, output_tensor, reference
from layerscope import ExtractionError
from layerscope.engine.atlas.stream import atlas_pass, prefix_within, prompt_entropy_sums
from layerscope.models.info import decoder_layers


def naive_transitions(ref, n_layers):
    """Block influence, the same without position 0 and the massive tokens, angular distance: (n_layers,) each, by
    per-token loops."""
    influence, kept_influence, angular = [], [], []
    flags = [massive_flags(r["states"]) for r in ref]
    for layer in range(n_layers):
        values, kept, last = [], [], []
        for r, flag in zip(ref, flags, strict=True):
            s = r["states"]
            for t in range(s.shape[1]):
                d = 1 - cos(s[layer, t], s[layer + 1, t])
                values.append(d)
                if not flag[t] and t > 0:  # position 0 and the massive tokens left out
                    kept.append(d)
            c = np.clip(cos(s[layer, -1], s[layer + 1, -1]), -1, 1)
            last.append(np.arccos(c) / np.pi)
        influence.append(np.mean(values))
        kept_influence.append(np.mean(kept) if kept else np.nan)
        angular.append(np.mean(last))
    return np.array(influence), np.array(kept_influence), np.array(angular), int(sum(f.sum() for f in flags))


def naive_entropy(z):
    """Entropy, normalised entropy, effective rank of the Gram matrix of token states ``z`` (T, d)."""
    values = np.linalg.eigvalsh(z @ z.T)
    p = values / values.sum()
    p = p[p > 0]
    s = float(-(p * np.log(p)).sum())
    return s, s / np.log(min(z.shape)), np.exp(s)


def naive_top1(x):
    values = np.maximum(np.linalg.eigvalsh(np.cov(x, rowvar=False)), 1e-10)
    return values.max() / values.sum()


def naive_pooled(r, bos_id, layer):
    s = r["states"][layer]
    if bos_id is not None and r["ids"][0] == bos_id and len(r["ids"]) > 1:
        s = s[1:]
    return s.mean(axis=0)


def naive_lens_ce(lm, arch, ref, layer):
    """Mean next-token cross-entropy of head(final_norm(h_layer)) over every scored token, a token at a time."""
    return np.mean(np.concatenate([lens_token_ce(lm, arch, r, layer) for r in ref]))


def model_nll(ref):
    """The model's own token-weighted next-token NLL over every text, and the number of scored tokens."""
    total, count = 0.0, 0
    for r in ref:
        if len(r["ids"]) > 1:
            total += F.cross_entropy(r["logits"][:-1], torch.tensor(r["ids"][1:]), reduction="sum").item()
            count += len(r["ids"]) - 1
    return total / count, count


@pytest.fixture(scope="module", params=[(arch, bos) for arch in tiny.ARCHS for bos in (False, True)],
                ids=lambda p: f"{p[0]}-{'bos' if p[1] else 'nobos'}")
def case(request):
    """A tiny model, its atlas pass over TEXTS and the per-text reference."""
    arch, adds_bos = request.param
    lm = make_lm(arch, adds_bos)
    return arch, lm, atlas_pass(lm, TEXTS, progress=False, convention="raw"), reference(lm, TEXTS)


def test_counts_and_layers(case):
    _, lm, got, ref = case
    n = lm.info.n_layers
    assert got.layers == list(range(n + 1))
    assert got.transitions == list(range(n))
    assert got.n_layers == n
    assert got.n_texts == len(TEXTS)
    assert got.n_tokens == sum(len(r["ids"]) for r in ref)
    assert got.n_scored == sum(len(r["ids"]) - 1 for r in ref)


def test_block_influence_and_angular_distance(case):
    _, lm, got, ref = case
    influence, kept, angular, n_massive = naive_transitions(ref, lm.info.n_layers)
    np.testing.assert_allclose(got.block_influence, influence, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.block_influence_no_massive, kept, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.angular_distance, angular, rtol=1e-5, atol=1e-6)
    assert got.massive_tokens == n_massive


def test_norm(case):
    _, lm, got, ref = case
    want = [np.mean(np.concatenate([np.linalg.norm(r["states"][layer], axis=1) for r in ref]))
            for layer in range(lm.info.n_layers + 1)]
    np.testing.assert_allclose(got.norm, want, rtol=1e-5)


def test_pooled_leaves_out_bos(case):
    _, lm, got, ref = case
    bos = lm.tokenizer.bos_token_id
    want = np.array([[naive_pooled(r, bos, layer) for layer in range(lm.info.n_layers + 1)] for r in ref])
    assert got.pooled.shape == (len(TEXTS), lm.info.n_layers + 1, lm.info.hidden_size)
    assert got.pooled.dtype == np.float32
    np.testing.assert_allclose(got.pooled, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    if ref[0]["ids"][0] == bos:  # the BOS really is left out: the plain mean differs
        assert not np.allclose(got.pooled[0, 0], ref[0]["states"][0].mean(axis=0), rtol=1e-3)


def test_prompt_entropy(case):
    _, lm, got, ref = case
    used = [r for r in ref if len(r["ids"]) >= 2]
    assert got.prompt_entropy_texts == len(used)
    assert len(used) == len(TEXTS) - (0 if lm.tokenizer.bos_token_id == ref[-1]["ids"][0] else 1)
    want = np.array([[naive_entropy(r["states"][layer]) for layer in range(lm.info.n_layers + 1)] for r in used])
    want = want.mean(axis=0)  # (n_layers + 1, 3)
    for i, key in enumerate(("entropy", "normalised_entropy", "effective_rank")):
        np.testing.assert_allclose(got.prompt_entropy[key], want[:, i], rtol=1e-5, err_msg=key)


def test_spectrum_top1(case):
    _, lm, got, ref = case
    want = [naive_top1(np.concatenate([r["states"][layer] for r in ref])) for layer in range(lm.info.n_layers + 1)]
    np.testing.assert_allclose(got.spectrum["top1_ratio"], want, rtol=1e-6)


def test_lens(case):
    arch, lm, got, ref = case
    n = lm.info.n_layers
    nll, count = model_nll(ref)
    assert got.n_scored == count
    assert got.lens["lens_ce"][n] == pytest.approx(nll, rel=1e-5)
    assert abs(got.lens["lens_kl"][n]) < 1e-6
    assert got.lens["lens_top1_agree"][n] == 1.0
    assert got.lens["lens_ce"][1] == pytest.approx(naive_lens_ce(lm, arch, ref, 1), rel=1e-5)
    assert got.lens["lens_kl"][1] > 1e-3  # the lens really reads another state there


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_layer_subset_gives_the_full_run_numbers(arch):
    lm = make_lm(arch, n_layers=4)
    full = atlas_pass(lm, TEXTS, progress=False)
    for layers in ([0, 2], [1, 4], [4]):
        sub = atlas_pass(lm, TEXTS, layers=layers, progress=False)
        assert sub.layers == layers
        transitions = [layer for layer in layers if layer < 4]
        assert sub.transitions == transitions
        for name in ("block_influence", "block_influence_no_massive", "angular_distance"):
            np.testing.assert_allclose(getattr(sub, name), getattr(full, name)[transitions], rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(sub.norm, full.norm[layers], rtol=1e-6)
        np.testing.assert_allclose(sub.pooled, full.pooled[:, layers], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(sub.spectrum["top1_ratio"], full.spectrum["top1_ratio"][layers], rtol=1e-6)
        for key in sub.prompt_entropy:
            np.testing.assert_allclose(sub.prompt_entropy[key], full.prompt_entropy[key][layers], rtol=1e-6)
        for key in sub.lens:
            np.testing.assert_allclose(sub.lens[key], full.lens[key][layers], rtol=1e-6, atol=1e-7, err_msg=key)
        assert sub.massive_tokens == full.massive_tokens


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_batching_and_padding_do_not_change_the_numbers(arch):
    lm = make_lm(arch, adds_bos=True)
    texts = tiny.TEXTS
    one = atlas_pass(lm, texts, batch_size=1, progress=False)
    many = atlas_pass(lm, texts, progress=False)
    for name in ("block_influence", "block_influence_no_massive", "angular_distance", "norm"):
        np.testing.assert_allclose(getattr(many, name), getattr(one, name), rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(many.pooled, one.pooled, rtol=1e-5, atol=1e-5 * np.abs(one.pooled).max())
    for table in ("prompt_entropy", "spectrum", "lens"):
        for key, value in getattr(one, table).items():
            np.testing.assert_allclose(getattr(many, table)[key], value, rtol=1e-5, atol=1e-7, err_msg=key)
    assert (many.massive_tokens, many.prompt_entropy_texts) == (one.massive_tokens, one.prompt_entropy_texts)


class Inject:
    """Add ``value`` to dimension 0 of the last block's output at every occurrence of token ``target``: a massive
    activation at hidden state ``n_layers`` (before the final norm) alone, which turns the token's direction."""

    def __init__(self, lm, target, value=1000.0):
        self.target, self.value, self.ids = target, value, None
        self.handles = [
            lm.model.register_forward_pre_hook(self.keep_ids, with_kwargs=True),
            decoder_layers(lm.model)[-1].register_forward_hook(self.scale_rows)]

    def keep_ids(self, _module, _args, kwargs):
        self.ids = kwargs["input_ids"]

    def scale_rows(self, _module, _args, output):
        hidden = output_tensor(output)
        spike = torch.zeros(hidden.shape[-1], dtype=hidden.dtype)
        spike[0] = self.value
        hidden = torch.where((self.ids == self.target)[..., None], hidden + spike, hidden)
        return (hidden, *output[1:]) if isinstance(output, (tuple, list)) else hidden

    def remove(self):
        for handle in self.handles:
            handle.remove()


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_a_massive_token_before_the_final_norm_is_left_out(arch):
    lm = make_lm(arch)
    texts = tiny.TEXTS
    target = lm.tokenizer(texts[0])["input_ids"][0]  # "The": in 2 of the texts
    inject = Inject(lm, target)
    try:
        got = atlas_pass(lm, texts, progress=False)
        ref = reference(lm, texts)
    finally:
        inject.remove()
    n = lm.info.n_layers
    occurrences = sum(r["ids"].count(target) for r in ref)
    assert occurrences >= 2
    assert got.massive_tokens == occurrences
    influence, kept, angular, n_massive = naive_transitions(ref, n)
    assert n_massive == occurrences
    np.testing.assert_allclose(got.block_influence, influence, rtol=1e-5)
    np.testing.assert_allclose(got.block_influence_no_massive, kept, rtol=1e-5)
    np.testing.assert_allclose(got.angular_distance, angular, rtol=1e-5, atol=1e-6)
    assert abs(kept[n - 1] - influence[n - 1]) > 2e-3  # leaving the tokens out matters at the last block
    want = np.mean(np.concatenate([np.linalg.norm(r["states"][n], axis=1) for r in ref]))
    assert got.norm[n] == pytest.approx(want, rel=1e-5)  # the pre-norm state: its norm holds the injection


def test_every_token_massive_gives_nan():
    lm = make_lm("llama")

    def one_huge_dimension(_module, _args, output):  # every token's dimension 0 at 1e4: all massive
        hidden = output_tensor(output).clone()
        hidden[..., 0] = 1e4
        return (hidden, *output[1:]) if isinstance(output, (tuple, list)) else hidden

    handle = decoder_layers(lm.model)[-1].register_forward_hook(one_huge_dimension)
    try:
        got = atlas_pass(lm, TEXTS, progress=False)
    finally:
        handle.remove()
    assert got.massive_tokens == got.n_tokens == sum(len(lm.tokenizer(t)["input_ids"]) for t in TEXTS)
    assert got.block_influence_no_massive.shape == (3,)
    assert np.isnan(got.block_influence_no_massive).all()
    assert np.isfinite(got.block_influence).all()


def test_prefix_within_by_hand():
    assert prefix_within([3, 4, 5], 7) == 2
    assert prefix_within([3, 4, 5], 6) == 1
    assert prefix_within([3, 4, 5], 2) == 1  # at least one text
    assert prefix_within([3, 4, 5], 12) == 3
    assert prefix_within([3, 4, 5], 100) == 3
    assert prefix_within([3, 4, 5], None) == 3


def test_max_tokens_measures_the_prefix():
    lm = make_lm("llama")
    lengths = [len(lm.tokenizer(t)["input_ids"]) for t in TEXTS]
    budget = lengths[0] + lengths[1] + lengths[2] - 1  # the first two texts fit, not the third
    got = atlas_pass(lm, TEXTS, max_tokens=budget, progress=False)
    ref = reference(lm, TEXTS[:2])
    assert got.n_texts == 2
    assert got.n_tokens == lengths[0] + lengths[1]
    assert got.pooled.shape[0] == 2
    influence, _, angular, _ = naive_transitions(ref, lm.info.n_layers)
    np.testing.assert_allclose(got.block_influence, influence, rtol=1e-5)
    np.testing.assert_allclose(got.angular_distance, angular, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.pooled[:, 0], [r["states"][0].mean(axis=0) for r in ref], rtol=1e-5, atol=1e-6)
    assert atlas_pass(lm, TEXTS, max_tokens=1, progress=False).n_texts == 1


def test_prompt_entropy_sums_skips_short_texts_and_padding():
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 4, dtype=torch.float64)
    real = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    hidden[1, 3:] = 1e3  # padding: never read
    sums, used = prompt_entropy_sums(hidden, real)
    assert used == 2
    want = np.sum([naive_entropy(hidden[0].numpy()), naive_entropy(hidden[1, :3].numpy())], axis=0)
    np.testing.assert_allclose(sums.numpy(), want, rtol=1e-10)


@pytest.mark.parametrize("texts", [[], ["The cat sat.", "   "], [""]])
def test_empty_or_blank_texts_are_refused(texts):
    with pytest.raises(ExtractionError, match="non-empty"):
        atlas_pass(make_lm("llama"), texts, progress=False)


@pytest.mark.parametrize("layers", [[-1, 2], [0, 4], []])
def test_layers_out_of_range_are_refused(layers):
    lm = make_lm("llama")
    with pytest.raises(ExtractionError, match="0..3"):
        atlas_pass(lm, TEXTS, layers=layers, progress=False)
