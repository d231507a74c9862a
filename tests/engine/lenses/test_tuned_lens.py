"""The tuned lens against hand computations: zero translators are the logit lens exactly, the last state is the
model's own output, training undoes a rotation planted in the residual stream (held-out KL from a plain forward
pass and the KL formula written out), no step trains on a held-out text and the held-out numbers leave out every
training prefix. The folder format: test_tuned_lens_io."""

import math

import numpy as np
import pytest
import torch

import tiny
from layerscope.engine.forward.batching import tokenize
from layerscope.engine.lenses.logit import LensSums, layer_logits, lens_batch
from layerscope.engine.lenses.tuned import TunedLens, scored_states
from layerscope.engine.lenses.tuned_eval import evaluate_lenses
from layerscope.engine.lenses.tuned_train import split_holdout, train_tuned_lens
from layerscope.models import LoadedModel
from layerscope.models.info import decoder_layers

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@torch.no_grad()
def test_step_zero_is_the_logit_lens_exactly(arch):
    lm = tiny.tiny_lm(arch)
    _, _, out = tiny.forward(lm)
    lens = TunedLens.zeros(lm)
    assert len(lens.translators) == lm.info.n_layers
    for layer in range(lm.info.n_layers + 1):
        h = out.hidden_states[layer]
        assert torch.equal(lens.logits(layer, h), layer_logits(lm, layer, h)), layer


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@torch.no_grad()
def test_last_state_is_the_models_output(arch):
    lm = tiny.tiny_lm(arch)
    _, batch, out = tiny.forward(lm)
    lens = tiny.random_translators(TunedLens.zeros(lm))  # translators play no part at state n_layers
    n = lm.info.n_layers
    got = lens.logits(n, out.hidden_states[n])
    real = batch.attention_mask.bool()
    torch.testing.assert_close(got[real], out.logits[real], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(lens.logits(0, out.hidden_states[0]), layer_logits(lm, 0, out.hidden_states[0]))


@torch.no_grad()
def test_scored_states_are_the_models_hidden_states():
    lm = tiny.tiny_lm("llama")
    ids, batch, out = tiny.forward(lm)
    states, scored = scored_states(lm, ids, np.arange(len(ids)))
    assert len(states) == lm.info.n_layers + 1 and len(scored.rows) == sum(len(x) - 1 for x in ids)
    for layer, state in enumerate(states):
        torch.testing.assert_close(state, out.hidden_states[layer][scored.rows, scored.cols], rtol=1e-5, atol=1e-6)


class Rotate(torch.nn.Module):
    """A decoder block whose output is rotated by ``q`` (``undo=False``) or whose input is rotated back first."""

    def __init__(self, inner, q, undo):
        super().__init__()
        self.inner, self.undo = inner, undo
        self.register_buffer("q", q)

    def forward(self, hidden_states, *args, **kwargs):
        if self.undo:
            hidden_states = hidden_states @ self.q.T
        out = self.inner(hidden_states, *args, **kwargs)
        if self.undo:
            return out
        if isinstance(out, tuple):
            return (out[0] @ self.q, *out[1:])
        return out @ self.q


def rotated_lm(state=1):
    """A tiny llama whose residual stream at hidden state ``state`` is rotated by a random orthogonal matrix:
    block ``state - 1`` rotates its output and block ``state`` undoes it before running, so the model computes
    exactly what it did, but the logit lens at ``state`` reads a rotated stream."""
    model = tiny.model("llama", len(tiny.tokenizer(False)), n_layers=3, seed=0)
    q, _ = torch.linalg.qr(torch.randn(32, 32, generator=torch.Generator().manual_seed(7)))
    blocks = decoder_layers(model)
    blocks[state - 1] = Rotate(blocks[state - 1], q, undo=False)
    blocks[state] = Rotate(blocks[state], q, undo=True)
    return LoadedModel.wrap(model, tiny.tokenizer(False), name="tiny-llama-rotated")


def word_texts(n, seed):
    words = " ".join(tiny.CORPUS).replace(",", "").replace(".", "").replace("?", "").split()
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, size=rng.integers(6, 14))) for _ in range(n)]


@torch.no_grad()
def hand_kl(lm, texts, state, weight, bias):
    """Mean over every scored token of KL(final || lens) in nats at ``state``: one text at a time, no padding; the
    state is the input of block ``state`` caught by a hook, the lens ``h + h @ W.T + b`` -> model.norm -> lm_head."""
    total, count = 0.0, 0
    caught = []
    handle = decoder_layers(lm.model)[state].register_forward_pre_hook(lambda _m, args: caught.append(args[0]))
    try:
        for text in texts:
            ids = torch.tensor([lm.tokenizer(text)["input_ids"]])
            logits = lm.model(input_ids=ids, use_cache=False).logits[0, :-1].double()
            h = caught[-1][0, :-1].double()
            lens = lm.model.model.norm((h + h @ weight.double().T + bias.double()).float()).double()
            lens_logits = lens @ lm.model.lm_head.weight.double().T
            log_p, log_q = torch.log_softmax(logits, -1), torch.log_softmax(lens_logits, -1)
            total += float((log_p.exp() * (log_p - log_q)).sum())
            count += len(h)
    finally:
        handle.remove()
    return total / count


@pytest.mark.parametrize("recipe", [
    {"steps": 200, "batch_size": 8, "init": "zeros", "optimizer": "sgd"},  # from the logit lens: the KL steps alone
    {"steps": 200, "batch_size": 8, "init": "zeros", "optimizer": "adam", "lr": 1e-2},
    {},  # the default: the least-squares start, then 40 Adam steps of 512 tokens
], ids=["zeros-sgd", "zeros-adam", "default-lstsq"])
def test_training_undoes_a_planted_rotation(recipe):
    lm = rotated_lm(state=1)
    texts = word_texts(120, seed=0)
    lens = train_tuned_lens(lm, texts, seed=0, holdout=0.1, corpus="random words", **recipe)
    fresh = word_texts(12, seed=99)  # never seen in training
    d = lm.info.hidden_size
    logit_kl = hand_kl(lm, fresh, 1, torch.zeros(d, d), torch.zeros(d))
    t = lens.translators[1]
    tuned_kl = hand_kl(lm, fresh, 1, t.weight.detach(), t.bias.detach())
    assert tuned_kl < 0.5 * logit_kl, (tuned_kl, logit_kl)
    record = lens.record
    steps = recipe.get("steps", 40)
    assert record["steps"] == steps and record["seed"] == 0 and record["init"] == recipe.get("init", "lstsq")
    assert record["optimizer"] == recipe.get("optimizer", "adam") and record["batch_size"] == recipe.get("batch_size")
    assert record["weights_hash"] == lm.info.weights_hash and record["corpus"]["description"] == "random words"
    assert record["corpus"]["heldout_texts"] == 12 and record["finite_loss"]
    if recipe.get("init") == "zeros":
        assert record["last_loss"] < record["first_loss"]
    else:
        assert record["tokens_per_step"] == 512 and record["tokens"]["token_draws"] == 40 * 512
    held = record["heldout"]["metrics"]
    assert held["tuned_kl"][1] < 0.5 * held["logit_kl"][1]
    assert held["tuned_kl"][3] == 0 and held["tuned_ce"][3] == pytest.approx(held["logit_ce"][3])


WORDS = " ".join(tiny.CORPUS).replace(",", "").replace(".", "").replace("?", "").split()


def grouped_corpus(n_groups=12, per_group=3, seed=3):
    """(texts, groups): groups of texts that share their first three words (a pair's statements, a sample that
    repeats its source's opening), one label per group."""
    rng = np.random.default_rng(seed)
    texts, groups = [], []
    for g in range(n_groups):
        opening = " ".join(rng.choice(WORDS, 3))
        for _ in range(per_group):
            texts.append(f"{opening} {' '.join(rng.choice(WORDS, rng.integers(3, 8)))}")
            groups.append(g)
    return texts, groups


@pytest.mark.parametrize("recipe", [{"tokens_per_step": 64}, {"batch_size": 2, "init": "zeros"},
                                    {"tokens_per_step": 32, "max_tokens": 150}], ids=["default", "texts", "max"])
def test_no_step_trains_on_a_held_out_text(recipe):
    lm = tiny.tiny_lm("llama")
    texts, groups = grouped_corpus()
    ids = tokenize(lm.tokenizer, texts)
    for seed in (0, 1):
        seen = []
        lens = train_tuned_lens(lm, texts, groups=groups, steps=5, holdout=0.25, seed=seed, progress=False,
                                on_step=lambda step, index, seen=seen: seen.append((step, set(index.tolist()))),
                                **recipe)
        train, held = split_holdout(texts, 0.25, seed, groups)
        assert held and len({groups[i] for i in held}) == 3
        lstsq = recipe.get("init", "lstsq") == "lstsq"
        assert [step for step, _ in seen] == [-1] * lstsq + list(range(5))
        for step, index in seen:
            assert index and not index & set(held), (seed, step, index & set(held))
            assert index <= set(train)
        if lstsq and "max_tokens" not in recipe:  # the start fits every training text's rows past position 0
            assert seen[0][1] == {i for i in train if len(ids[i]) >= 3}
        if "batch_size" in recipe:
            assert all(len(index) == 2 for step, index in seen)
        if "max_tokens" in recipe:  # whole training texts, as many as fit in 150 rows
            used = set().union(*(index for _, index in seen))
            rows = sum(len(ids[i]) - 1 for i in used)
            assert lens.record["tokens"]["train_rows"] == rows <= 150
            assert rows + min(len(ids[i]) - 1 for i in set(train) - used) > 150  # the next text would not fit
        assert lens.record["corpus"]["heldout_texts"] == len(held)


def shared_opening_corpus(n=30, seed=4):
    """Texts, each its own group, that open with one of three phrases: held-out texts share their first tokens
    with training texts."""
    rng = np.random.default_rng(seed)
    openings = ["The river carried", "Seven of the twelve", "A warm breeze"]
    return [f"{openings[i % 3]} {' '.join(rng.choice(WORDS, rng.integers(3, 8)))}" for i in range(n)]


def test_recorded_heldout_numbers_leave_out_every_training_prefix():
    lm = tiny.tiny_lm("llama")
    texts = shared_opening_corpus()
    lens = train_tuned_lens(lm, texts, steps=3, tokens_per_step=64, holdout=0.2, seed=0, progress=False)
    train, held = split_holdout(texts, 0.2, 0)
    ids = tokenize(lm.tokenizer, texts)
    held_texts = [texts[i] for i in held]
    ev = evaluate_lenses(lm, held_texts, lens, exclude=[ids[i] for i in train], progress=False)
    record = lens.record["heldout"]
    assert set(record["metrics"]) == set(ev.metrics) == {"logit_kl", "logit_ce", "tuned_kl", "tuned_ce"}
    for key, value in ev.metrics.items():
        np.testing.assert_allclose(record["metrics"][key], value, rtol=1e-6, atol=1e-9, err_msg=key)
    prefixes = {tuple(ids[i][:j]) for i in train for j in range(1, len(ids[i]) + 1)}
    unseen = sum(tuple(ids[i][: t + 1]) not in prefixes for i in held for t in range(len(ids[i]) - 1))
    every = sum(len(ids[i]) - 1 for i in held)
    assert record["tokens"] == ev.tokens == lens.record["tokens"]["heldout_rows"] == unseen < every
    plain = evaluate_lenses(lm, held_texts, lens, progress=False)  # shared openings scored too
    assert plain.tokens == every
    assert max(float(np.abs(plain.metrics[k] - np.asarray(record["metrics"][k])).max()) for k in ev.metrics) > 1e-3


def test_a_step_larger_than_the_corpus_repeats_its_rows():
    lm = tiny.tiny_lm("llama")
    texts = tiny.TEXTS[:4]
    ids = tokenize(lm.tokenizer, texts)
    seen = []
    lens = train_tuned_lens(lm, texts, steps=3, tokens_per_step=100, holdout=0.25, seed=0, progress=False,
                            on_step=lambda step, index: seen.append((step, set(index.tolist()))))
    train, held = split_holdout(texts, 0.25, 0)
    rows = sum(len(ids[i]) - 1 for i in train)
    assert len(held) == 1 and 2 * rows < 100
    tokens = lens.record["tokens"]
    assert tokens["train_rows"] == rows and tokens["token_draws"] == 3 * 100 and lens.record["tokens_per_step"] == 100
    assert tokens["distinct_train_rows"] <= rows and lens.record["finite_loss"]
    assert all(index == set(train) for step, index in seen if step >= 0)  # each step holds every row


def test_split_is_seeded_and_disjoint():
    train, held = split_holdout(list("abcdefghijklmnopqrst"), 0.1, seed=3)
    assert len(held) == 2 and not set(train) & set(held) and sorted(train + held) == list(range(20))
    assert (train, held) == split_holdout(list("abcdefghijklmnopqrst"), 0.1, seed=3)


@torch.no_grad()
def test_evaluation_matches_the_logit_lens_sums():
    lm = tiny.tiny_lm("llama")
    ids, batch, out = tiny.forward(lm, tiny.TEXTS)
    sums = LensSums()
    lens_batch(lm, dict(enumerate(out.hidden_states)), batch, sums)
    ev = evaluate_lenses(lm, tiny.TEXTS, TunedLens.zeros(lm), batch_size=4, n_resamples=200)
    want = sums.means()
    np.testing.assert_allclose(ev.metrics["logit_kl"] * math.log(2), want["lens_kl"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ev.metrics["logit_ce"] * math.log(2), want["lens_ce"], rtol=1e-5)
    np.testing.assert_allclose(ev.metrics["tuned_ce"], ev.metrics["logit_ce"], rtol=1e-6)
    lo, hi = ev.intervals["logit_ce"].T
    assert np.all(lo <= ev.metrics["logit_ce"]) and np.all(ev.metrics["logit_ce"] <= hi)
    assert ev.tokens == sum(len(x) - 1 for x in ids) and ev.texts == len(tiny.TEXTS)
