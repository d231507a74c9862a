"""The activation cache: reuse, resume after SIGKILL, and recovery from corrupt files."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tiny
from layerscope import extract
from layerscope.engine.cache import BatchStore

TESTS = Path(__file__).resolve().parents[1]


class ForwardCounter:
    def __init__(self, model):
        self.calls = 0
        model.register_forward_pre_hook(self._count)

    def _count(self, *_):
        self.calls += 1


def assert_same(a, b):
    assert a.fingerprint == b.fingerprint
    for p in a.pooled:
        np.testing.assert_array_equal(a.pooled[p], b.pooled[p])
    np.testing.assert_array_equal(a.nll_sum, b.nll_sum)
    np.testing.assert_array_equal(a.n_scored, b.n_scored)


def batch_files(cache_root: Path) -> list[Path]:
    return sorted(cache_root.glob("activations/*/*/batch-*.npz"))


def test_second_call_does_not_run_the_model(isolated_cache):
    lm = tiny.tiny_lm("llama")
    first = extract(lm, tiny.TEXTS, batch_size=4)
    counter = ForwardCounter(lm.model)
    second = extract(lm, tiny.TEXTS, batch_size=4)
    assert counter.calls == 0
    assert second.stats.batches_computed == 0 and second.stats.batches_reused == 3
    assert_same(first, second)
    assert len(batch_files(isolated_cache)) == 3


def test_other_settings_or_texts_get_their_own_entry():
    lm = tiny.tiny_lm("llama")
    base = extract(lm, tiny.TEXTS, batch_size=4)
    counter = ForwardCounter(lm.model)
    seed = extract(lm, tiny.TEXTS, batch_size=4, compat="seed")
    fewer = extract(lm, tiny.TEXTS[:-1], batch_size=4)
    other_model = extract(tiny.tiny_lm("llama", seed=1), tiny.TEXTS, batch_size=4)
    assert counter.calls == 6  # 3 batches for the seed settings, 3 for the shorter list
    assert len({base.fingerprint, seed.fingerprint, fewer.fingerprint, other_model.fingerprint}) == 4


def test_killed_run_resumes_from_finished_batches_with_identical_results(isolated_cache):
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(TESTS)!r})
        import tiny
        from layerscope import extract

        def die(done, total):
            if done == 3:
                os.kill(os.getpid(), signal.SIGKILL)

        extract(tiny.tiny_lm("llama"), tiny.TEXTS, batch_size=2, on_batch=die)
        print("finished")
    """)
    env = {**os.environ, "LAYERSCOPE_CACHE": str(isolated_cache)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert "finished" not in proc.stdout
    assert len(batch_files(isolated_cache)) == 3

    lm = tiny.tiny_lm("llama")
    counter = ForwardCounter(lm.model)
    resumed = extract(lm, tiny.TEXTS, batch_size=2)
    assert counter.calls == 3  # 6 batches, 3 done before the kill
    assert resumed.stats.batches_reused == 3
    assert_same(resumed, extract(tiny.tiny_lm("llama"), tiny.TEXTS, batch_size=2, cache=False))


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_corrupt_batch_file_is_detected_and_recomputed(isolated_cache, damage):
    lm = tiny.tiny_lm("gpt2", adds_bos=True)
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    victim = batch_files(isolated_cache)[1]
    data = bytearray(victim.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 3]
    else:
        data = bytearray()
    victim.write_bytes(bytes(data))

    counter = ForwardCounter(lm.model)
    again = extract(lm, tiny.TEXTS, batch_size=4)
    assert counter.calls == 1
    assert_same(clean, again)
    assert len(batch_files(isolated_cache)) == 3


def test_stored_batch_with_wrong_shapes_is_recomputed(isolated_cache):
    lm = tiny.tiny_lm("opt")
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    folder = batch_files(isolated_cache)[0].parent
    store = BatchStore(folder, meta={"tampered": True})
    store.put(0, {"nll_sum": np.zeros(2)})  # a well-formed file with the wrong contents

    counter = ForwardCounter(lm.model)
    again = extract(lm, tiny.TEXTS, batch_size=4)
    assert counter.calls == 1
    assert_same(clean, again)


def test_corrupt_meta_json_does_not_break_the_entry(isolated_cache):
    lm = tiny.tiny_lm("llama")
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    meta = next(isolated_cache.glob("activations/*/*/meta.json"))
    meta.write_text("{not json")
    again = extract(lm, tiny.TEXTS, batch_size=4)
    assert_same(clean, again)
    assert again.stats.batches_computed == 0
