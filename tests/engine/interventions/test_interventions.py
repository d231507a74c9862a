"""Rank-one edits at a hidden state against independent references: each text alone through a plain forward with
an ordinary hook written here (each edit's formula in float64, on positions >= 1 or on every position), the NLL
summed here from the logits; prefix reuse counted block by block; stacked edits against one at a time; partners'
shared prefixes worked out by hand; pooled states, skipped blocks and token norms against hand hooks (bad inputs:
test_intervention_errors.py)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tiny
from layerscope.engine.forward.batching import collate
from layerscope.engine.forward.pooling import token_nll
from layerscope.engine.interventions.edit_scores import (
    Edit,
    Interventions,
    add,
    oblique,
    project_out,
    set_component,
    token_norms,
)
from layerscope.engine.interventions.edits import edit_positions, editor
from layerscope.errors import ExtractionError
from layerscope.models import decoder_layers

L = 4
D = 32  # tiny models' hidden size
N = len(tiny.TEXTS)
BATCH = 3  # tiny.TEXTS in 4 right-padded batches


def randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def unit_rows(n: int, seed: int, zero: tuple[int, ...] = ()) -> torch.Tensor:
    u = randn(n, D, seed=seed)
    u = u / u.norm(dim=1, keepdim=True)
    u[list(zero)] = 0.0
    return u


def cases(n: int, seed: int) -> dict[str, tuple[Edit, object]]:
    """Each helper's edit and, beside it, the same change written out here: f(h (T, d) float64, i) -> h'."""
    v = randn(n, D, seed=seed, scale=0.7)
    u = unit_rows(n, seed + 1, zero=(3,))  # text 3: a zero row, left as it is
    w, t = unit_rows(n, seed + 2), randn(n, seed=seed + 3, scale=3.0)
    left, right, mu = randn(n, D, seed=seed + 4, scale=0.3), randn(n, D, seed=seed + 5), randn(n, D, seed=seed + 6)
    return {
        "add": (add(v), lambda h, i: h + v[i]),
        "project_out": (project_out(u.numpy()), lambda h, i: h - (h @ u[i])[:, None] * u[i]),
        "set_component": (set_component(w, t), lambda h, i: h + (t[i] - h @ w[i])[:, None] * w[i]),
        "oblique": (oblique(left, right, mu), lambda h, i: h - ((h - mu[i]) @ right[i])[:, None] * left[i]),
    }


def hooked(lm, state: int, change, first: int):
    """An ordinary hook that replaces hidden state ``state`` of a one-text pass by ``change(h)`` at positions >=
    ``first``: a pre-hook on block 0's input for state 0, else a forward hook on block state - 1's output."""
    blocks = decoder_layers(lm.model)

    def edited(h):
        out = h.clone()
        out[0, first:] = change(h[0, first:].double()).to(h.dtype)
        return out

    if state == 0:
        def pre(_m, args, kwargs):
            if args:
                return (edited(args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": edited(kwargs["hidden_states"])}
        return blocks[0].register_forward_pre_hook(pre, with_kwargs=True)

    def post(_m, _args, out):
        return (edited(out[0]), *out[1:]) if isinstance(out, tuple) else edited(out)
    return blocks[state - 1].register_forward_hook(post)


def summed_nll(logits: torch.Tensor, ids: torch.Tensor, start: int = 1) -> float:
    """Minus the log-probability of each token at position >= ``start``, summed (one text, float64)."""
    log_p = F.log_softmax(logits[0, :-1].double(), dim=-1)
    nll = -log_p.gather(1, ids[0, 1:, None])[:, 0]
    return float(nll[start - 1 :].sum())


@torch.no_grad()
def alone(lm, texts, state=None, change=None, first: int = 1, starts=None) -> np.ndarray:
    """Each text alone, a plain forward (hooked with ``change(h, i)`` at ``state`` when given), summed NLL."""
    out = []
    for i, text in enumerate(texts):
        ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
        handle = hooked(lm, state, lambda h, i=i: change(h, i), first) if state is not None else None
        try:
            logits = lm.model(ids).logits
        finally:
            if handle is not None:
                handle.remove()
        out.append(summed_nll(logits, ids, 1 if starts is None else int(starts[i])))
    return np.array(out)


@pytest.mark.parametrize("arch,bos", [(arch, False) for arch in tiny.ARCHS] + [("llama", True)])
def test_each_edit_equals_a_plain_forward_with_a_hand_hook(arch, bos):
    lm = tiny.tiny_lm(arch, adds_bos=bos, n_layers=L)
    iv = Interventions(lm, tiny.TEXTS, batch_size=BATCH)
    everywhere = Interventions(lm, tiny.TEXTS, batch_size=BATCH, include_pos0=True)
    intact = iv.intact()
    np.testing.assert_allclose(intact, alone(lm, tiny.TEXTS), rtol=1e-5)
    assert (iv.score_from == 1).all() and list(iv.n_scored) == [len(lm.tokenizer(t)["input_ids"]) - 1
                                                                 for t in tiny.TEXTS]
    for state in (0, 1, L // 2, L):
        edits = cases(N, seed=10 * state)
        got = iv.run(state, [edit for edit, _ in edits.values()])
        for k, (name, (_edit, change)) in enumerate(edits.items()):
            want = alone(lm, tiny.TEXTS, state, change)
            np.testing.assert_allclose(got[k], want, rtol=1e-5, err_msg=f"{arch} {name} at state {state}")
            assert (~np.isclose(got[k], intact, rtol=1e-4)).sum() >= N // 2, (arch, name, state)  # it does change
            if name == "project_out":
                np.testing.assert_allclose(got[k, 3], intact[3], rtol=1e-6)
        if state in (0, L // 2):  # position 0 edited too: the hand hook from position 0, and other numbers
            all_positions = everywhere.run(state, [edits["add"][0], edits["project_out"][0]])
            for k, name in enumerate(("add", "project_out")):
                want = alone(lm, tiny.TEXTS, state, edits[name][1], first=0)
                np.testing.assert_allclose(all_positions[k], want, rtol=1e-5, err_msg=f"{arch} {name} pos 0")
                assert not np.allclose(all_positions[k], got[k], rtol=1e-4), (arch, name, state)


def test_prefix_reuse_gives_the_same_numbers_and_runs_only_the_blocks_above():
    lm = tiny.tiny_lm("gpt2", n_layers=L)
    iv = Interventions(lm, tiny.TEXTS, batch_size=BATCH)
    n_batches = len(iv.batches)
    assert n_batches == 4
    iv.intact()
    assert iv.blocks_run == L * n_batches and iv.kept == list(range(1, L + 1))
    edit = cases(N, seed=1)["oblique"][0]
    for state in (*range(L + 1), 1):  # back down to 1 at the end: still kept, no intact pass
        before = iv.blocks_run
        reused = iv.run(state, [edit])
        assert iv.blocks_run - before == (L - state if state else L) * n_batches, state
        before = iv.blocks_run
        whole = iv.run(state, [edit], prefix_reuse=False)
        assert iv.blocks_run - before == L * n_batches
        np.testing.assert_allclose(reused, whole, rtol=1e-6, err_msg=f"state {state}")
    assert iv.kept == list(range(1, L + 1)) and iv.kept_bytes == L * iv.scorer.state_bytes


def test_a_small_memory_budget_keeps_a_window_of_states():
    lm = tiny.tiny_lm("llama", n_layers=L)
    whole = Interventions(lm, tiny.TEXTS, batch_size=BATCH)
    iv = Interventions(lm, tiny.TEXTS, batch_size=BATCH, max_kept_bytes=2 * whole.scorer.state_bytes)
    n_batches = len(iv.batches)
    edit = cases(N, seed=2)["project_out"][0]
    blocks = 0
    for state, kept, intact_pass in ((3, [3, 4], True), (4, [3, 4], False), (2, [2, 3], True), (3, [2, 3], False),
                                     (1, [1, 2], True)):
        before = iv.blocks_run
        got = iv.run(state, [edit])
        blocks += (L if intact_pass else 0) + L - state
        assert iv.kept == kept and iv.kept_bytes <= 2 * iv.scorer.state_bytes, state
        assert iv.blocks_run - before == ((L if intact_pass else 0) + L - state) * n_batches, state
        np.testing.assert_array_equal(got, whole.run(state, [edit]))
    before = iv.blocks_run
    iv.skip(2)  # state 2 is kept: L - 3 blocks
    assert iv.blocks_run - before == (L - 3) * n_batches
    iv.drop(2)
    assert iv.kept == [1] and iv.kept_bytes == iv.scorer.state_bytes
    assert iv.blocks_run == blocks * n_batches + (L - 3) * n_batches


def test_stacked_edits_equal_one_at_a_time():
    lm = tiny.tiny_lm("gemma3", n_layers=L)
    short = [t for t in tiny.TEXTS if len(lm.tokenizer(t)["input_ids"]) < 20]  # one batch, room for copies
    n = len(short)
    edits = [edit for seed in (1, 2) for edit, _ in cases(n, seed=seed).values()][:7]
    iv = Interventions(lm, short)
    spread = Interventions(lm, short, batch_size=2)  # several batches, each copied by edits_per_pass
    assert len(iv.batches) == 1 and len(spread.batches) == 4
    iv.intact(), spread.intact()
    for state in (0, 2, L):
        before = iv.blocks_run
        one = iv.run(state, edits, edits_per_pass=1)
        singles = iv.blocks_run - before
        before = iv.blocks_run
        many = iv.run(state, edits)  # as many per forward as the CPU token budget leaves room for
        assert iv.blocks_run - before <= singles // 2, state  # at least two edits per forward
        np.testing.assert_allclose(many, one, rtol=1e-5, err_msg=f"state {state}")
        for per_pass in (1, 3):
            np.testing.assert_allclose(spread.run(state, edits, edits_per_pass=per_pass), one, rtol=1e-5)
        single = iv.run(state, edits[4])  # one Edit, not in a list
        assert single.shape == (1, n)
        np.testing.assert_allclose(single[0], one[4], rtol=1e-5)


PAIRS = [
    "The river carried small boats past the old mill.", "The river carried small boats every morning.",
    "Seven of the twelve students passed.", "Prices rose by four percent.",
    "The committee will review every application.", "The committee will review it, said the chair.",
    "Ice floats.", "Ice floats because water expands as it freezes.",  # a prefix in words, not in tokens
]
PARTNERS = [1, 0, 3, 2, 5, 4, 7, 6]


def shared_start(tokenizer, a: str, b: str) -> int:
    x, y = tokenizer(a)["input_ids"], tokenizer(b)["input_ids"]
    k = 0
    while k < min(len(x), len(y)) and x[k] == y[k]:
        k += 1
    return max(1, k)


@pytest.mark.parametrize("arch,bos", [("llama", False), ("gemma3", True)])
def test_partners_leave_out_the_shared_prefix_and_pref_is_the_full_text_difference(arch, bos):
    lm = tiny.tiny_lm(arch, adds_bos=bos, n_layers=L)
    iv = Interventions(lm, PAIRS, partners=np.array(PARTNERS), batch_size=BATCH)
    starts = [shared_start(lm.tokenizer, PAIRS[i], PAIRS[j]) for i, j in enumerate(PARTNERS)]
    assert iv.score_from.tolist() == starts and max(starts) >= 4 and starts[2] == 1
    lengths = np.array([len(lm.tokenizer(t)["input_ids"]) for t in PAIRS])
    assert (iv.n_scored == lengths - np.array(starts)).all()
    a, b = np.arange(0, len(PAIRS), 2), np.arange(1, len(PAIRS), 2)
    v = randn(len(PAIRS) // 2, D, seed=5).repeat_interleave(2, dim=0)  # the same vector for both texts of a pair
    for state, change, got in ((None, None, iv.intact()),
                               (2, lambda h, i: h + v[i], iv.run(2, [add(v)])[0])):
        np.testing.assert_allclose(got, alone(lm, PAIRS, state, change, starts=starts), rtol=1e-5)
        full = alone(lm, PAIRS, state, change)
        np.testing.assert_allclose(got[b] - got[a], full[b] - full[a], rtol=1e-4)
        assert not np.allclose(got, full, rtol=1e-3)  # the shared prefix is left out


@pytest.mark.parametrize("texts,partners,named", [
    (["Ice floats.", "Ice floats."], [1, 0], ("text 0", "text 1")),
    (["The river carried", "The river carried small boats."], [1, 0], ("text 0", "text 1")),
    (["Ice floats.", "The cat sat", "The cat sat on the mat."], [-1, 2, 1], ("text 1", "text 2")),
])
def test_a_text_with_nothing_after_its_shared_start_is_a_clear_error(texts, partners, named):
    lm = tiny.tiny_lm("llama", n_layers=L)
    with pytest.raises(ExtractionError, match="differ after their shared start") as error:
        Interventions(lm, texts, partners=partners)
    assert all(name in str(error.value) for name in named)


def test_captured_states_equal_a_hand_hooks_mean_over_positions_from_one():
    lm = tiny.tiny_lm("llama", n_layers=L)
    iv = Interventions(lm, tiny.TEXTS, batch_size=BATCH)
    for state, capture in ((0, (0, 1, L)), (2, (2, 3, L)), (L, (L,))):
        edits = cases(N, seed=state)
        names = ("add", "oblique", "project_out")
        nll, pooled = iv.run(state, [edits[name][0] for name in names], capture=capture)
        _, stacked = iv.run(state, [edits[name][0] for name in names], capture=capture, prefix_reuse=False,
                            edits_per_pass=2)
        assert nll.shape == (3, N) and pooled.shape == (3, len(capture), N, D) and pooled.dtype == np.float32
        np.testing.assert_allclose(stacked, pooled, rtol=1e-5, atol=1e-5)
        for k, name in enumerate(names):
            for i, text in enumerate(tiny.TEXTS):
                seen = states_of(lm, text, capture, state, lambda h, i=i, change=edits[name][1]: change(h, i))
                for j, s in enumerate(capture):
                    want = seen[s][0, 1:].double().mean(dim=0).numpy()
                    np.testing.assert_allclose(pooled[k, j, i], want, rtol=1e-5, atol=1e-5,
                                               err_msg=f"{name} at {state}, state {s}, text {i}")


@torch.no_grad()
def states_of(lm, text: str, states, edited: int | None = None, change=None) -> dict[int, torch.Tensor]:
    """Hidden states of one text alone, from ordinary hooks: state 0 from block 0's input, s from block s - 1's
    output; with ``change``, state ``edited`` replaced at positions >= 1 first (its hook registered first)."""
    blocks = decoder_layers(lm.model)
    seen = {}
    handles = [hooked(lm, edited, change, 1)] if change is not None else []
    if 0 in states:
        handles.append(blocks[0].register_forward_pre_hook(
            lambda _m, args, kwargs: seen.__setitem__(0, args[0] if args else kwargs["hidden_states"]),
            with_kwargs=True))
    for s in (s for s in states if s > 0):
        handles.append(blocks[s - 1].register_forward_hook(
            lambda _m, _a, out, s=s: seen.__setitem__(s, out[0] if isinstance(out, tuple) else out)))
    try:
        lm.model(lm.tokenizer(text, return_tensors="pt")["input_ids"])
    finally:
        for handle in handles:
            handle.remove()
    return seen


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma3"])
def test_skip_equals_a_forward_whose_block_returns_its_input(arch):
    lm = tiny.tiny_lm(arch, n_layers=L)
    iv = Interventions(lm, tiny.TEXTS, batch_size=BATCH)
    n_batches = len(iv.batches)
    intact = iv.intact()
    for block in range(L):
        def identity(_m, args, kwargs, out):
            hidden = args[0] if args else kwargs["hidden_states"]
            return (hidden, *out[1:]) if isinstance(out, tuple) else hidden

        handle = decoder_layers(lm.model)[block].register_forward_hook(identity, with_kwargs=True)
        try:
            want = alone(lm, tiny.TEXTS)
        finally:
            handle.remove()
        before = iv.blocks_run
        got = iv.skip(block)
        assert iv.blocks_run - before == (L - 1 - block if block else L - 1) * n_batches, block
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{arch} skip {block}")
        np.testing.assert_allclose(iv.skip(block, prefix_reuse=False), got, rtol=1e-6)
        assert not np.allclose(got, intact, rtol=1e-3)


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_token_norms_equal_a_hand_loop_over_hidden_states(arch):
    lm = tiny.tiny_lm(arch, n_layers=L)
    for include_pos0 in (False, True):
        sums, counts = token_norms(lm, tiny.TEXTS, include_pos0=include_pos0, batch_size=BATCH)
        assert sums.shape == (N, L + 1) and sums.dtype == np.float64 and counts.dtype == np.int64
        first = 0 if include_pos0 else 1
        for i, text in enumerate(tiny.TEXTS):
            ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
            with torch.no_grad():
                hidden = lm.model(ids, output_hidden_states=True).hidden_states  # [L]: after the final norm
            states = [*hidden[:L], states_of(lm, text, [L])[L]]  # state L from a hook on the last block
            want = [float(h[0, first:].double().norm(dim=-1).sum()) for h in states]
            np.testing.assert_allclose(sums[i], want, rtol=1e-5, err_msg=f"{arch} text {i}")
            assert counts[i] == ids.shape[1] - first


def test_scoring_from_a_position_and_the_edited_positions_do_not_depend_on_the_padding_side():
    ids = [[5, 6, 7, 8, 9], [5, 6, 7], [11, 12, 13, 14]]
    starts = torch.tensor([3, 1, 2])
    vocab = 20
    per_text = [randn(len(x), vocab, seed=i).float() for i, x in enumerate(ids)]
    by_side = {}
    for side in ("left", "right"):
        batch = collate(ids, np.arange(3), pad_id=0, side=side)
        logits = torch.full((3, 5, vocab), float("nan"))
        for r, x in enumerate(per_text):
            logits[r, int(batch.first[r]) : int(batch.first[r]) + len(x)] = x
        total, count = token_nll(logits, batch, start=starts)
        where = edit_positions(batch)
        positions = [(torch.nonzero(where[r])[:, 0] - batch.first[r]).tolist() for r in range(3)]
        by_side[side] = (total, count, positions)
    for r, x in enumerate(per_text):
        want = summed_nll(x[None], torch.tensor([ids[r]]), int(starts[r]))
        assert float(by_side["left"][0][r]) == pytest.approx(want, rel=1e-6)
        assert by_side["left"][1][r] == len(ids[r]) - int(starts[r])
    torch.testing.assert_close(by_side["left"][0], by_side["right"][0])
    assert by_side["left"][2] == by_side["right"][2] == [list(range(1, len(x))) for x in ids]


def test_an_edit_of_bfloat16_states_is_computed_in_float32_and_rounded_once():
    R, T = 3, 6
    x = randn(R, T, D, seed=7, scale=3.0)
    x[:, :, 0] += 400.0  # a massive dimension: a bfloat16 dot product with it loses the edited component
    u = randn(R, D, seed=8)
    u[:, 0] += 3.0
    u = u / u.norm(dim=1, keepdim=True)
    hidden = x.bfloat16()
    where = torch.ones(R, T, dtype=torch.bool)
    where[:, 0] = False
    out = editor(torch.stack([u, u, torch.zeros_like(u), 0.5 * u], dim=1).float(), where)(hidden)
    h = hidden.double()
    exact = h - torch.einsum("rtd,rd->rt", h, u)[..., None] * u[:, None] + 0.5 * u[:, None]
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, torch.where(where[..., None], exact, h).bfloat16())
