"""The memory-bounded engine against independent references: hook capture vs transformers' output_hidden_states
pooled by hand, the on-disk store vs run_batch results kept in memory, and resuming a killed extraction."""

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import tiny
from layerscope import extract
from layerscope.engine.forward.activations import ExtractSettings
from layerscope.engine.forward.batching import collate
from layerscope.engine.forward.massive import block_massive

extract_module = importlib.import_module("layerscope.engine.forward.extract")  # the package's `extract` is the function

TESTS = Path(__file__).resolve().parents[2]
POOLINGS = ("mean", "last", "first", "mean_no_pos0", "mean_no_massive")
CASES = [(arch, bos) for arch in tiny.ARCHS for bos in (False, True)]
IDS = [f"{a}-{'bos' if b else 'nobos'}" for a, b in CASES]
BLOCKS = {"llama": "model.layers", "gpt2": "transformer.h", "gpt_neox": "gpt_neox.layers",
          "opt": "model.decoder.layers", "gemma3": "model.layers"}
"""Where each tiny architecture keeps its decoder blocks (for the pre-norm reference hook)."""


def rel_err(got, ref) -> float:
    """Largest per-vector relative error ||got - ref|| / ||ref||."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.max(np.linalg.norm(got - ref, axis=-1) / np.linalg.norm(ref, axis=-1)))


def sorted_chunks(lm, texts, size):
    """Text indices longest first (ties in input order), in chunks of ``size``: the batches extract plans on a
    CPU for a few short texts and ``batch_size=size``."""
    lengths = [len(lm.tokenizer(t)["input_ids"]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    return [order[s : s + size] for s in range(0, len(order), size)]


def boost_the(lm):
    """Scale the embedding of the token " the" 1000x so it is a massive activation at the block outputs."""
    (the,) = lm.tokenizer(" the", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        lm.model.get_input_embeddings().weight[the] *= 1000.0
    return the


def hand_pool(states, n_real, first_is_bos, compat, flags):
    """One text's vectors by the documented rules; ``states`` (T, d) right-padded, ``flags`` (T,) massive."""
    states = states.astype(np.float64)
    mean_tokens = list(range(1 if (compat == "notebooks" or first_is_bos) else 0, n_real))
    no_pos0 = list(range(1, n_real))
    no_massive = [t for t in mean_tokens if not flags[t]] or no_pos0
    return {"mean": states[mean_tokens].mean(0), "last": states[n_real - 1], "first": states[0],
            "mean_no_pos0": states[no_pos0].mean(0), "mean_no_massive": states[no_massive].mean(0)}


@torch.no_grad()
def hidden_states_reference(lm, arch, texts, chunks, compat):
    """Per chunk, one right-padded forward pass with output_hidden_states=True (pre-norm from a hook on the last
    block), pooled by hand: {pooling: (n, n_layers + 1, d)}, {pooling: (n, d)} pre-norm, and the massive flags."""
    n, n_states = len(texts), lm.info.n_layers + 1
    pooled = {p: np.zeros((n, n_states, lm.info.hidden_size)) for p in POOLINGS}
    pre = {p: np.zeros((n, lm.info.hidden_size)) for p in POOLINGS}
    flagged = []
    last_block = lm.model.get_submodule(BLOCKS[arch])[-1]
    got = []
    for chunk in chunks:
        ids = [lm.tokenizer(texts[i])["input_ids"] for i in chunk]
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [0] * (width - len(x)) for x in ids])
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
        handle = last_block.register_forward_hook(lambda _m, _a, o: got.append(o[0] if isinstance(o, tuple) else o))
        try:
            out = lm.model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
        finally:
            handle.remove()
        assert len(out.hidden_states) == n_states
        flags = block_massive(out.hidden_states, got[-1], mask.bool()).numpy()
        for row, i in enumerate(chunk):
            first_is_bos = ids[row][0] == lm.tokenizer.bos_token_id
            flagged.append(flags[row, : len(ids[row])])
            for layer in range(n_states):
                vecs = hand_pool(out.hidden_states[layer][row].numpy(), len(ids[row]), first_is_bos, compat,
                                 flags[row])
                for p in POOLINGS:
                    pooled[p][i, layer] = vecs[p]
            vecs = hand_pool(got[-1][row].numpy(), len(ids[row]), first_is_bos, compat, flags[row])
            for p in POOLINGS:
                pre[p][i] = vecs[p]
    return pooled, pre, np.concatenate(flagged)


@pytest.mark.parametrize(("arch", "bos"), CASES, ids=IDS)
def test_hooks_equal_output_hidden_states_for_every_pooling_and_layer(arch, bos):
    lm = tiny.tiny_lm(arch, adds_bos=bos)
    boost_the(lm)  # some tokens massive, so mean_no_massive differs from mean
    chunks = sorted_chunks(lm, tiny.TEXTS, 4)
    for compat in (None, "notebooks"):
        acts = extract(lm, tiny.TEXTS, batch_size=4, compat=compat, cache=False)
        assert acts.stats.batches_computed == len(chunks) == 3
        pooled, pre, flags = hidden_states_reference(lm, arch, tiny.TEXTS, chunks, compat)
        assert 0 < flags.sum() < len(flags)  # the mean_no_massive check can fail
        assert rel_err(pooled["mean_no_massive"], pooled["mean"]) > 1e-2
        if bos or compat == "notebooks":
            assert rel_err(pooled["mean"], pooled["mean_no_pos0"]) < 1e-6
        else:
            assert rel_err(pooled["mean"], pooled["mean_no_pos0"]) > 1e-3
        for p in POOLINGS:
            for layer in range(lm.info.n_layers + 1):
                assert rel_err(acts.pooled[p][:, layer], pooled[p][:, layer]) < 1e-6, (compat, p, layer)
            assert rel_err(acts.pre_norm[p], pre[p]) < 1e-6, (compat, p)


def test_mean_no_massive_flags_come_from_every_block_output_also_unextracted_ones():
    lm = tiny.tiny_lm("llama", adds_bos=True)
    (the,), (of,) = (lm.tokenizer(t, add_special_tokens=False)["input_ids"] for t in (" the", " of"))
    with torch.no_grad():  # " the": massive at the embeddings and block 0's output only; " of": at the embeddings only
        lm.model.get_input_embeddings().weight[the] *= 300.0
        lm.model.get_input_embeddings().weight[of] *= 100.0
    chunks = sorted_chunks(lm, tiny.TEXTS, 4)
    pooled, pre, flags = hidden_states_reference(lm, "llama", tiny.TEXTS, chunks, None)
    ids = np.concatenate([lm.tokenizer(tiny.TEXTS[i])["input_ids"] for chunk in chunks for i in chunk])
    assert set(ids[flags]) == {the}  # " of" is massive only where no block output counts
    mean, no_massive = pooled["mean"][:, 3], pooled["mean_no_massive"][:, 3]
    changed = np.linalg.norm(mean - no_massive, axis=-1) > 1e-3 * np.linalg.norm(mean, axis=-1)
    assert changed.tolist() == [" the " in f" {t} " for t in tiny.TEXTS]
    acts = extract(lm, tiny.TEXTS, layers=[0, 3], poolings=("mean", "mean_no_massive"), batch_size=4, cache=False)
    for p in ("mean", "mean_no_massive"):
        for layer in (0, 3):
            assert rel_err(acts.pooled[p][:, layer], pooled[p][:, layer]) < 1e-6, (p, layer)
        assert rel_err(acts.pre_norm[p], pre[p]) < 1e-6, p


def in_memory(lm, texts, chunks, settings):
    """run_batch per chunk, rows put back in the caller's order: {array name: array}."""
    out = {}
    for chunk in chunks:
        ids = [lm.tokenizer(texts[i])["input_ids"] for i in chunk]
        arrays = extract_module.run_batch(lm, collate(ids, np.array(chunk), 0), settings, texts=texts)
        for key, value in arrays.items():
            rows = value if value.ndim != 3 else value.transpose(1, 0, 2)  # (k, B, d) -> (B, k, d)
            out.setdefault(key, np.zeros((len(texts), *rows.shape[1:]), dtype=rows.dtype))[chunk] = rows
    return out


def assert_equals_memory(acts, ref, cast=None):
    cast = cast or (lambda x: x)
    for p in acts.settings.poolings:
        assert np.array_equal(np.asarray(acts.pooled[p]), cast(ref[f"pooled_{p}"])), p
        for layer in range(acts.n_layers + 1):  # one layer read alone from the store
            assert np.array_equal(acts.pooled[p][:, layer], cast(ref[f"pooled_{p}"][:, layer])), (p, layer)
        assert np.array_equal(acts.pre_norm[p], cast(ref[f"prenorm_{p}"])), p
    for key in ("nll_sum", "n_scored", "n_tokens"):
        assert np.array_equal(getattr(acts, key), ref[key]), key


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_the_store_on_disk_equals_run_batch_results_in_memory(arch, tmp_path):
    lm = tiny.tiny_lm(arch, adds_bos=True)
    boost_the(lm)
    settings = ExtractSettings(layers=tuple(range(lm.info.n_layers + 1)))
    ref = in_memory(lm, tiny.TEXTS, sorted_chunks(lm, tiny.TEXTS, 4), settings)
    first = extract(lm, tiny.TEXTS, batch_size=4, cache=tmp_path / "cache")
    assert first.stats.batches_computed == 3
    assert_equals_memory(first, ref)
    again = extract(lm, tiny.TEXTS, batch_size=4, cache=tmp_path / "cache")
    assert again.stats.batches_computed == 0 and again.stats.batches_reused == 3
    assert_equals_memory(again, ref)
    half = extract(lm, tiny.TEXTS, batch_size=4, store_dtype="float16", cache=tmp_path / "cache")
    assert half.stats.batches_computed == 3  # another entry
    assert half.pooled["mean"][:, 1].dtype == np.float32 and half.pre_norm["mean"].dtype == np.float32
    assert_equals_memory(half, ref, cast=lambda x: x.astype(np.float16).astype(np.float32) if x.ndim > 1 else x)
    stored = sorted((tmp_path / "cache").glob("*/*/pooled_mean.npy"), key=lambda f: f.stat().st_size)
    assert [np.load(f, mmap_mode="r").dtype for f in stored] == [np.float16, np.float32]


class ForwardCounter:
    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self._count)

    def _count(self, *_):
        self.calls += 1


def assert_identical(a, b):
    for p in a.settings.poolings:
        assert np.array_equal(np.asarray(a.pooled[p]), np.asarray(b.pooled[p])), p
        assert np.array_equal(a.pre_norm[p], b.pre_norm[p]), p
    for key in ("nll_sum", "n_scored", "n_tokens"):
        assert np.array_equal(getattr(a, key), getattr(b, key)), key


class Killed(Exception):
    pass


def test_an_extraction_killed_after_two_batches_resumes_with_only_the_missing_ones(tmp_path):
    lm = tiny.tiny_lm("llama", adds_bos=True)
    whole = extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "whole")  # 11 texts: 6 batches
    assert whole.stats.batches_computed == 6

    def kill(done, total):
        assert total == 6
        if done == 2:
            raise Killed

    with pytest.raises(Killed):
        extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "cache", on_batch=kill)
    counter = ForwardCounter(lm.model)
    seen = []
    resumed = extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "cache", on_batch=lambda *a: seen.append(a))
    assert counter.calls == 4
    assert (resumed.stats.batches_computed, resumed.stats.batches_reused) == (4, 2)
    assert seen == [(3, 6), (4, 6), (5, 6), (6, 6)]
    assert_identical(resumed, whole)
    counter.calls = 0
    other_plan = extract(lm, tiny.TEXTS, batch_size=3, cache=tmp_path / "cache")
    assert counter.calls == 0 and other_plan.stats.batches_computed == 0
    assert_identical(other_plan, whole)


KILLER = textwrap.dedent("""
    import os, pathlib, signal, sys
    sys.path.insert(0, {tests!r})
    import tiny
    from layerscope import extract
    cache, writes, real = pathlib.Path({cache!r}), [0], os.pwrite
    def pwrite(fd, data, offset):  # SIGKILL in the middle of the third batch's writes, before its journal line
        journal = next(cache.glob("*/*/journal.jsonl"), None)
        if journal is not None and len(journal.read_text().splitlines()) == 2:
            writes[0] += 1
            if writes[0] == 5:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(fd, data, offset)
    os.pwrite = pwrite
    extract(tiny.tiny_lm("llama", adds_bos=True), tiny.TEXTS, batch_size=2, cache=str(cache))
""")


def test_a_sigkilled_extraction_resumes_with_identical_arrays(tmp_path):
    lm = tiny.tiny_lm("llama", adds_bos=True)
    whole = extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "whole")
    script = KILLER.format(tests=str(TESTS), cache=str(tmp_path / "cache"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    (entry,) = (tmp_path / "cache").glob("*/*/journal.jsonl")
    assert len(entry.read_text().splitlines()) == 2
    counter = ForwardCounter(lm.model)
    resumed = extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "cache")
    assert counter.calls == 4 and resumed.stats.batches_computed == 4
    assert_identical(resumed, whole)
