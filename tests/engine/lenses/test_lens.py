"""The logit lens against references built by hand: per-text cross-entropy from the model's own logits, and a
per-token float64 loop (the final norm module called by its known path, the head weight multiplied out, Gemma's
soft-capping written from the config)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tiny
from layerscope import ExtractionError
from layerscope.engine.forward.batching import collate, pad_id, tokenize
from layerscope.engine.lenses.logit import LensSums, final_norm, lens_batch
from layerscope.models.info import decoder_layers

FINAL_NORM = {"llama": "model.norm", "gpt2": "transformer.ln_f", "gpt_neox": "gpt_neox.final_layer_norm",
              "opt": "model.decoder.final_layer_norm", "gemma3": "model.norm"}
TEXTS = [tiny.TEXTS[0], tiny.TEXTS[1], tiny.TEXTS[3]]
"""Three texts of different lengths: one right-padded batch."""
SOFTCAP = 1.5
"""Gemma's final soft-capping, set on the tiny gemma3 (whose config has none by default) so that it bites: its
logits reach several units."""


@torch.no_grad()
def run(arch: str):
    """The tiny model, its token ids per text, the right-padded batch and transformers' outputs for it."""
    lm = tiny.tiny_lm(arch)
    if arch == "gemma3":
        lm.model.config.final_logit_softcapping = SOFTCAP
    ids = tokenize(lm.tokenizer, TEXTS)
    assert len({len(x) for x in ids}) == 3
    batch = collate(ids, np.arange(len(ids)), pad_id=pad_id(lm.tokenizer), side="right")
    out = lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)
    return lm, ids, batch, out


def lens_means(lm, out, batch, layers, chunk_tokens=None):
    states = {layer: out.hidden_states[layer] for layer in layers}
    sums = LensSums()
    lens_batch(lm, states, batch, sums, chunk_tokens=chunk_tokens)
    assert sums.layers == sorted(layers)
    return {name: dict(zip(sums.layers, values, strict=True)) for name, values in sums.means().items()}


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_last_layer_is_the_model(arch):
    lm, ids, batch, out = run(arch)
    n = lm.info.n_layers
    means = lens_means(lm, out, batch, [0, n])
    nll, count = 0.0, 0
    for i, seq in enumerate(ids):  # each text's own tokens of the model's own logits
        length = len(seq)
        logits = out.logits[i, : length - 1].double()
        nll += F.cross_entropy(logits, torch.tensor(seq[1:]), reduction="sum").item()
        count += length - 1
    assert means["lens_ce"][n] == pytest.approx(nll / count, rel=1e-5)
    assert abs(means["lens_kl"][n]) < 1e-6
    assert means["lens_top1_agree"][n] == 1.0


def naive_lens(lm, arch, ids, out, layer):
    """Mean CE, entropy, KL(final || lens) and top-1 agreement at ``layer`` by a per-token float64 loop."""
    norm = lm.model.get_submodule(FINAL_NORM[arch])
    head = lm.model.get_output_embeddings()
    weight = head.weight.double()
    cap = getattr(lm.model.config, "final_logit_softcapping", None)
    assert cap == (SOFTCAP if arch == "gemma3" else None)
    rows = []
    with torch.no_grad():
        for i, seq in enumerate(ids):
            for t in range(len(seq) - 1):
                logits = norm(out.hidden_states[layer][i, t]).double() @ weight.T
                if head.bias is not None:
                    logits = logits + head.bias.double()
                if cap:
                    logits = torch.tanh(logits / cap) * cap
                logp = torch.log_softmax(logits, dim=-1)
                final = torch.log_softmax(out.logits[i, t].double(), dim=-1)
                rows.append([-logp[seq[t + 1]].item(), -(logp.exp() * logp).sum().item(),
                             (final.exp() * (final - logp)).sum().item(), float(logp.argmax() == final.argmax())])
    return dict(zip(("lens_ce", "lens_entropy", "lens_kl", "lens_top1_agree"), np.mean(rows, axis=0), strict=True))


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_intermediate_layer_matches_a_naive_loop(arch):
    lm, ids, batch, out = run(arch)
    n = lm.info.n_layers
    means = lens_means(lm, out, batch, [1, 2, n])
    for layer in (1, 2):
        want = naive_lens(lm, arch, ids, out, layer)
        for name, value in want.items():
            assert means[name][layer] == pytest.approx(value, rel=1e-5, abs=1e-6), (name, layer)
    assert means["lens_kl"][1] > 1e-3  # the lens really differs from the model there
    if arch == "gemma3":  # the capping bites: the model's own logits stay within it, and some come close
        assert out.logits.abs().max() < SOFTCAP
        assert out.logits.abs().max() > 0.9 * SOFTCAP


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_chunking_does_not_change_the_numbers(arch):
    lm, _, batch, out = run(arch)
    layers = list(range(lm.info.n_layers + 1))
    one = lens_means(lm, out, batch, layers, chunk_tokens=1)
    big = lens_means(lm, out, batch, layers, chunk_tokens=100_000)
    for name in one:
        for layer in layers:
            assert one[name][layer] == pytest.approx(big[name][layer], rel=1e-6, abs=1e-6), (name, layer)


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_final_norm_maps_the_last_block_to_the_last_hidden_state(arch):
    lm, _, batch, _ = run(arch)
    got = []
    handle = decoder_layers(lm.model)[-1].register_forward_hook(
        lambda _m, _a, output: got.append(output[0] if isinstance(output, tuple) else output))
    try:
        with torch.no_grad():
            out = lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    assert lm.info.last_hidden_normed
    norm = final_norm(lm)
    assert norm is lm.model.get_submodule(FINAL_NORM[arch])
    with torch.no_grad():
        torch.testing.assert_close(norm(got[-1]), out.hidden_states[-1], rtol=1e-5, atol=1e-6)


class Doubler(torch.nn.Module):
    def forward(self, x):
        return 2 * x


def swap_final_norm(lm, arch, module):
    parent, _, attr = FINAL_NORM[arch].rpartition(".")
    setattr(lm.model.get_submodule(parent), attr, module)


def test_a_model_without_a_final_norm_gets_identity():
    lm = tiny.tiny_lm("llama")
    swap_final_norm(lm, "llama", torch.nn.Identity())
    assert isinstance(final_norm(lm), torch.nn.Identity)


def test_no_matching_final_norm_names_the_model():
    lm = tiny.tiny_lm("gpt2")
    swap_final_norm(lm, "gpt2", Doubler())
    with pytest.raises(ExtractionError, match="tiny-gpt2-nobos"):
        final_norm(lm)


def test_lens_batch_needs_the_last_state():
    lm, _, batch, out = run("llama")
    with pytest.raises(ValueError, match="hidden state 3"):
        lens_batch(lm, {1: out.hidden_states[1]}, batch, LensSums())
