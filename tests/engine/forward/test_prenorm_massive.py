"""The pre-norm capture, the sensitivity poolings and the massive-activation rule, against references built
from plain transformers (the final norm swapped for nn.Identity) and numpy."""

import contextlib
import importlib
import statistics

import numpy as np
import pytest
import torch

import tiny
from layerscope import Activations, ExtractionError, extract
from layerscope.engine.forward.batching import collate
from layerscope.engine.forward.massive import MASSIVE_RATIO, massive_mask, massive_tokens
from layerscope.engine.forward.pooling import ALL_POOLINGS, CHECK_POOLINGS, POOLINGS, no_pos0_mask, pooling_masks
from layerscope.engine.forward.tokens import token_states

extract_module = importlib.import_module("layerscope.engine.forward.extract")  # the package's `extract` is the function

FINAL_NORM = {"llama": "model.norm", "gpt2": "transformer.ln_f", "gpt_neox": "gpt_neox.final_layer_norm",
              "opt": "model.decoder.final_layer_norm", "gemma3": "model.norm"}
CASES = [(arch, bos) for arch in tiny.ARCHS for bos in (False, True)]
IDS = [f"{a}-{'bos' if b else 'nobos'}" for a, b in CASES]
THE = " the"
"""A mid-sentence token of several of tiny.TEXTS, made massive by scaling its embedding."""


def rel_err(got, ref) -> float:
    diff = np.linalg.norm(np.asarray(got) - ref, axis=-1)
    return float(np.max(diff / np.linalg.norm(ref, axis=-1)))


@contextlib.contextmanager
def swapped_final_norm(model, arch, replacement):
    """Replace the model's final norm module by ``replacement``; yields the original norm."""
    parent_name, _, attr = FINAL_NORM[arch].rpartition(".")
    parent = model.get_submodule(parent_name)
    norm = getattr(parent, attr)
    setattr(parent, attr, replacement)
    try:
        yield norm
    finally:
        setattr(parent, attr, norm)


@torch.no_grad()
def reference(lm, arch, text):
    """One text alone, no padding: transformers' hidden states (n_layers + 1, T, d), the states before the
    final norm (T, d) from the same model with that norm replaced by nn.Identity, and the norm module."""
    enc = lm.tokenizer(text, return_tensors="pt")
    hs = np.stack([h[0].numpy() for h in lm.model(**enc, output_hidden_states=True).hidden_states])
    with swapped_final_norm(lm.model, arch, torch.nn.Identity()) as norm:
        pre = lm.model(**enc, output_hidden_states=True).hidden_states[-1][0].numpy()
    return hs, pre, norm


def naive_massive(layers: list[np.ndarray]) -> np.ndarray:
    """(T,) one text's tokens whose largest |x| exceeds 100x the median |x| of all its values, at any layer."""
    flags = np.zeros(len(layers[0]), dtype=bool)
    for layer in layers:
        median = statistics.median(np.abs(layer).ravel().tolist())
        flags |= np.array([max(abs(v) for v in row) > 100 * median for row in layer.tolist()])
    return flags


def boosted_lm(arch="llama"):
    """A tiny model whose " the" embedding is scaled 1000x, so that token is massive at every block output."""
    lm = tiny.tiny_lm(arch, adds_bos=False)
    the = lm.tokenizer(THE, add_special_tokens=False)["input_ids"]
    assert len(the) == 1
    with torch.no_grad():
        lm.model.get_input_embeddings().weight[the[0]] *= 1000.0
    return lm, the[0]


def test_defaults_compute_every_check_pooling():
    assert ALL_POOLINGS == ("mean", "last", "first", "mean_no_pos0", "mean_no_massive")
    assert POOLINGS == ("mean", "last", "first") and CHECK_POOLINGS == ("mean_no_pos0", "mean_no_massive")
    assert MASSIVE_RATIO == 100.0 and extract_module.FORMAT_VERSION == 4  # 4: per-chunk checksums
    acts = extract(tiny.tiny_lm("llama"), tiny.TEXTS[:3], cache=False)
    assert set(acts.pooled) == set(acts.pre_norm) == set(ALL_POOLINGS)
    assert acts.settings.poolings == ALL_POOLINGS
    assert acts.pre_norm["mean"].shape == (3, 32) and acts.pre_norm["mean"].dtype == np.float32
    with pytest.raises(ExtractionError, match="unknown pooling.*mean_no_massive"):
        extract(tiny.tiny_lm("llama"), tiny.TEXTS[:3], poolings=("median",), cache=False)


@pytest.mark.parametrize(("arch", "bos"), CASES, ids=IDS)
def test_pre_norm_is_what_the_final_norm_turns_into_the_last_hidden_state(arch, bos):
    lm = tiny.tiny_lm(arch, adds_bos=bos)
    states = token_states(lm, tiny.TEXTS, batch_size=4)
    acts = extract(lm, tiny.TEXTS, batch_size=4, padding_side="left", cache=False)
    start = 0
    for i, text in enumerate(tiny.TEXTS):
        hs, pre, norm = reference(lm, arch, text)
        block = slice(start, start + len(pre))
        start += len(pre)
        np.testing.assert_allclose(states.pre_norm[block], pre, rtol=1e-4, atol=1e-5)
        with torch.no_grad():  # the model's own final norm on the captured states gives transformers' last state
            normed = norm(torch.from_numpy(states.pre_norm[block])[None])[0].numpy()
        np.testing.assert_allclose(normed, hs[-1], rtol=1e-4, atol=1e-4)
        assert rel_err(pre, hs[-1]) > 0.1  # the norm changes the states: the check above can fail
        first = 1 if bos else 0
        expect = {"mean": pre[first:].mean(axis=0), "mean_no_pos0": pre[1:].mean(axis=0),
                  "mean_no_massive": pre[first:].mean(axis=0), "last": pre[-1], "first": pre[0]}
        for p, ref in expect.items():
            assert rel_err(acts.pre_norm[p][i], ref) < 1e-4, (p, text)
        # mean_no_pos0 at every layer: token 1 onwards, whatever token 0 is
        assert rel_err(acts.pooled["mean_no_pos0"][i], hs[:, 1:].mean(axis=1)) < 1e-4
        assert not naive_massive([*hs[1:-1], pre]).any()  # no massive token: mean_no_massive is the mean
        np.testing.assert_array_equal(acts.pooled["mean_no_massive"][i], acts.pooled["mean"][i])


def test_massive_mask_by_hand_per_text_median_and_padding_never_counts():
    rng = np.random.default_rng(0)
    h = rng.uniform(0.5, 1.5, size=(3, 4, 8)) * rng.choice([-1.0, 1.0], size=(3, 4, 8))
    h[0, 2, 3] = 500.0  # 500x a median near 1: massive
    h[0, 1, 5] = -50.0  # 50x: not
    h[1, 1, 3] = -200.0  # text 1 has two real tokens; its padding would lift the median to 1e4 if it counted
    h[1, 2:] = 1e4
    h[1, 3, 0] = np.nan
    h[2] *= 1000.0  # text 2's median is near 1000: a 50 000 peak is 50x its own median, 100x more than text 0's
    h[2, 0, 1] = 50_000.0
    real = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    expect = [[False, False, True, False], [False, True, False, False], [False, False, False, False]]
    assert massive_mask(torch.tensor(h, dtype=torch.float32), real).tolist() == expect
    rows = real.numpy()
    flat = massive_tokens(h[rows], np.repeat(np.arange(3), rows.sum(axis=1)))
    assert flat.tolist() == [f for row, r in zip(expect, rows, strict=False)
                             for f, keep in zip(row, r, strict=False) if keep]


@pytest.mark.parametrize(("peak", "massive"), [(150.0, False), (250.0, True)])
def test_the_median_is_the_textbook_one(peak, massive):
    """|values| 0.5, 1, 3, peak: median (1 + 3) / 2 = 2, so the cut is 200 (the lower middle value would give 100)."""
    h = np.array([[1.0, -3.0], [0.5, peak]], dtype=np.float32)
    assert massive_mask(torch.tensor(h)[None], torch.ones(1, 2, dtype=torch.bool)).tolist() == [[False, massive]]
    assert massive_tokens(h, np.zeros(2, dtype=int)).tolist() == [False, massive]


@pytest.mark.parametrize(("peak", "massive"), [(100.05, False), (100.15, True)])
def test_a_peak_between_the_two_middle_values_cuts_uses_the_exact_median(peak, massive):
    """|values| 1, 1, 1, 1, 1.002, 1.002, 1.002, peak: middle values 1 and 1.002, median 1.001, cut 100.1; a peak of
    100.05 is above 100x the lower middle value but not above 100x the median."""
    h = np.array([[1.0, -1.0, 1.0, 1.002], [peak, 1.0, -1.002, 1.002]], dtype=np.float32)
    assert massive_mask(torch.tensor(h)[None], torch.ones(1, 2, dtype=torch.bool)).tolist() == [[False, massive]]
    assert massive_tokens(h, np.zeros(2, dtype=int)).tolist() == [False, massive]


def test_torch_and_numpy_rules_agree_with_a_naive_loop_whatever_the_batch():
    rng = np.random.default_rng(1)
    lengths = [7, 3, 12, 5, 9, 1]
    texts = [(rng.lognormal(size=(n, 16)) * rng.choice([-1, 1], size=(n, 16))).astype(np.float32) for n in lengths]
    for t in texts:  # spikes from 20x to 400x
        for _ in range(3):
            t[rng.integers(len(t)), rng.integers(16)] = rng.uniform(20, 400) * np.median(np.abs(t))
    expect = np.concatenate([naive_massive([t]) for t in texts])
    assert 0 < expect.sum() < len(expect)
    flat = massive_tokens(np.concatenate(texts), np.repeat(np.arange(len(texts)), lengths))
    np.testing.assert_array_equal(flat, expect)
    layouts = [("right", [[0, 1, 2, 3, 4, 5]]), ("left", [[2, 5], [0, 1, 3, 4]]), ("right", [[i] for i in range(6)])]
    for side, groups in layouts:
        got = np.zeros(len(expect), dtype=bool)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        for group in groups:
            batch = collate([[1] * lengths[i] for i in group], np.array(group), pad_id=0, side=side)
            hidden = torch.full((len(group), batch.input_ids.shape[1], 16), float("nan"))
            real = batch.attention_mask.bool()
            hidden[real] = torch.from_numpy(np.concatenate([texts[i] for i in group]))
            flags = massive_mask(hidden, real)
            for row, i in enumerate(group):
                got[offsets[i]:offsets[i + 1]] = flags[row][real[row]].numpy()
            assert not (flags & ~real).any()
        np.testing.assert_array_equal(got, expect)


def test_mean_no_massive_falls_back_to_no_pos0_when_every_token_is_massive():
    b = collate([[1, 4, 5], [6, 7, 8], [9, 3]], np.arange(3), pad_id=0)  # text 0 starts with BOS id 1
    massive = torch.tensor([[False, True, True], [False, True, False], [True, True, False]])
    masks = pooling_masks(b, bos_token_id=1, massive=massive)
    real = b.attention_mask.bool()
    assert masks["mean"].tolist() == [[False, True, True], [True, True, True], [True, True, False]]
    assert masks["mean_no_pos0"].tolist() == [[False, True, True], [False, True, True], [False, True, False]]
    # text 0: both mean tokens massive -> its no-pos0 tokens; text 1: token 1 left out; text 2: all massive
    assert masks["mean_no_massive"].tolist() == [[False, True, True], [True, False, True], [False, True, False]]
    assert torch.equal(no_pos0_mask(b), masks["mean_no_pos0"]) and not (masks["mean_no_massive"] & ~real).any()
    assert "mean_no_massive" not in pooling_masks(b, bos_token_id=1)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_mean_no_massive_leaves_out_a_boosted_token_by_the_numpy_rule(arch):
    lm, the = boosted_lm(arch)
    acts = extract(lm, tiny.TEXTS, batch_size=4, cache=False)
    boosted_texts = 0
    for i, text in enumerate(tiny.TEXTS):
        hs, pre, _ = reference(lm, arch, text)
        ids = np.array(lm.tokenizer(text)["input_ids"])
        flags = naive_massive([*hs[1:-1], pre])
        assert flags[ids == the].all()  # the boosted token is massive wherever it occurs
        boosted_texts += bool((ids == the).any())
        keep = ~flags if (~flags).any() else np.arange(len(ids)) > 0
        assert rel_err(acts.pooled["mean_no_massive"][i], hs[:, keep].mean(axis=1)) < 1e-4, text
        assert rel_err(acts.pre_norm["mean_no_massive"][i], pre[keep].mean(axis=0)) < 1e-4, text
        if flags.any():
            assert rel_err(acts.pooled["mean_no_massive"][i], acts.pooled["mean"][i]) > 0.01
    assert boosted_texts >= 3


def test_massive_flags_do_not_depend_on_batch_size_or_padding():
    lm, _ = boosted_lm("llama")
    runs = [extract(lm, tiny.TEXTS, batch_size=size, padding_side=side, cache=False)
            for size, side in [(1, "right"), (3, "left"), (11, "right"), (11, "left")]]
    for run in runs[1:]:
        for p in ALL_POOLINGS:
            assert rel_err(run.pooled[p], runs[0].pooled[p]) < 1e-4, p
            assert rel_err(run.pre_norm[p], runs[0].pre_norm[p]) < 1e-4, p


def test_token_states_massive_and_select_keep_pre_norm():
    lm, the = boosted_lm("llama")
    states = token_states(lm, tiny.TEXTS, batch_size=3)
    flags = states.massive()
    expect = np.concatenate([naive_massive([*hs[1:-1], pre])
                             for hs, pre, _ in (reference(lm, "llama", t) for t in tiny.TEXTS)])
    np.testing.assert_array_equal(flags, expect)
    assert flags[states.token_id == the].all() and flags.sum() == (states.token_id == the).sum()
    kept = states.select(~flags)
    np.testing.assert_array_equal(kept.pre_norm, states.pre_norm[~flags])
    assert (kept.token_id != the).all() and kept.layers.shape[1] == len(kept.pre_norm)


class Finite(torch.nn.Module):
    """A final 'norm' that turns inf into 0, so the state after it is finite whatever came before."""

    def forward(self, x):
        return torch.nan_to_num(x, posinf=0.0, neginf=0.0)


@pytest.mark.parametrize("path", ["extract", "token_states"])
def test_a_non_finite_pre_norm_state_is_an_error_even_when_the_normed_one_is_finite(path):
    lm = tiny.tiny_lm("llama", adds_bos=False)

    def poison(_module, _inputs, output):
        h = (output[0] if isinstance(output, tuple) else output).clone()
        h[:, 1, 0] = float("inf")
        return (h, *output[1:]) if isinstance(output, tuple) else h

    texts = ["The cat sat on the mat.", "Prices rose by four percent."]
    handle = lm.model.model.layers[-1].register_forward_hook(poison)
    try:
        with swapped_final_norm(lm.model, "llama", Finite()), torch.no_grad():
            hs = lm.model(**lm.tokenizer(texts[0], return_tensors="pt"), output_hidden_states=True).hidden_states
            assert all(torch.isfinite(h).all() for h in hs)  # only the pre-norm state holds the inf
            with pytest.raises(ExtractionError, match=r"NaN or inf hidden state at layer 3 of 0\.\.3 .* for text 0"):
                if path == "extract":
                    extract(lm, texts, cache=False)
                else:
                    token_states(lm, texts)
    finally:
        handle.remove()


def test_cache_round_trip_keeps_pre_norm_and_a_format_1_batch_is_recomputed(isolated_cache):
    lm = tiny.tiny_lm("opt", adds_bos=True)
    first = extract(lm, tiny.TEXTS, batch_size=4)
    calls = []
    lm.model.register_forward_pre_hook(lambda *_: calls.append(1))
    second = extract(lm, tiny.TEXTS, batch_size=4)
    assert calls == [] and second.stats.batches_reused == 3
    for p in ALL_POOLINGS:
        np.testing.assert_array_equal(second.pre_norm[p], first.pre_norm[p])
    # a batch whose pre-norm rows were never written (format 1 stored none: the store reads zeros there) is not
    # reused: store rows [4, 8) are the second batch
    (folder,) = [p for p in isolated_cache.glob("activations/*/*") if p.is_dir()]
    for path in folder.glob("prenorm_*.npy"):
        stored = np.load(path, mmap_mode="r+")
        stored[4:8] = 0
        stored.flush()
        del stored
    third = extract(lm, tiny.TEXTS, batch_size=4)
    assert calls == []  # found when the pre-norm rows are first read, not when the entry opens
    for p in ALL_POOLINGS:
        np.testing.assert_array_equal(third.pre_norm[p], first.pre_norm[p])
    assert len(calls) == 1  # the one damaged batch, computed again at the first read
    # the format is part of the fingerprint: a format 1 entry is never read
    current = extract(lm, tiny.TEXTS[:2], cache=False).fingerprint
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(extract_module, "FORMAT_VERSION", 1)
        assert extract(lm, tiny.TEXTS[:2], cache=False).fingerprint != current


def test_save_load_keeps_pre_norm_and_an_old_file_loads_without_it(tmp_path):
    acts = extract(tiny.tiny_lm("gpt_neox", adds_bos=False), tiny.TEXTS, cache=False)
    acts.save(tmp_path / "a.npz")
    back = Activations.load(tmp_path / "a.npz")
    assert set(back.pre_norm) == set(ALL_POOLINGS)
    for p in ALL_POOLINGS:
        np.testing.assert_array_equal(back.pre_norm[p], acts.pre_norm[p])
        np.testing.assert_array_equal(back.pooled[p], acts.pooled[p])
    with np.load(tmp_path / "a.npz") as z:  # what a format 1 save wrote: no pre-norm arrays
        old = {k: z[k] for k in z.files if not k.startswith("prenorm_")}
    np.savez(tmp_path / "old.npz", **old)
    back = Activations.load(tmp_path / "old.npz")
    assert back.pre_norm == {}
    np.testing.assert_array_equal(back.pooled["mean"], acts.pooled["mean"])


def test_a_non_finite_value_at_padding_reaches_no_pooling_of_the_kept_states():
    """An inf at a padding position of the last block's output (the pre-norm state, kept for ``mean_no_massive``
    until the pass ends) leaves every pooled vector as without it: the late pooling of the kept state is told what
    the first pooling of that state found (not finite), so it selects padding away instead of multiplying it by 0."""
    lm = tiny.tiny_lm("llama", adds_bos=False)
    texts = ["Prices rose by four percent over the last year.", "A cat."]  # one batch, the second text padded
    clean = extract(lm, texts, cache=False, batch_size=2)

    def poison(_module, _inputs, output):
        h = (output[0] if isinstance(output, tuple) else output).clone()
        if h.shape[0] == 2:  # the batch (not the one-text probes): row 1, the shorter text, ends in padding
            h[1, -1, 0] = float("inf")
        return (h, *output[1:]) if isinstance(output, tuple) else h

    handle = lm.model.model.layers[-1].register_forward_hook(poison)
    try:
        poisoned = extract(lm, texts, cache=False, batch_size=2, poolings=("last", "mean_no_massive"))
    finally:
        handle.remove()
    for p in ("last", "mean_no_massive"):
        np.testing.assert_allclose(poisoned.pre_norm[p], clean.pre_norm[p], rtol=1e-6)
        np.testing.assert_allclose(poisoned.pooled[p][:, -1], clean.pooled[p][:, -1], rtol=1e-6)  # NaN at padding


def plans(monkeypatch) -> list:
    """The :class:`EarlyPlan` of every extract call made after this, as they are made."""
    made = []

    class Recorded(extract_module.EarlyPlan):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(extract_module, "EarlyPlan", Recorded)
    return made


@pytest.mark.parametrize("late", [False, True])
def test_states_pooled_early_or_run_again_leave_out_every_massive_token(monkeypatch, late):
    """On a CPU, once the flags have stopped growing the later states' ``mean_no_massive`` is pooled at once (no
    kept copy). ``late``: a token of every text is made massive at the last block only, after that early pooling:
    the batch runs again keeping every state. Either way every text's vector equals the numpy rule's mean."""
    lm = tiny.tiny_lm("llama", adds_bos=False, n_layers=6)
    the = lm.tokenizer(THE, add_special_tokens=False)["input_ids"][0]
    with torch.no_grad():
        lm.model.get_input_embeddings().weight[the] *= 1000.0  # massive from the first block on

    def plant(_module, _inputs, output):
        h = (output[0] if isinstance(output, tuple) else output).clone()
        h[:, 0, 0] = 1e5  # position 0: real in every row (right padding), in `mean` (no BOS)
        return (h, *output[1:]) if isinstance(output, tuple) else h

    made = plans(monkeypatch)
    handle = lm.model.model.layers[-1].register_forward_hook(plant) if late else None
    try:
        acts = extract(lm, tiny.TEXTS, batch_size=4, cache=False)
        for i, text in enumerate(tiny.TEXTS):
            hs, pre, _ = reference(lm, "llama", text)
            flags = naive_massive([*hs[1:-1], pre])
            assert flags[0] == late
            keep = ~flags if (~flags).any() else np.arange(len(flags)) > 0
            assert rel_err(acts.pooled["mean_no_massive"][i], hs[:, keep].mean(axis=1)) < 1e-4, text
            assert rel_err(acts.pre_norm["mean_no_massive"][i], pre[keep].mean(axis=0)) < 1e-4, text
    finally:
        if handle is not None:
            handle.remove()
    [plan] = made
    assert plan.early > 0  # the early path ran (in the first batch at least)
    assert (plan.reruns, plan.keep_all) == ((1, True) if late else (0, False))
