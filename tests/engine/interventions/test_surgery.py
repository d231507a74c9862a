"""Layer interventions against models whose block list was edited by hand (deep copy, new ``nn.ModuleList``),
HF's own ``labels`` loss and per-token formulas written out here; the model left exactly as it was."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM

import tiny
from layerscope.engine.forward.batching import collate, pad_id
from layerscope.engine.interventions.surgery import Intervention, intervened
from layerscope.engine.interventions.surgery_run import measure_interventions
from layerscope.models import decoder_layers

N_LAYERS = 4

# Each intervention with the block order of the hand-edited model that computes the same thing.
CASES = [
    (Intervention.skip(0), [1, 2, 3]),
    (Intervention.skip(3), [0, 1, 2]),
    (Intervention.repeat(1), [0, 1, 1, 2, 3]),
    (Intervention.repeat(3), [0, 1, 2, 3, 3]),
    (Intervention.swap(0), [1, 0, 2, 3]),
    (Intervention.swap(2), [0, 1, 3, 2]),
    (Intervention.prune([2, 0]), [1, 3]),
    (Intervention("prune", (1, 2, 3)), [0]),
]


def edited(model: nn.Module, order: list[int], edit_layer_types: bool = True) -> nn.Module:
    """A deep copy of ``model`` whose decoder blocks are ``order`` (indices into the original list, repeats
    allowed: the same module twice); ``config.layer_types`` (Gemma 3) follows the blocks unless told not to."""
    ref = copy.deepcopy(model)
    blocks = decoder_layers(ref)
    name = next(n for n, m in ref.named_modules() if m is blocks)
    parent, _, attr = name.rpartition(".")
    setattr(ref.get_submodule(parent), attr, nn.ModuleList([blocks[k] for k in order]))
    config = ref.config
    types = getattr(config, "layer_types", None)
    if edit_layer_types and types is not None:
        config.layer_types = [types[k] for k in order]
    config.num_hidden_layers = len(order)  # Llama and Gemma 3 run self.layers[: num_hidden_layers]
    return ref


def padded(lm, texts):
    ids = [lm.tokenizer(t)["input_ids"] for t in texts]
    return collate(ids, list(range(len(texts))), pad_id(lm.tokenizer))


@torch.no_grad()
def logits_of(model, batch) -> torch.Tensor:
    """(n_real_tokens, vocab): the logits at every real token of the batch."""
    out = model(**batch.model_inputs(), use_cache=False).logits
    return out[batch.attention_mask.bool()]


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_each_intervention_equals_the_hand_edited_block_list(arch):
    lm = tiny.tiny_lm(arch, n_layers=N_LAYERS)
    batch = padded(lm, tiny.TEXTS[:5])  # right padding, different lengths
    intact = logits_of(lm.model, batch)
    for intervention, order in CASES:
        expected = logits_of(edited(lm.model, order), batch)
        with intervened(lm, intervention):
            got = logits_of(lm.model, batch)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=f"{arch} {intervention.label}")
        assert (got - intact).abs().max() > 1e-3, (arch, intervention.label)  # the intervention does something


@torch.no_grad()
def alone(model, tokenizer, text):
    """One text unpadded: HF's labels loss, next-token log-probabilities (T-1, V) and final states (T-1, d)
    at the positions that predict a next token."""
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    out = model(ids, labels=ids, output_hidden_states=True, use_cache=False)
    return out.loss.item(), out.logits[0, :-1].log_softmax(-1), out.hidden_states[-1][0, :-1], ids.shape[1] - 1


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_measures_equal_labels_loss_and_formulas_on_the_hand_edited_model(arch):
    lm = tiny.tiny_lm(arch, n_layers=N_LAYERS)
    texts = tiny.TEXTS[:6]
    cases = [CASES[0], CASES[2], CASES[5], CASES[6]]  # skip, repeat, swap, prune
    m = measure_interventions(lm, texts, [iv for iv, _ in cases], batch_size=4)  # 2 batches, with padding
    intact = [alone(lm.model, lm.tokenizer, t) for t in texts]
    assert m.n_scored.tolist() == [c for *_, c in intact]
    assert m.intact_nll.tolist() == pytest.approx([loss for loss, *_ in intact], rel=1e-5)
    for intervention, order in cases:
        ref = edited(lm.model, order)
        got = m[intervention]
        for i, text in enumerate(texts):
            loss, log_q, final_q, _ = alone(ref, lm.tokenizer, text)
            _, log_p, final_p, _ = intact[i]
            kl = F.kl_div(log_q, log_p, log_target=True, reduction="none").sum(-1).mean().item()
            agree = (log_p.argmax(-1) == log_q.argmax(-1)).double().mean().item()
            cos = F.cosine_similarity(final_p, final_q, dim=-1).mean().item()
            where = (arch, intervention.label, i)
            assert got.nll[i] == pytest.approx(loss, rel=1e-5), where
            assert got.kl[i] == pytest.approx(kl, rel=1e-5, abs=1e-6), where
            assert got.agreement[i] == pytest.approx(agree, abs=1e-12), where
            assert got.cosine[i] == pytest.approx(cos, rel=1e-5, abs=1e-6), where
        assert got.kl.min() > 0 and got.nll.tolist() != pytest.approx(m.intact_nll.tolist(), rel=1e-3)


def test_a_model_whose_layers_differ_in_kind_keeps_each_blocks_kind():
    """Gemma 3 with sliding and full attention layers: wherever a block runs, it keeps its own mask and rotary
    table, as in a hand-edited model whose ``layer_types`` follow the blocks."""
    tok = tiny.tokenizer(False)
    config = tiny.config("gemma3", len(tok), N_LAYERS)
    config.layer_types = ["sliding_attention", "full_attention", "full_attention", "sliding_attention"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    model.eval()
    lm = type("LM", (), {"tokenizer": tok})()
    batch = padded(lm, tiny.TEXTS[:4])  # longer than the sliding window of 4
    for intervention, order in [(Intervention.swap(0), [1, 0, 2, 3]), (Intervention.skip(1), [0, 2, 3]),
                                (Intervention.repeat(2), [0, 1, 2, 2, 3]), (Intervention.swap(2), [0, 1, 3, 2])]:
        with intervened(model, intervention):
            got = logits_of(model, batch)
        torch.testing.assert_close(got, logits_of(edited(model, order), batch), rtol=1e-5, atol=1e-5)
        if intervention.kind == "swap":  # the kinds do matter here: blocks in swapped slots with swapped kinds
            positional = logits_of(edited(model, order, edit_layer_types=False), batch)
            assert (got - positional).abs().max() > 1e-3, intervention.label


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_the_model_is_restored_exactly_even_when_the_body_raises(arch):
    lm = tiny.tiny_lm(arch, n_layers=N_LAYERS)
    batch = padded(lm, tiny.TEXTS[:3])
    blocks = decoder_layers(lm.model)
    before = logits_of(lm.model, batch)
    for intervention, _ in CASES:
        with intervened(lm, intervention):
            pass
        with pytest.raises(KeyError, match="inside"), intervened(lm, intervention):
            logits_of(lm.model, batch)
            raise KeyError("inside")
        assert all("forward" not in block.__dict__ for block in blocks), intervention.label
        assert torch.equal(logits_of(lm.model, batch), before), intervention.label

    # A forward set on the instance before (as accelerate's hooks do) runs inside and is put back after.
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        return type(blocks[1]).forward(blocks[1], *args, **kwargs)

    blocks[1].forward = wrapped
    with intervened(lm, Intervention.swap(0)):
        swapped = logits_of(lm.model, batch)
    assert calls and blocks[1].__dict__["forward"] is wrapped
    del blocks[1].forward
    with intervened(lm, Intervention.swap(0)):
        torch.testing.assert_close(logits_of(lm.model, batch), swapped, rtol=0, atol=0)
    assert torch.equal(logits_of(lm.model, batch), before)


def test_a_kv_cache_inside_the_with_is_refused():
    lm = tiny.tiny_lm("llama", n_layers=N_LAYERS)
    ids = lm.tokenizer("The cat sat.", return_tensors="pt")["input_ids"]
    with intervened(lm, Intervention.repeat(1)), pytest.raises(RuntimeError, match="use_cache=False"):
        lm.model(ids, use_cache=True)
    assert all("forward" not in block.__dict__ for block in decoder_layers(lm.model))


def test_signature_and_first_changed_layer():
    assert Intervention.skip(2).first_changed_layer == 2
    assert Intervention.repeat(3).first_changed_layer == 3
    assert Intervention.swap(1).first_changed_layer == 1
    assert Intervention.swap(1).layers == (1, 2)
    assert Intervention.prune([5, 2, 7]).first_changed_layer == 2
    # The same set in any order (or with repeats) is the same run; prune {l} is skip l.
    assert Intervention.prune([5, 2, 7]).signature == Intervention.prune((7, 5, 2, 5)).signature
    assert Intervention.prune([4]).signature == Intervention.skip(4).signature
    assert Intervention("swap", (1, 2)) == Intervention.swap(1)
    runs = [Intervention.skip(2), Intervention.repeat(2), Intervention.swap(2), Intervention.prune([2, 3]),
            Intervention.skip(3), Intervention.swap(1)]
    assert len({iv.signature for iv in runs}) == len(runs)
    assert {Intervention.prune([1, 3]).signature: 1}[Intervention.prune([3, 1]).signature] == 1  # hashable
    assert Intervention.swap(1).per_layer(4) == (None, ("swap", (1, 2)), ("swap", (1, 2)), None)
    assert Intervention.skip(0).per_layer(3) == ("skip", None, None) == Intervention.prune([0]).per_layer(3)
    assert Intervention.prune([0, 2]).per_layer(3) == ("skip", None, "skip")
    assert Intervention.repeat(1).per_layer(3) == (None, "repeat", None)


def test_invalid_layers_name_the_valid_range():
    lm = tiny.tiny_lm("gpt2", n_layers=N_LAYERS)
    for intervention, valid in [(Intervention.skip(4), "0..3"), (Intervention.repeat(-1), "0..3"),
                                (Intervention.prune([1, 9]), "0..3"), (Intervention.swap(3), "0..2")]:
        with pytest.raises(ValueError, match=valid.replace(".", r"\.")), intervened(lm, intervention):
            pass
        with pytest.raises(ValueError, match=valid.replace(".", r"\.")):
            measure_interventions(lm, tiny.TEXTS[:2], [Intervention.skip(0), intervention])
    assert all("forward" not in block.__dict__ for block in decoder_layers(lm.model))
    with pytest.raises(ValueError, match="unknown intervention"):
        Intervention("drop", (1,))
    with pytest.raises(ValueError, match="one block"):
        Intervention("repeat", (1, 2))
    with pytest.raises(ValueError, match="neighbouring"):
        Intervention("swap", (1, 3))
    with pytest.raises(ValueError, match="at least one"):
        Intervention.prune([])


class TupleBlock(nn.Module):
    """A block returning ``(hidden, extra)`` with the hidden state passed by keyword, as older decoder loops
    and some remote-code models do."""

    def __init__(self, d: int, scale: float):
        super().__init__()
        self.linear, self.scale = nn.Linear(d, d), scale

    def forward(self, hidden_states, *, bias):
        return hidden_states + self.scale * torch.tanh(self.linear(hidden_states)) + bias, "extra"


class TupleModel(nn.Module):
    """``model(input_ids=...)``: embeddings, blocks read as ``block(hidden_states=h, bias=b)[0]``, a head."""

    def __init__(self, n_layers: int = N_LAYERS, d: int = 8, vocab: int = 11):
        super().__init__()
        torch.manual_seed(0)
        self.config = type("Config", (), {"num_hidden_layers": n_layers})()
        self.embed, self.head = nn.Embedding(vocab, d), nn.Linear(d, vocab)
        self.layers = nn.ModuleList([TupleBlock(d, 1.0 + k) for k in range(n_layers)])

    def get_input_embeddings(self):
        return self.embed

    def forward(self, input_ids, use_cache=False):
        hidden = self.embed(input_ids)
        for block in self.layers:
            hidden = block(hidden_states=hidden, bias=0.1)[0]
        return type("Out", (), {"logits": self.head(hidden)})()


def test_blocks_that_return_tuples_and_take_the_hidden_state_by_keyword():
    model = TupleModel()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        before = model(ids).logits
        for intervention, order in CASES:
            with intervened(model, intervention):
                got = model(ids).logits
            reference = copy.deepcopy(model)
            reference.layers = nn.ModuleList([reference.layers[k] for k in order])
            torch.testing.assert_close(got, reference(ids).logits, rtol=1e-6, atol=1e-6, msg=intervention.label)
        assert torch.equal(model(ids).logits, before)
