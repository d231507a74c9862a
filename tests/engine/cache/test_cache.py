"""The activation cache: reuse, resume after SIGKILL, and recovery from damaged files.

    .venv/bin/python -m pytest -q tests/engine/cache/test_cache.py

An entry is one folder of layer-major ``.npy`` files and a ``journal.jsonl`` with one line per written batch
of rows (rows in store order: texts sorted longest first). With ``tiny.TEXTS`` (11 texts) and
``batch_size=4`` the batches are store rows [0, 4), [4, 8) and [8, 11).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tiny
from layerscope import extract

TESTS = Path(__file__).resolve().parents[2]
BATCHES = [(0, 4), (4, 8), (8, 11)]
"""The store rows of each batch of tiny.TEXTS at batch_size=4."""


class ForwardCounter:
    """Counts forward passes of ``model`` from now on. The first extraction that computes anything with a model
    object also runs two probe passes (``engine.forward.head``): :func:`probed` runs them before counting starts."""

    def __init__(self, model):
        self.calls = 0
        model.register_forward_pre_hook(self._count)

    def _count(self, *_):
        self.calls += 1


def probed(lm):
    """``lm`` after one uncached extraction, so its one-time head probe is done."""
    extract(lm, tiny.TEXTS[:2], cache=False)
    return lm


def assert_same(a, b):
    assert a.fingerprint == b.fingerprint
    for p in a.pooled:
        np.testing.assert_array_equal(np.asarray(a.pooled[p]), np.asarray(b.pooled[p]))
        np.testing.assert_array_equal(a.pre_norm[p], b.pre_norm[p])
    np.testing.assert_array_equal(a.nll_sum, b.nll_sum)
    np.testing.assert_array_equal(a.n_scored, b.n_scored)
    np.testing.assert_array_equal(a.n_tokens, b.n_tokens)


def entry(cache_root: Path) -> Path:
    """The one cache entry folder under ``cache_root``."""
    (folder,) = [p for p in cache_root.glob("activations/*/*") if p.is_dir()]
    return folder


def journal(folder: Path) -> list[tuple[int, int]]:
    """The (start, stop) row ranges of the journal lines that parse, sorted."""
    ranges = []
    for line in (folder / "journal.jsonl").read_text().splitlines():
        try:
            ranges.append((json.loads(line)["start"], json.loads(line)["stop"]))
        except (ValueError, KeyError):
            pass
    return sorted(ranges)


def test_second_call_does_not_run_the_model(isolated_cache):
    lm = tiny.tiny_lm("llama")
    first = extract(lm, tiny.TEXTS, batch_size=4)
    counter = ForwardCounter(lm.model)
    second = extract(lm, tiny.TEXTS, batch_size=4)
    assert counter.calls == 0
    assert second.stats.batches_computed == 0 and second.stats.batches_reused == 3
    assert_same(first, second)
    assert journal(entry(isolated_cache)) == BATCHES


@pytest.mark.parametrize("batch_size", [2, None])
def test_another_batch_size_reuses_the_entry(isolated_cache, batch_size):
    lm = tiny.tiny_lm("llama")
    first = extract(lm, tiny.TEXTS, batch_size=4)
    counter = ForwardCounter(lm.model)
    second = extract(lm, tiny.TEXTS, batch_size=batch_size)
    assert counter.calls == 0 and second.stats.batches_reused == 3
    assert_same(first, second)
    assert len(list(isolated_cache.glob("activations/*/*/"))) == 1


def test_other_settings_or_texts_get_their_own_entry():
    lm = tiny.tiny_lm("llama")
    base = extract(lm, tiny.TEXTS, batch_size=4)
    counter = ForwardCounter(lm.model)
    seed = extract(lm, tiny.TEXTS, batch_size=4, compat="notebooks")
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
    assert journal(entry(isolated_cache)) == [(0, 2), (2, 4), (4, 6)]

    lm = probed(tiny.tiny_lm("llama"))
    counter = ForwardCounter(lm.model)
    resumed = extract(lm, tiny.TEXTS, batch_size=2)
    assert counter.calls == 3  # 6 batches, 3 done before the kill
    assert resumed.stats.batches_reused == 3
    assert_same(resumed, extract(tiny.tiny_lm("llama"), tiny.TEXTS, batch_size=2, cache=False))


def change_value(path: Path, index: tuple) -> None:
    """Add 1 to one stored number of a ``.npy`` file, in place."""
    stored = np.load(path, mmap_mode="r+")
    stored[index] += 1
    stored.flush()
    del stored


def rewrite_line(folder: Path, n: int, new: str) -> None:
    lines = (folder / "journal.jsonl").read_text().splitlines()
    lines[n] = new
    (folder / "journal.jsonl").write_text("\n".join(lines) + "\n")


def damage_rows_4_to_8(folder: Path, damage: str) -> None:
    """Damage what the journal's second line (store rows [4, 8)) vouches for, and nothing else."""
    second = json.loads((folder / "journal.jsonl").read_text().splitlines()[1])
    assert (second["start"], second["stop"]) == (4, 8)
    if damage == "pooled value":
        change_value(folder / "pooled_mean.npy", (2, 5, 0))  # layer 2, store row 5
    elif damage == "pre-norm value":
        change_value(folder / "prenorm_last.npy", (7, 3))
    elif damage == "nll value":
        change_value(folder / "nll_sum.npy", (4,))
    elif damage == "garbage journal line":
        rewrite_line(folder, 1, '{"start": 4, "sto')
    elif damage == "wrong hash in the journal":
        rewrite_line(folder, 1, json.dumps({**second, "xxh3": {k: "0" * len(v) for k, v in second["xxh3"].items()}}))
    elif damage == "range past the end":
        rewrite_line(folder, 1, json.dumps({**second, "stop": 99}))


@pytest.mark.parametrize("damage", ["pooled value", "pre-norm value", "nll value", "garbage journal line",
                                    "wrong hash in the journal", "range past the end"])
def test_a_damaged_batch_is_detected_and_only_its_rows_are_recomputed(isolated_cache, damage):
    lm = tiny.tiny_lm("gpt2", adds_bos=True)
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    folder = entry(isolated_cache)
    damage_rows_4_to_8(folder, damage)

    counter = ForwardCounter(lm.model)
    again = extract(lm, tiny.TEXTS, batch_size=4)
    if damage in ("pooled value", "pre-norm value"):  # found when first read (extract reads only the NLLs)
        assert counter.calls == 0 and again.stats.batches_reused == 3
        assert_same(clean, again)  # reads every layer: the damaged chunk's batch is computed again, then read
        assert counter.calls == 1
    else:
        assert counter.calls == 1 and again.stats.batches_reused == 2 and again.stats.batches_computed == 1
        assert_same(clean, again)
    assert journal(folder) == BATCHES
    third = extract(lm, tiny.TEXTS, batch_size=4)  # the repaired entry is whole again
    assert third.stats.batches_computed == 0 and third.stats.batches_reused == 3
    assert_same(clean, third)


@pytest.mark.parametrize("damage", ["truncated", "empty", "fewer layers", "wider rows", "float64"])
def test_a_damaged_or_misshapen_array_file_is_detected_and_recomputed(isolated_cache, damage):
    """A file cut short, or a well-formed .npy of another shape or dtype in place of pooled_mean.npy: nothing of
    it is trusted (a truncated file loses rows of every batch in its last layers), the results stay the same."""
    lm = tiny.tiny_lm("opt")
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    victim = entry(isolated_cache) / "pooled_mean.npy"
    n_states, n, d = lm.info.n_layers + 1, len(tiny.TEXTS), lm.info.hidden_size
    if damage == "truncated":
        victim.write_bytes(victim.read_bytes()[:-100])
    elif damage == "empty":
        victim.write_bytes(b"")
    elif damage == "fewer layers":
        np.save(victim, np.ones((n_states - 1, n, d), dtype=np.float32))
    elif damage == "wider rows":
        np.save(victim, np.ones((n_states, n, d + 1), dtype=np.float32))
    else:
        np.save(victim, np.ones((n_states, n, d), dtype=np.float64))

    counter = ForwardCounter(lm.model)
    again = extract(lm, tiny.TEXTS, batch_size=4)
    assert counter.calls == 3 and again.stats.batches_computed == 3
    assert_same(clean, again)
    assert extract(lm, tiny.TEXTS, batch_size=4).stats.batches_computed == 0


def test_corrupt_meta_json_does_not_break_the_entry(isolated_cache):
    lm = tiny.tiny_lm("llama")
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    meta = entry(isolated_cache) / "meta.json"
    meta.write_text("{not json")
    again = extract(lm, tiny.TEXTS, batch_size=4)
    assert_same(clean, again)
    assert json.loads(meta.read_text())["fingerprint"] == clean.fingerprint
    third = extract(lm, tiny.TEXTS, batch_size=4)
    assert third.stats.batches_computed == 0
    assert_same(clean, third)


def test_corrupt_meta_json_keeps_the_verified_batches(isolated_cache):
    lm = tiny.tiny_lm("llama")
    extract(lm, tiny.TEXTS, batch_size=4)
    (entry(isolated_cache) / "meta.json").write_text("{not json")
    again = extract(lm, tiny.TEXTS, batch_size=4)
    assert again.stats.batches_computed == 0
