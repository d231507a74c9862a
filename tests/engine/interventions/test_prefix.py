"""Prefix reuse: a pass started at layer k from a kept stream against an independent whole pass, the stand-ins
leaving every block as it was, and the pass plan checked by hand and by brute force."""

import copy
import random

import pytest
import torch

import tiny
from layerscope.engine.interventions.prefix import stand_ins
from layerscope.engine.interventions.prefix_plan import plan_passes
from layerscope.engine.interventions.scoring import Scorer
from layerscope.models import decoder_layers

N_LAYERS = 4


def labelled_nll(model, tokenizer, texts):
    """Per text: HF's own ``labels`` loss (mean over next tokens) times the number of next tokens, text by text."""
    out = []
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            out.append((model(ids, labels=ids).loss.item() * (ids.shape[1] - 1), ids.shape[1] - 1))
    return out


@torch.no_grad()
def change_layers(model, layers, seed):
    """Scale every parameter of the chosen decoder blocks by 1.3 and add noise (a scale alone can vanish in a
    norm: Gemma 3 normalizes each sublayer's output)."""
    blocks = decoder_layers(model)
    generator = torch.Generator().manual_seed(seed)
    for i in layers:
        for p in blocks[i].parameters():
            p.mul_(1.3).add_(0.1 * torch.randn(p.shape, generator=generator))


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_a_pass_started_at_k_from_a_kept_stream_equals_a_whole_pass(arch):
    lm = tiny.tiny_lm(arch, n_layers=N_LAYERS)
    scorer = Scorer(lm, tiny.TEXTS, batch_size=3)  # 4 batches, right padding
    for k in range(1, N_LAYERS):
        original = copy.deepcopy(lm.model)
        scorer.score(keep={7: k})  # whole pass under the original weights, keeping the stream entering layer k
        change_layers(lm.model, range(k, N_LAYERS), seed=k)  # the layers the started pass runs change ...
        reference = copy.deepcopy(lm.model)
        change_layers(lm.model, range(k), seed=10 + k)  # ... and the layers below it must not run at all
        nll, count = scorer.score(start=k, source=7)
        scorer.drop([7])
        expected = labelled_nll(reference, lm.tokenizer, tiny.TEXTS)
        assert count.tolist() == [c for _, c in expected], (arch, k)
        assert nll.tolist() == pytest.approx([s for s, _ in expected], rel=1e-5), (arch, k)
        whole = labelled_nll(lm.model, lm.tokenizer, tiny.TEXTS[:1])[0][0]  # the current weights differ below k
        assert whole != pytest.approx(nll[0], rel=1e-3)
        assert labelled_nll(original, lm.tokenizer, tiny.TEXTS[:1])[0][0] != pytest.approx(nll[0], rel=1e-3)
        lm.model.load_state_dict(original.state_dict())
    assert scorer.kept_bytes == 0


def test_stand_ins_put_every_block_back_also_when_the_body_raises():
    lm = tiny.tiny_lm("gpt2", n_layers=N_LAYERS)
    blocks = decoder_layers(lm.model)
    ids = lm.tokenizer(tiny.TEXTS[1], return_tensors="pt")["input_ids"]
    outputs = []
    handle = blocks[0].register_forward_hook(lambda _m, _a, output: outputs.append(output))
    with torch.no_grad():
        before = lm.model(ids).logits
        handle.remove()
        as_tuple = isinstance(outputs[0], tuple)  # transformers 5 blocks return a tensor, older ones a tuple
        hidden = torch.randn(1, ids.shape[1], 32)
        with stand_ins(blocks, 3, hidden, as_tuple=as_tuple):
            assert all("forward" in vars(blocks[k]) for k in range(3)) and "forward" not in vars(blocks[3])
            during = lm.model(ids).logits
        assert not torch.allclose(during, before)
        with pytest.raises(RuntimeError, match="boom"), stand_ins(blocks, 2, hidden, as_tuple=as_tuple):
            raise RuntimeError("boom")
        assert not any("forward" in vars(block) for block in blocks)
        assert torch.equal(lm.model(ids).logits, before)



def test_stand_ins_give_back_a_forward_set_on_the_instance():
    """accelerate's device hooks (and intervened()) put a ``forward`` on the block instance: it comes back."""
    lm = tiny.tiny_lm("llama", n_layers=N_LAYERS)
    blocks = decoder_layers(lm.model)
    calls = []
    bound = blocks[1].forward

    def wrapped(*args, **kwargs):
        calls.append(1)
        return bound(*args, **kwargs)

    blocks[1].forward = wrapped
    ids = lm.tokenizer(tiny.TEXTS[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        with stand_ins(blocks, 3, torch.randn(1, ids.shape[1], 32)):
            lm.model(ids)
        assert calls == [] and vars(blocks[1])["forward"] is wrapped
        assert not any("forward" in vars(blocks[k]) for k in (0, 2))
        lm.model(ids)
    assert calls == [1]


# -- the plan --

N, Q = None, "q"


def starts(plan):
    return [(p.job, p.start) for p in plan.passes]


def test_plan_by_hand_three_signatures():
    plan = plan_passes([(N, N, N, N), (Q, Q, Q, Q), (N, N, Q, N)])
    # sorted: NNNN, NNqN (shares 2 layers with NNNN), qqqq (shares none with NNqN)
    assert starts(plan) == [(0, 0), (2, 2), (1, 0)]
    first, second, third = plan.passes
    assert list(first.keep.values()) == [2] and second.source == next(iter(first.keep)) and second.free == (
        second.source,)
    assert third.source is None and plan.peak_states == 1 and plan.layers_run() == 4 + 2 + 4


SWEEP = [(N, N, N, N), (Q, N, N, N), (N, Q, N, N), (N, N, Q, N), (N, N, N, Q), (Q, Q, Q, Q)]
"""Baseline, only_L0..only_L3, all quantized."""


def test_plan_by_hand_a_sweep_and_its_budgets():
    # sorted: NNNN, NNNq (start 3), NNqN (2), NqNN (1), qNNN (0: shares nothing), qqqq (1, from qNNN)
    # streams: (NNN, 3) kept by pass 0 for pass 1; (NN, 2) 0 -> 2; (N, 1) 0 -> 3; (q, 1) 4 -> 5: 3 alive at pass 0
    plan = plan_passes(SWEEP)
    assert starts(plan) == [(0, 0), (4, 3), (3, 2), (2, 1), (1, 0), (5, 1)]
    assert plan.peak_states == 3 and plan.whole_by_budget == 0
    assert sorted(plan.passes[0].keep.values()) == [1, 2, 3] and list(plan.passes[4].keep.values()) == [1]
    # budget 2: of the three streams alive at once, (N, 1) saves 1 layer to one reader: NqNN runs whole
    assert starts(plan_passes(SWEEP, budget_states=2)) == [(0, 0), (4, 3), (3, 2), (2, 0), (1, 0), (5, 1)]
    # budget 1: then (NN, 2) saves 2 layers, (NNN, 3) 3: NNqN runs whole too
    one = plan_passes(SWEEP, budget_states=1)
    assert starts(one) == [(0, 0), (4, 3), (3, 0), (2, 0), (1, 0), (5, 1)]
    assert one.peak_states == 1 and one.whole_by_budget == 2
    assert [p.start for p in plan_passes(SWEEP, budget_states=0).passes] == [0] * 6
    assert starts(plan_passes(SWEEP, reuse=False)) == [(j, 0) for j in range(6)]


def test_plan_cost_is_a_hand_count():
    plan = plan_passes(SWEEP)  # starts 0, 3, 2, 1, 0, 1: layers run 4 + 1 + 2 + 3 + 4 + 3 = 17
    assert plan.layers_run() == 17
    assert plan.cost([1.0] * 4, 0.5) == pytest.approx(17 + 6 * 0.5)
    # layer l costs l + 1: suffix sums from layer 0..3 are 10, 9, 7, 4
    assert plan.cost([1.0, 2.0, 3.0, 4.0], 10.0) == pytest.approx(10 + 4 + 7 + 9 + 10 + 9 + 6 * 10)


def test_identical_signatures_still_run_the_last_layer():
    plan = plan_passes([(Q, Q), (Q, Q), (N, N)])
    assert starts(plan) == [(2, 0), (0, 0), (1, 1)]


def test_signatures_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="one entry per decoder layer"):
        plan_passes([(N, N), (N,)])


def random_signatures(rng, n_sigs=10, n_layers=6, labels=(0, 1, "x")):
    """The baseline plus random signatures; None three times as likely as a label, so prefixes are shared."""
    choices = [None, None, None, *labels]
    return [(None,) * n_layers] + [tuple(rng.choice(choices) for _ in range(n_layers)) for _ in range(n_sigs - 1)]


def common(a, b):
    n = 0
    while n < len(a) and a[n] == b[n]:
        n += 1
    return n


def replay(plan, sigs):
    """Walk the plan as a runner would: check every read stream and return the peak number alive."""
    n = len(sigs[0])
    alive, peak = {}, 0  # stream id -> (layer, signature of the pass that kept it)
    for p in plan.passes:
        sig = sigs[p.job]
        if p.start:
            assert p.source in alive, "a pass reads a stream no earlier pass kept, or one already freed"
            layer, kept_by = alive[p.source]
            assert layer == p.start and common(kept_by, sig) >= p.start
        else:
            assert p.source is None
        for stream, k in p.keep.items():
            assert stream not in alive and p.start < k < n  # the pass computes layer k - 1
            alive[stream] = (k, sig)
        peak = max(peak, len(alive))
        for stream in p.free:
            del alive[stream]
    assert not alive
    return peak


@pytest.mark.parametrize("seed", range(20))
def test_random_plans_read_only_streams_that_agree_and_keep_to_the_budget(seed):
    rng = random.Random(seed)
    sigs = random_signatures(rng)
    n = len(sigs[0])
    for budget in (None, 0, 1, 2, 3):
        plan = plan_passes(sigs, budget_states=budget)
        assert sorted(p.job for p in plan.passes) == list(range(len(sigs)))
        assert plan.passes[0].start == 0 and sigs[plan.passes[0].job] == (None,) * n
        peak = replay(plan, sigs)
        assert peak == plan.peak_states and (budget is None or peak <= budget)
        if budget == 0:
            assert all(p.start == 0 for p in plan.passes)
        if budget is None:
            # the fewest layers any order can run: each distinct prefix once, and one layer per repeated signature
            prefixes = {s[:d] for s in sigs for d in range(1, n + 1)}
            assert plan.layers_run() == len(prefixes) + len(sigs) - len(set(sigs))
    whole = plan_passes(sigs, reuse=False)
    assert [(p.job, p.start, p.source, p.keep, p.free) for p in whole.passes] == [
        (j, 0, None, {}, ()) for j in range(len(sigs))]
