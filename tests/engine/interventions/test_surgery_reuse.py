"""Prefix reuse in the surgery engine gives the numbers of whole passes, runs each signature once, and the
geometry pass's Block Influence and angular distances equal the formulas on HF's own hidden states."""

import numpy as np
import pytest
import torch

import tiny
from layerscope.engine.forward.batching import collate, pad_id
from layerscope.engine.interventions.surgery import Intervention
from layerscope.engine.interventions.surgery_run import distinct, measure_interventions, surgery_plan
from layerscope.engine.interventions.transitions import block_transitions
from layerscope.measures.similarity import angular_distance, block_influence
from layerscope.models import decoder_layers

N_LAYERS = 5
MIXED = [Intervention.skip(1), Intervention.repeat(3), Intervention.swap(0), Intervention.swap(3),
         Intervention.prune([1, 3]), Intervention.prune([1, 4]), Intervention.prune([0, 2, 4]),
         Intervention.prune([1]), Intervention.prune([4, 1])]


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma3"])
def test_reuse_on_and_off_give_the_same_numbers(arch):
    lm = tiny.tiny_lm(arch, n_layers=N_LAYERS)
    on = measure_interventions(lm, tiny.TEXTS, MIXED, batch_size=3, progress=False)
    off = measure_interventions(lm, tiny.TEXTS, MIXED, batch_size=3, prefix_reuse=False, progress=False)
    np.testing.assert_allclose(on.intact_nll, off.intact_nll, rtol=1e-5)
    for iv in MIXED:
        for name in ("nll", "kl", "agreement", "cosine"):
            np.testing.assert_allclose(getattr(on[iv], name), getattr(off[iv], name), rtol=1e-5, atol=1e-6)
    # Fewer block runs with reuse; prune {1, 4} starts past block 1, from skip 1's stream.
    assert on.plan.layers_run() < off.plan.layers_run() == len(off.plan.passes) * N_LAYERS
    starts = {on.plan.passes[i].job: on.plan.passes[i].start for i in range(len(on.plan.passes))}
    jobs = distinct(MIXED)
    assert starts[1 + jobs.index(Intervention.prune([1, 4]))] >= 2


def test_each_signature_runs_once_and_duplicates_share_their_result():
    jobs = distinct(MIXED)
    assert len(jobs) == len(MIXED) - 2  # prune {1} is skip 1; prune {4, 1} is prune {1, 4}
    plan = surgery_plan(N_LAYERS, jobs)
    assert len(plan.passes) == len(jobs) + 1 and plan.passes[0].job == 0  # the intact model first
    lm = tiny.tiny_lm("llama", n_layers=N_LAYERS)
    m = measure_interventions(lm, tiny.TEXTS[:4], MIXED, progress=False)
    assert m[Intervention.prune([1])] is m[Intervention.skip(1)]


def test_the_geometry_pass_equals_the_formulas_on_hidden_states():
    lm = tiny.tiny_lm("llama", n_layers=N_LAYERS)
    texts = tiny.TEXTS[:5]
    t = block_transitions(lm, texts, batch_size=2)
    # Reference: each text alone, HF's hidden states (0..L-1 enter blocks 0..L-1; the last block's output
    # before the final norm from a hook), every token.
    entering, leaving, last = [[] for _ in range(N_LAYERS)], [[] for _ in range(N_LAYERS)], []
    for text in texts:
        ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
        captured = []
        handle = decoder_layers(lm.model)[-1].register_forward_hook(
            lambda _m, _a, out, captured=captured: captured.append(out[0] if isinstance(out, tuple) else out))
        with torch.inference_mode():
            hs = lm.model(ids, output_hidden_states=True, use_cache=False).hidden_states
        handle.remove()
        states = [h[0].double().numpy() for h in hs[:N_LAYERS]] + [captured[0][0].double().numpy()]
        for b in range(N_LAYERS):
            entering[b].append(states[b])
            leaving[b].append(states[b + 1])
        last.append(np.stack([s[-1] for s in states]))
    for b in range(N_LAYERS):
        want = block_influence(np.concatenate(entering[b]), np.concatenate(leaving[b]))
        assert t.influence[b] == pytest.approx(want, rel=1e-4)
    last = np.stack(last)
    for i in range(N_LAYERS + 1):
        for j in range(N_LAYERS + 1):
            want = angular_distance(last[:, i], last[:, j]) if i != j else 0.0
            assert t.angular[i, j] == pytest.approx(want, abs=1e-5)
    assert t.n_tokens == sum(len(lm.tokenizer(x)["input_ids"]) for x in texts)


def test_padding_does_not_reach_the_geometry():
    lm = tiny.tiny_lm("gpt2", n_layers=3)
    texts = tiny.TEXTS[:6]
    together = block_transitions(lm, texts, batch_size=6)
    alone = [block_transitions(lm, [x, x], batch_size=1) for x in texts]
    counts = np.array([a.n_tokens / 2 for a in alone])
    pooled = sum(a.influence * c for a, c in zip(alone, counts, strict=True)) / counts.sum()
    np.testing.assert_allclose(together.influence, pooled, rtol=1e-4)
    batch = collate([lm.tokenizer(x)["input_ids"] for x in texts], np.arange(6), pad_id(lm.tokenizer))
    assert int(batch.attention_mask.sum()) == together.n_tokens
