"""The tuned lens's pieces against independent computations: the held-out split keeps a group on one side (and
the default corpus a model-written sample with its source text, through to the trained lens), a held-out position
is dropped exactly when a training text starts with its prefix (a naive loop over every training prefix), the
least-squares start is numpy's lstsq of the ridge problem written out (and the trained lens's start that fit on
every position but 0, from unbatched forward passes), the shortlist KL is the full KL by hand (and its sampled
estimate, log-Q weights checked by hand, averages to it), the bfloat16 head agrees with float32, and a step larger
than the corpus repeats the rows evenly."""

import math

import numpy as np
import pytest
import torch

import tiny
from atlas_reference import reference
from layerscope.data.texts import load_texts
from layerscope.engine.forward.batching import tokenize
from layerscope.engine.lenses import tuned_cache
from layerscope.engine.lenses.logit import final_norm
from layerscope.engine.lenses.tuned_fit import Shortlist, head_dtype, least_squares_start, shortlist_kl
from layerscope.engine.lenses.tuned_rows import LensRows, cache_rows, target_terms
from layerscope.engine.lenses.tuned_split import PrefixTrie, distinct_rows, split_holdout, unseen_positions
from layerscope.engine.lenses.tuned_train import _row_batches, train_tuned_lens

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- the split ---------------------------------------------------------------------------------------------------

def planted_corpus():
    """(texts, groups): 15 pairs whose two statements share their opening (group = pair index), then one
    model-sample-like text per statement that repeats its first words (grouped with its source)."""
    subjects = ["the river", "the market", "our team", "the garden", "the library"]
    texts, groups = [], []
    for i in range(15):
        opening = f"Without doubt {subjects[i % 5]} grew in {1900 + i}"
        texts += [f"{opening}, they said.", f"{opening}, a little, some say."]
        groups += [i, i]
    for j in range(len(texts)):
        texts.append(" ".join(texts[j].split()[:2]) + f" sampled words {j}")
        groups.append(groups[j])
    return texts, groups


@pytest.mark.parametrize("holdout", [0.1, 0.25, 0.5])
def test_split_never_puts_a_group_on_both_sides(holdout):
    texts, groups = planted_corpus()
    n_groups = len(set(groups))
    seen_held = set()
    for seed in range(200):
        train, held = split_holdout(texts, holdout, seed, groups)
        assert sorted(train + held) == list(range(len(texts))) and train == sorted(train) and held == sorted(held)
        train_groups, held_groups = {groups[i] for i in train}, {groups[i] for i in held}
        assert not train_groups & held_groups, (seed, train_groups & held_groups)
        # every text of a held-out group is held out (a pair's partner and its samples with it)
        assert held == [i for i, g in enumerate(groups) if g in held_groups]
        assert len(held_groups) == min(n_groups - 1, max(1, round(holdout * n_groups)))
        seen_held |= held_groups
    assert seen_held == set(groups)  # the seed moves the split: every group is held out by some seed


def test_split_without_groups_is_one_group_per_text():
    texts = [f"text {i}" for i in range(20)]
    assert split_holdout(texts, 0.1, 5) == split_holdout(texts, 0.1, 5, groups=list(range(20)))
    with pytest.raises(ValueError, match="one label per text"):
        split_holdout(texts, 0.1, 0, groups=[0] * 19)
    assert split_holdout(["only"], 0.1, 0) == ([0], [])  # never everything held out


def naive_prefixes(texts):
    return {tuple(x[:j]) for x in texts for j in range(1, len(x) + 1)}


def test_unseen_positions_match_a_naive_prefix_loop():
    rng = np.random.default_rng(0)
    for trial in range(20):
        vocab = 2 + trial % 3  # few token ids: prefixes collide often
        train = [list(rng.integers(0, vocab, rng.integers(1, 7))) for _ in range(rng.integers(0, 25))]
        held = [list(rng.integers(0, vocab, rng.integers(1, 9))) for _ in range(30)]
        held += [list(t) for t in train[:3]] + [list(t) + [0, 1] for t in train[3:5]] + [[]]  # edge cases
        prefixes = naive_prefixes(train)
        got = unseen_positions(train, held)
        assert len(got) == len(held)
        for ids, keep in zip(held, got, strict=True):
            want = [tuple(ids[: t + 1]) not in prefixes for t in range(len(ids) - 1)]
            assert keep.dtype == bool and keep.tolist() == want, (trial, ids)
        assert len(PrefixTrie(train)) == len(prefixes)
        scored = {tuple(x[: t + 1]) for x in train for t in range(len(x) - 1)}
        assert distinct_rows(train) == len(scored)


def test_unseen_positions_on_planted_ids():
    train = [[5, 6, 7, 8], [5, 9], [1, 2, 3]]
    held = [[5, 6, 7, 8, 4, 4],  # starts with a whole training text: positions 0..3 seen
            [5, 6, 1, 1],        # shares [5, 6]: positions 0, 1 seen
            [9, 5, 6, 7],        # the training tokens, but not at the start: nothing seen
            [1, 2],              # a prefix of a training text: its one position seen
            [7]]                 # no scored position
    got = [k.tolist() for k in unseen_positions(train, held)]
    assert got == [[False, False, False, False, True], [False, False, True], [True, True, True], [False], []]


def caught_samples(monkeypatch):
    """A list that fills with the (source index, text) pairs :func:`.tuned_cache.model_samples` hands back."""
    real, caught = tuned_cache.model_samples, []

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        caught.extend(out)
        return out

    monkeypatch.setattr(tuned_cache, "model_samples", spy)
    return caught


def test_the_default_corpus_keeps_every_model_sample_on_its_source_texts_side(monkeypatch):
    """Each text the model writes in the default corpus shares its source's first two tokens (its state rows there
    are copies of the source's), so the held-out split must never put a sample on the other side from its source:
    the samples are caught as ``model_samples`` hands them back (source index, text), the split is redone by seed."""
    caught = caught_samples(monkeypatch)
    lm = tiny.tiny_lm("llama")
    texts, groups, _ = tuned_cache.default_corpus(lm, seed=0, new_tokens=2)
    bundled = list(load_texts(None).texts)
    assert texts[: len(bundled)] == bundled and len(groups) == len(texts)
    samples = [(source, text) for source, text in caught if text.strip()]
    assert len(samples) > 0.9 * len(bundled) and len(texts) == len(bundled) + len(samples)
    for k, (source, text) in enumerate(samples):
        i = len(bundled) + k
        assert texts[i] == text and groups[i] == groups[source], (i, source, text)
    held_some = 0
    for seed in range(40):
        train, held = split_holdout(texts, 0.1, seed, groups)
        side = {i: "held" for i in held} | {i: "train" for i in train}
        for k, (source, _) in enumerate(samples):
            assert side[len(bundled) + k] == side[source], (seed, source)
        held_some += any(side[len(bundled) + k] == "held" for k in range(len(samples)))
    assert held_some == 40  # every split holds some samples out (with their sources)


def test_a_lens_trained_on_the_default_corpus_fits_no_sample_whose_source_is_held_out(monkeypatch, tmp_path):
    """``trained_lens`` without texts: the default corpus and its groups, through to the split the training uses.
    The least-squares start reports every training text with a row past position 0 (``on_step(-1, texts)``); a
    sample and its source (both of 3 tokens or more) are there together or not at all."""
    caught = caught_samples(monkeypatch)
    lm = tiny.tiny_lm("llama")
    fitted = []
    lens, _, trained_now = tuned_cache.trained_lens(
        lm, out=tmp_path / "lens", steps=1, tokens_per_step=64, progress=False,
        on_step=lambda step, index: fitted.append(set(index.tolist())) if step < 0 else None)
    assert trained_now and len(fitted) == 1
    bundled = list(load_texts(None).texts)
    samples = [(source, text) for source, text in caught if text.strip()]
    long = lambda text: len(lm.tokenizer(text)["input_ids"]) >= 3  # noqa: E731
    pairs = [(source, len(bundled) + k) for k, (source, text) in enumerate(samples)
             if long(bundled[source]) and long(text)]
    assert len(pairs) > 0.8 * len(bundled)
    split = [(source in fitted[0], sample in fitted[0]) for source, sample in pairs]
    assert all(a == b for a, b in split), [p for p, (a, b) in zip(pairs, split, strict=True) if a != b][:5]
    assert (False, False) in split and (True, True) in split  # some pairs held out, some trained on
    assert lens.record["corpus"]["heldout_texts"] > 0


# -- the least-squares start -------------------------------------------------------------------------------------

def hand_ridge(h, t, ridge):
    """W, b by numpy's lstsq: targets rescaled to their input row's RMS, residual r = t - h regressed on [h, 1]
    with sqrt(ridge * n * s2) * I rows appended for W (the bias column unpenalised)."""
    n, d = h.shape
    rms = lambda a: np.sqrt((a ** 2).mean(axis=1, keepdims=True))  # noqa: E731
    r = t * (rms(h) / rms(t)) - h
    s2 = ((h - h.mean(axis=0)) ** 2).sum() / (n * d)
    a = np.hstack([h, np.ones((n, 1))])
    penalty = np.hstack([math.sqrt(ridge * n * s2) * np.eye(d), np.zeros((d, 1))])
    x, *_ = np.linalg.lstsq(np.vstack([a, penalty]), np.vstack([r, np.zeros((d, d))]), rcond=None)
    return x[:d].T, x[d]


@pytest.mark.parametrize("ridge", [1e-3, 0.3])
def test_least_squares_start_is_numpys_lstsq_of_the_ridge_problem(ridge):
    rng = np.random.default_rng(1)
    n, d = 40, 5
    h = rng.normal(size=(n, d)) * rng.uniform(0.5, 3, size=(n, 1)) + rng.normal(size=d)
    t = rng.normal(size=(n, d)) * 4 + h @ rng.normal(size=(d, d))
    weight, bias = least_squares_start(torch.from_numpy(h), torch.from_numpy(t), ridge)
    want_w, want_b = hand_ridge(h, t, ridge)
    assert weight.dtype == bias.dtype == torch.float64 and weight.shape == (d, d) and bias.shape == (d,)
    np.testing.assert_allclose(weight.numpy(), want_w, rtol=0, atol=1e-8)
    np.testing.assert_allclose(bias.numpy(), want_b, rtol=0, atol=1e-8)
    # the final norm forgets a row's scale, so does the fit
    again = least_squares_start(torch.from_numpy(h), torch.from_numpy(t * rng.uniform(0.1, 10, size=(n, 1))), ridge)
    np.testing.assert_allclose(again[0].numpy(), want_w, atol=1e-8)


def test_least_squares_start_recovers_an_exact_affine_map():
    """Data made by an exact affine map ``t = h + h W0^T + b0`` whose rows keep their input's norm (each input row
    scaled so that |t| = |h|), so the rescaling changes nothing: with ridge -> 0 the fit is the map."""
    rng = np.random.default_rng(2)
    n, d = 60, 6
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    w0, b0 = 0.5 * q - np.eye(d), rng.normal(size=d)  # h + h W0^T = 0.5 h Q^T: a contraction, so a scale exists
    h = []
    for _ in range(n):
        x = rng.normal(size=d)
        u = x + x @ w0.T
        # |lam u + b0|^2 = lam^2 |x|^2: lam^2 (|u|^2 - |x|^2) + 2 lam u.b0 + |b0|^2 = 0, the positive root
        lam = max(np.roots([u @ u - x @ x, 2 * u @ b0, b0 @ b0]).real)
        h.append(lam * x)
    h = np.array(h)
    t = h + h @ w0.T + b0
    np.testing.assert_allclose(np.linalg.norm(t, axis=1), np.linalg.norm(h, axis=1), rtol=1e-10)
    weight, bias = least_squares_start(torch.from_numpy(h), torch.from_numpy(t), ridge=1e-12)
    np.testing.assert_allclose(weight.numpy(), w0, atol=1e-6)
    np.testing.assert_allclose(bias.numpy(), b0, atol=1e-6)
    strong, _ = least_squares_start(torch.from_numpy(h), torch.from_numpy(t), ridge=1e3)
    assert float(strong.abs().max()) < 0.05 * float(np.abs(w0).max())  # a strong ridge pulls W toward 0


def test_the_least_squares_start_is_lstsq_on_every_position_but_the_first():
    """With the KL steps frozen (one Adam step at learning rate 0) the lens is its least-squares start; it equals
    numpy's lstsq of the ridge problem on the rows of every scored position except position 0 (the attention
    sink), each text run alone here, the target the last block's output (caught by a forward hook)."""
    lm = tiny.tiny_lm("llama")
    texts = tiny.TEXTS + tiny.CORPUS
    lens = train_tuned_lens(lm, texts, holdout=0.0, steps=1, lr=0.0, seed=0, progress=False)
    assert lens.record["init"] == "lstsq" and lens.record["ridge"] == 1e-3
    ref = reference(lm, texts)
    n_layers = lm.info.n_layers
    for layer in range(n_layers):
        h, t, h0, t0 = [], [], [], []
        for r in ref:
            for k in range(len(r["ids"]) - 1):  # position k is scored: it has a next token
                (h if k > 0 else h0).append(r["states"][layer][k])
                (t if k > 0 else t0).append(r["states"][n_layers][k])
        want_w, want_b = hand_ridge(np.array(h), np.array(t), 1e-3)
        got = lens.translators[layer]
        np.testing.assert_allclose(got.weight.detach().double().numpy(), want_w, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got.bias.detach().double().numpy(), want_b, rtol=0, atol=1e-6)
        with_first, first_b = hand_ridge(np.array(h0 + h), np.array(t0 + t), 1e-3)  # what position 0 would do
        assert max(np.abs(with_first - want_w).max(), np.abs(first_b - want_b).max()) > 1e-3, layer


# -- the shortlist KL --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_rows():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    lm = tiny.tiny_lm("llama")
    ids = tokenize(lm.tokenizer, tiny.TEXTS[:6])
    yield lm, ids, cache_rows(lm, ids, progress=False)
    torch.set_num_threads(threads)


def head_terms(lm, rows):
    """(n_layers, head weight, the rows' target terms, the final norm, the whole-vocabulary shortlist)."""
    weight = lm.model.lm_head.weight
    terms = target_terms(weight, rows.states[lm.info.n_layers], top_k=4)
    return lm.info.n_layers, weight, terms, final_norm(lm), Shortlist.everything(weight.shape[0])


@torch.no_grad()
def test_shortlist_kl_with_every_token_is_the_full_kl_by_hand(tiny_rows):
    lm, ids, rows = tiny_rows
    n_layers, weight, terms, norm, everything = head_terms(lm, rows)
    outs = [lm.model(input_ids=torch.tensor([x]), output_hidden_states=True, use_cache=False) for x in ids]
    for layer in range(n_layers):
        got = shortlist_kl(norm(rows.states[layer]).float(), terms.mu, terms.neg_entropy, weight, everything)
        want = []
        for text, pos in zip(rows.texts.tolist(), rows.positions.tolist(), strict=True):
            out = outs[text]  # one text alone, no padding
            log_p = torch.log_softmax(out.logits[0, pos].double(), -1)  # the model's own next-token distribution
            lens = lm.model.model.norm(out.hidden_states[layer][0, pos]).double() @ weight.double().T
            log_q = torch.log_softmax(lens, -1)
            want.append(float((log_p.exp() * (log_p - log_q)).sum()))
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
        assert min(want) > 1e-3  # the lens is not the model: a real KL is compared


def small_problem(seed=0, vocab=40, d=6, n=5):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, d, generator=g, dtype=torch.float64)
    final = torch.randn(n, d, generator=g, dtype=torch.float64)
    x = final + 0.7 * torch.randn(n, d, generator=g, dtype=torch.float64)
    log_p = torch.log_softmax(final @ weight.T, -1)
    p = log_p.exp()
    full_kl = (p * (log_p - torch.log_softmax(x @ weight.T, -1))).sum(-1)
    return weight, final, x, p, (p * log_p).sum(-1), p @ weight, full_kl


def test_shortlist_kl_with_sampled_negatives_averages_to_the_full_kl():
    weight, final, x, p, neg_entropy, mu, full_kl = small_problem()
    args = (x.float(), mu.float(), neg_entropy.float(), weight.float())
    exact = shortlist_kl(*args, Shortlist.everything(weight.shape[0]))
    np.testing.assert_allclose(exact.numpy(), full_kl.numpy(), rtol=1e-5, atol=1e-5)
    top = p.topk(2, dim=-1).indices
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([shortlist_kl(*args, Shortlist.draw(top, p.mean(0), 256, g)) for _ in range(2000)]).double()
    assert float(draws.std(0).max()) > 1e-2  # the negatives are random: the estimates differ
    # the log-Q weighted sum estimates the normaliser Z without bias: exp of the estimate's log Z term
    z = torch.logsumexp(x @ weight.T, -1).exp()
    z_hat = (draws - neg_entropy + (x * mu).sum(-1)).exp()
    np.testing.assert_allclose(z_hat.mean(0).numpy(), z.numpy(), rtol=0.02)
    # so the KL estimate averages to the full KL, less Jensen's small bias (E log Z_hat <= log Z: 2 % here)
    np.testing.assert_allclose(draws.mean(0).numpy(), full_kl.numpy(), rtol=0.05)


def test_negatives_are_drawn_from_the_renormalised_proposal_with_log_q_weights():
    proposal = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.05, 0.2], dtype=torch.float64)
    positives = torch.tensor([[3, 1], [1, 1]])
    m = 5
    short = Shortlist.draw(positives, proposal, m, torch.Generator().manual_seed(1))
    assert short.ids[:2].tolist() == [1, 3] and short.log_weights[:2].tolist() == [0.0, 0.0]
    q = {0: 0.1 / 0.65, 2: 0.3 / 0.65, 4: 0.05 / 0.65, 5: 0.2 / 0.65}  # tokens 1 and 3 taken out, renormalised
    negatives = short.ids[2:].tolist()
    assert len(negatives) == m and set(negatives) <= set(q)
    for v, log_w in zip(negatives, short.log_weights[2:].tolist(), strict=True):
        assert log_w == pytest.approx(-math.log(m * q[v]), rel=1e-6)
    many = Shortlist.draw(positives, proposal, 40000, torch.Generator().manual_seed(2)).ids[2:]
    freq = torch.bincount(many, minlength=6).double() / len(many)
    np.testing.assert_allclose(freq.numpy(), [q.get(v, 0.0) for v in range(6)], atol=0.01)
    assert Shortlist.draw(positives, proposal, 0).ids.tolist() == [1, 3]  # no negatives asked for
    assert Shortlist.draw(torch.arange(6), proposal, 5).ids.tolist() == list(range(6))  # every token a positive


# -- the bfloat16 head -------------------------------------------------------------------------------------------

@torch.no_grad()
def test_bfloat16_head_agrees_with_float32_on_the_loss(tiny_rows):
    lm, _, rows = tiny_rows
    n_layers, weight, terms, norm, everything = head_terms(lm, rows)
    for layer in range(n_layers):
        x = norm(rows.states[layer]).float()
        loss32 = float(shortlist_kl(x, terms.mu, terms.neg_entropy, weight.float(), everything).mean())
        loss16 = float(shortlist_kl(x, terms.mu, terms.neg_entropy, weight.bfloat16(), everything).mean())
        assert loss16 == pytest.approx(loss32, rel=1e-2), layer  # bf16 products, float32 loss: within 1 %
    assert head_dtype("float32", "cpu") == torch.float32 and head_dtype("bfloat16", "cpu") == torch.bfloat16
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        head_dtype("float16", "cpu")


def test_training_with_a_bfloat16_head_starts_at_the_float32_loss():
    lm = tiny.tiny_lm("llama")
    runs = {dtype: train_tuned_lens(lm, tiny.TEXTS, steps=2, tokens_per_step=32, init="zeros", shortlist=False,
                                    head_dtype=dtype, seed=0, progress=False)
            for dtype in ("float32", "bfloat16")}
    assert {d: r.record["head_dtype"] for d, r in runs.items()} == {"float32": "float32", "bfloat16": "bfloat16"}
    assert runs["bfloat16"].record["first_loss"] == pytest.approx(runs["float32"].record["first_loss"], rel=1e-2)


# -- steps larger than the corpus ---------------------------------------------------------------------------------

def test_a_step_larger_than_the_rows_repeats_them_evenly():
    n = 7
    empty = torch.zeros(n, dtype=torch.long)
    rows = LensRows(states=torch.zeros(1, n, 2), pre_norm=torch.zeros(n, 2), texts=torch.arange(n),
                    positions=empty, targets=empty)
    batches = _row_batches(rows, 20, None, np.random.default_rng(0))
    drawn = []
    for k in range(1, 12):
        step = next(batches)
        assert len(step) == 20 and step.min() >= 0 and step.max() < n
        counts = np.bincount(step.numpy(), minlength=n)
        assert counts.min() >= 20 // n - 1 and counts.max() <= 20 // n + 2  # within a step, about equally often
        drawn.append(step.numpy())
        so_far = np.bincount(np.concatenate(drawn), minlength=n)
        assert so_far.max() - so_far.min() <= 1, (k, so_far)  # epochs end to end: every row drawn in turn
