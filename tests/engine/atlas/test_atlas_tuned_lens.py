"""The atlas pass through a tuned lens against a hand computation: per scored token, the translator written out
(h + W h + b), the final norm and the head in float64, then cross-entropy, entropy, KL(final || lens) and top-1
agreement averaged over every scored token; zero translators give the logit lens's numbers exactly."""

import numpy as np
import pytest
import torch

import tiny
from atlas_reference import FINAL_NORM, TEXTS, make_lm, reference
from layerscope.engine.atlas.stream import atlas_pass
from layerscope.engine.lenses.tuned import TunedLens


def random_lens(lm, seed=3, scale=0.2):
    return tiny.random_translators(TunedLens.zeros(lm), seed, scale)


@torch.no_grad()
def hand_lens(lm, arch, ref, lens, layer):
    """(ce, entropy, kl, top1) means over every scored token of every text, one token at a time in float64."""
    norm = lm.model.get_submodule(FINAL_NORM[arch])
    head = lm.model.get_output_embeddings()
    cap = getattr(lm.model.config, "final_logit_softcapping", None)
    rows = []
    for r in ref:
        for k in range(len(r["ids"]) - 1):
            h = r["hidden"][layer][k].double()
            t = lens.translators[layer]
            moved = h + h @ t.weight.double().T + t.bias.double()
            logits = norm(moved.float()).double() @ head.weight.double().T
            if head.bias is not None:
                logits = logits + head.bias.double()
            if cap:
                logits = torch.tanh(logits / cap) * cap
            log_lens = torch.log_softmax(logits, -1)
            log_final = torch.log_softmax(r["logits"][k], -1)
            p_lens, p_final = log_lens.exp(), log_final.exp()
            rows.append([-log_lens[r["ids"][k + 1]].item(), -(p_lens * log_lens).sum().item(),
                         (p_final * (log_final - log_lens)).sum().item(),
                         float(log_lens.argmax() == log_final.argmax())])
    return np.mean(rows, axis=0)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma3"])
def test_tuned_lens_metrics_equal_the_hand_computation(arch):
    lm = make_lm(arch)
    lens = random_lens(lm)
    got = atlas_pass(lm, TEXTS, progress=False, tuned=lens.translate)
    ref = reference(lm, TEXTS)
    for layer in range(lm.info.n_layers):
        want = hand_lens(lm, arch, ref, lens, layer)
        for i, metric in enumerate(("lens_ce", "lens_entropy", "lens_kl", "lens_top1_agree")):
            assert got.tuned_lens[metric][layer] == pytest.approx(want[i], rel=1e-4, abs=1e-5), (layer, metric)
    # the translators move the lens: its KL differs from the logit lens's at a translated state
    assert not np.allclose(got.tuned_lens["lens_kl"][:-1], got.lens["lens_kl"][:-1])
    # the model's own output has no translator: the same numbers through both
    n = lm.info.n_layers
    assert {k: v[n] for k, v in got.tuned_lens.items()} == {k: v[n] for k, v in got.lens.items()}


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_zero_translators_give_the_logit_lens_exactly(arch):
    lm = make_lm(arch, n_layers=4)
    got = atlas_pass(lm, TEXTS, progress=False, tuned=TunedLens.zeros(lm).translate)
    for metric, values in got.lens.items():
        np.testing.assert_array_equal(got.tuned_lens[metric], values)
    np.testing.assert_array_equal(got.texts.tuned_lens, got.texts.lens)


def test_without_a_tuned_lens_nothing_tuned_is_measured():
    lm = make_lm("llama")
    got = atlas_pass(lm, TEXTS[:4], progress=False)
    assert got.tuned_lens is None and got.texts.tuned_lens is None
