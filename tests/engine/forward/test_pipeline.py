"""The pipelined extraction: host synchronisations per batch (counted), writer failures mid-run (one clear error,
nothing half-journalled, a rerun equal to an uninterrupted run), and the lazily checked store.

A host synchronisation is counted as a call, on the main thread, of ``Tensor.cpu``, ``.item``, ``.tolist``,
``.numpy``, ``.__bool__`` or ``torch.cuda.synchronize``: on a GPU each waits for the device's queued work.
"""

import errno
import json
import os
import threading

import numpy as np
import pytest
import torch

import tiny
from layerscope import extract
from layerscope.engine.forward import massive, massive_device, no_massive, pooling
from layerscope.errors import CacheError, ExtractionError

SYNCS = ("cpu", "item", "tolist", "numpy", "__bool__")


class SyncCounter:
    """Counts the main thread's calls of :data:`SYNCS` (and ``torch.cuda.synchronize``) while installed."""

    def __init__(self, monkeypatch):
        self.calls = 0
        main = threading.main_thread()

        def counting(original):
            def wrapper(*args, **kwargs):
                if threading.current_thread() is main:
                    self.calls += 1
                return original(*args, **kwargs)
            return wrapper

        for name in SYNCS:
            monkeypatch.setattr(torch.Tensor, name, counting(getattr(torch.Tensor, name)))
        monkeypatch.setattr(torch.cuda, "synchronize", counting(torch.cuda.synchronize))


def bare_forward_syncs(lm, monkeypatch) -> int:
    """Syncs of one bare forward pass of the model on a padded batch (what transformers itself does)."""
    enc = lm.tokenizer(tiny.TEXTS[:4], padding=True, return_tensors="pt")
    counter = SyncCounter(monkeypatch)
    with torch.inference_mode():
        lm.model(**enc, use_cache=False)
    monkeypatch.undo()
    return counter.calls


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_host_syncs_per_batch_are_few_and_do_not_grow_with_the_layers(arch, monkeypatch):
    per_batch = {}
    for n_layers in (2, 6):
        lm = tiny.tiny_lm(arch, adds_bos=True, n_layers=n_layers)
        extract(lm, tiny.TEXTS, batch_size=2, cache=False, progress=False)  # the head's one-time probe
        bare = bare_forward_syncs(lm, monkeypatch)
        counter = SyncCounter(monkeypatch)
        for module in (pooling, massive, massive_device, no_massive):  # count as on a GPU: no CPU-only shortcut
            monkeypatch.setattr(module, "free_to_check", lambda t: False)
        acts = extract(lm, tiny.TEXTS, batch_size=2, cache=False, progress=False)  # 6 batches
        monkeypatch.undo()
        batches = acts.stats.batches_computed
        assert batches == 6
        per_batch[n_layers] = (counter.calls - bare * batches) / batches
    assert per_batch[2] == per_batch[6], per_batch  # nothing per layer
    assert per_batch[6] <= 2, per_batch  # beyond the model's own: at most the one read of the packed batch


class DiskFull:
    """``os.pwrite`` that fails with ``code`` from the ``after``-th call on (the writer thread's writes)."""

    def __init__(self, monkeypatch, code: int, after: int):
        self.calls, real = 0, os.pwrite

        def pwrite(fd, data, offset):
            self.calls += 1
            if self.calls >= after:
                raise OSError(code, os.strerror(code))
            return real(fd, data, offset)

        monkeypatch.setattr(os, "pwrite", pwrite)


def journal_ranges(cache) -> list[tuple[int, int]]:
    (path,) = cache.glob("*/*/journal.jsonl")
    return sorted((line["start"], line["stop"]) for line in map(json.loads, path.read_text().splitlines()))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_writer_failure_mid_run_is_one_error_and_a_rerun_equals_an_uninterrupted_run(tmp_path, monkeypatch, code):
    lm = tiny.tiny_lm("llama", adds_bos=True)
    whole = extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "whole", progress=False)
    per_batch = 5 * (lm.info.n_layers + 1) + 5 + 3  # chunks of one batch: 5 poolings x layers, pre-norm, scalars
    DiskFull(monkeypatch, code, after=2 * per_batch + 3)  # in the middle of the third batch
    with pytest.raises(CacheError) as caught:
        extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "cache", progress=False)
    monkeypatch.undo()
    message = str(caught.value)
    cause = {errno.ENOSPC: "disk is full", errno.EROFS: "read-only"}[code]
    assert "\n" not in message and cause in message and str(tmp_path / "cache") in message
    assert journal_ranges(tmp_path / "cache") == [(0, 2), (2, 4)]  # the failed batch and those after it: none
    again = extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "cache", progress=False)
    assert (again.stats.batches_reused, again.stats.batches_computed) == (2, 4)
    for p in whole.pooled:
        assert np.array_equal(np.asarray(again.pooled[p]), np.asarray(whole.pooled[p])), p
        assert np.array_equal(again.pre_norm[p], whole.pre_norm[p]), p
    for key in ("nll_sum", "n_scored", "n_tokens"):
        assert np.array_equal(getattr(again, key), getattr(whole, key)), key


def test_a_nan_in_a_later_batch_names_its_text_and_keeps_the_batches_before(tmp_path):
    lm = tiny.tiny_lm("llama")
    victim = tiny.TEXTS.index("Ice floats.")  # the shortest text: the last batch in store order
    ids = lm.tokenizer(tiny.TEXTS[victim])["input_ids"]
    block = lm.model.model.layers[1]

    def poison(_module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        if hidden.shape[1] == len(ids):  # only the batch holding the victim (and texts as short)
            hidden = hidden.clone()
            hidden[:, 0, 0] = float("nan")
            return (hidden, *args[1:]), kwargs
        return None

    handle = block.register_forward_pre_hook(poison, with_kwargs=True)
    try:
        with pytest.raises(ExtractionError, match="NaN or inf hidden state at layer 1 ") as caught:
            extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path, progress=False)
    finally:
        handle.remove()
    assert f'text {victim} ("Ice floats.")' in str(caught.value)  # the input of block 1 is hidden state 1
    ranges = journal_ranges(tmp_path)
    assert ranges == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]  # every batch before the bad one is kept


def test_opening_a_cached_entry_reads_no_stored_vector(tmp_path, monkeypatch):
    lm = tiny.tiny_lm("gpt2")
    extract(lm, tiny.TEXTS, batch_size=4, cache=tmp_path, progress=False)
    import layerscope.engine.cache.store as store_module

    reads = []
    real = store_module.read_block
    monkeypatch.setattr(store_module, "read_block", lambda path, *a: reads.append(path.name) or real(path, *a))
    again = extract(lm, tiny.TEXTS, batch_size=4, cache=tmp_path, progress=False)
    assert sorted(reads) == ["n_scored.npy", "n_tokens.npy", "nll_sum.npy"]  # extract reads only the NLLs
    again.pooled["mean"][:, 2]
    assert reads[-1] == "pooled_mean.npy" and len(reads) == 4  # one layer, read when asked for


def test_an_old_format_journal_is_never_read_as_written(tmp_path):
    """A journal line without per-chunk checksums (the SHA-256 journal of store format 3) counts for nothing."""
    lm = tiny.tiny_lm("opt")
    clean = extract(lm, tiny.TEXTS, batch_size=4, cache=tmp_path, progress=False)
    (path,) = tmp_path.glob("*/*/journal.jsonl")
    path.write_text("".join(json.dumps({"start": s, "stop": e, "sha256": "0" * 64}) + "\n"
                            for s, e in [(0, 4), (4, 8), (8, 11)]))
    again = extract(lm, tiny.TEXTS, batch_size=4, cache=tmp_path, progress=False)
    assert again.stats.batches_computed == 3
    assert np.array_equal(np.asarray(again.pooled["mean"]), np.asarray(clean.pooled["mean"]))


def test_damage_found_after_the_model_is_gone_is_one_error_naming_the_fix(tmp_path):
    lm = tiny.tiny_lm("llama")
    acts = extract(lm, tiny.TEXTS, batch_size=4, cache=tmp_path, progress=False)
    (folder,) = [p.parent for p in tmp_path.glob("*/*/journal.jsonl")]
    stored = np.load(folder / "pooled_last.npy", mmap_mode="r+")
    stored[1, 5, 0] += 1
    stored.flush()
    del stored, lm
    import gc

    gc.collect()
    with pytest.raises(ExtractionError, match="run the extraction again"):
        acts.pooled["last"][:, 1]


def test_a_temporary_store_goes_when_its_result_does_without_waiting_for_the_garbage_collector():
    import gc

    lm = tiny.tiny_lm("llama")
    acts = extract(lm, tiny.TEXTS, batch_size=4, cache=False, progress=False)
    folder = acts.pooled["mean"].source.store.folder.parent
    assert folder.is_dir()
    gc.disable()
    try:
        del acts  # reference counting alone frees it: the store's healer holds neither the store nor the model
        assert not folder.exists()
    finally:
        gc.enable()
