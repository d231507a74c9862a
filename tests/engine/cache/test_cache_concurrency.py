"""The activation cache shared by concurrent processes: no lost, torn or duplicated batches.

    .venv/bin/python -m pytest -q tests/engine/cache/test_cache_concurrency.py

Children are separate Python processes (``subprocess``), started together and released at once through a
"go" file, so they really do hit the same cache entry at the same time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import layerscope
import tiny
from layerscope import Activations, extract
from layerscope.engine.cache.store import STALE_TEMP_S, LayerStore, Layout

TESTS = Path(__file__).resolve().parents[2]
TEXTS = [f"{text} Item {i}." for i in range(4) for text in tiny.TEXTS]
"""44 texts of many lengths: 22 batches of 2."""
BATCH_SIZE = 2


def start(script: str, *args: str | os.PathLike, cache: Path) -> subprocess.Popen:
    """``proc = start(script, arg, cache=folder)``: run ``script`` in a new Python process with its own cache root."""
    env = {**os.environ, "LAYERSCOPE_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(TESTS)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def release_together(procs: list[subprocess.Popen], ready: list[Path], go: Path, timeout: float = 120) -> None:
    """Wait until every child has written its ``ready`` file, then create ``go`` so they all start at once."""
    deadline = time.monotonic() + timeout
    while not all(r.exists() for r in ready):
        failed = [p for p in procs if p.poll() not in (None, 0)]
        assert not failed, failed[0].communicate()[1]
        assert time.monotonic() < deadline, "children never got ready"
        time.sleep(0.02)
    go.touch()


def finish(procs: list[subprocess.Popen], timeout: float = 120) -> list[str]:
    """Each child's stdout; fails with its stderr when one exited non-zero."""
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err
        outputs.append(out)
    return outputs


def journal_ranges(folder: Path) -> list[tuple[int, int]]:
    """The (start, stop) rows of every journal line, sorted (each line must parse)."""
    return sorted((line["start"], line["stop"]) for line in map(json.loads, (folder / "journal.jsonl")
                                                                 .read_text().splitlines()))


def check_entry(root: Path, ref) -> int:
    """The one entry in the activation cache ``root`` (``$LAYERSCOPE_CACHE/activations``) holds exactly ``ref``'s
    numbers, each row written by one journalled batch, and nothing half-written is left; returns the number of
    journal lines."""
    files = [p for p in root.rglob("*") if p.is_file()]
    leftovers = [p for p in root.rglob("*") if p.name.startswith(".") or p.suffix in (".tmp", ".partial")]
    assert not leftovers, leftovers
    (folder,) = [p for p in root.glob("*/*") if p.is_dir()]
    poolings = list(ref.pooled)
    assert {p.name for p in files if p.parent == folder} == {
        *(f"pooled_{p}.npy" for p in poolings), *(f"prenorm_{p}.npy" for p in poolings), "nll_sum.npy",
        "n_scored.npy", "n_tokens.npy", "order.npy", "meta.json", "journal.jsonl"}
    assert {p.name for p in files if p.parent != folder} == {f"{folder.name}.lock"}
    ranges = journal_ranges(folder)
    assert [a for a, _ in ranges] == [0, *(b for _, b in ranges[:-1])] and ranges[-1][1] == len(ref.texts), ranges
    order = np.load(folder / "order.npy")  # store row -> the caller's text
    assert sorted(order.tolist()) == list(range(len(ref.texts)))
    for p in poolings:  # the bytes on disk, read with plain numpy, in store order
        stored = np.load(folder / f"pooled_{p}.npy")
        assert stored.shape == (ref.n_layers + 1, len(ref.texts), ref.model.hidden_size)
        for layer in range(ref.n_layers + 1):
            assert np.array_equal(stored[layer], ref.pooled[p][:, layer][order])
        assert np.array_equal(np.load(folder / f"prenorm_{p}.npy"), ref.pre_norm[p][order])
    for key in ("nll_sum", "n_scored", "n_tokens"):
        assert np.array_equal(np.load(folder / f"{key}.npy"), getattr(ref, key)[order])
    return len(ranges)


EXTRACT = """
    import json, sys, time
    from pathlib import Path
    import layerscope
    from layerscope import extract

    model, texts, batch_size, out, ready, go = sys.argv[1:]
    lm = layerscope.load_model(model)
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.005)
    acts = extract(lm, json.loads(Path(texts).read_text()), batch_size=int(batch_size), progress=False)
    acts.save(out)
    print(json.dumps({"computed": acts.stats.batches_computed, "reused": acts.stats.batches_reused,
                      "batches": acts.stats.batches}))
"""


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    return tiny.save(tmp_path_factory.mktemp("model") / "tiny-llama", "llama", adds_bos=True)


@pytest.mark.parametrize("entry", ["made beforehand", "new"])
def test_two_processes_extracting_the_same_texts_into_one_cache(tmp_path, model_folder, entry):
    """Both get the same numbers as an extraction alone, and the rows are computed once. "made beforehand": the
    entry's folder exists with no batch written yet (its journal emptied), as after a run killed before its first
    batch; "new": the two processes also create the entry."""
    shared, go, texts = tmp_path / "shared", tmp_path / "go", tmp_path / "texts.json"
    texts.write_text(json.dumps(TEXTS))
    lm = layerscope.load_model(str(model_folder))
    if entry == "made beforehand":
        extract(lm, TEXTS, batch_size=BATCH_SIZE, cache=shared / "activations")
        (journal,) = shared.glob("activations/*/*/journal.jsonl")
        journal.write_text("")
    procs = [start(EXTRACT, model_folder, texts, BATCH_SIZE, tmp_path / f"{n}.npz", tmp_path / f"{n}.ready", go,
                   cache=shared) for n in "ab"]
    release_together(procs, [tmp_path / f"{n}.ready" for n in "ab"], go)
    stats = [json.loads(out) for out in finish(procs)]

    total = stats[0]["batches"]
    assert total == len(TEXTS) // BATCH_SIZE
    # one process computes, the other waits on the entry's lock and then reuses: no batch is computed twice
    assert sorted(s["computed"] for s in stats) == [0, total]
    assert sorted(s["reused"] for s in stats) == [0, total]
    ref = extract(lm, TEXTS, batch_size=BATCH_SIZE, cache=tmp_path / "fresh")
    assert ref.stats.batches_computed == total
    for got in (Activations.load(tmp_path / f"{n}.npz") for n in "ab"):
        assert got.fingerprint == ref.fingerprint and got.texts == TEXTS
        for p in ref.pooled:
            assert np.array_equal(np.asarray(got.pooled[p]), np.asarray(ref.pooled[p]))
            assert np.array_equal(got.pre_norm[p], ref.pre_norm[p])
        for key in ("nll_sum", "n_scored", "n_tokens"):
            assert np.array_equal(getattr(got, key), getattr(ref, key))
    assert check_entry(shared / "activations", ref) == total
    assert check_entry(tmp_path / "fresh", ref) == total


LAYOUT = Layout(n_texts=6, n_states=3, d=20_000, layers=(0, 1, 2), poolings=("mean",))
"""Rows [0, 2), [2, 4), [4, 6) are batches 0, 1, 2; a batch is about 0.5 MB, so copies catch writes half-way."""

HAMMER = """
    import json, random, shutil, sys, tempfile, time
    from pathlib import Path
    import numpy as np
    from layerscope.engine.cache.store import LayerStore, Layout

    folder, seed, role, ready, go, seconds = sys.argv[1:]
    folder, rng = Path(folder), random.Random(int(seed))
    layout = Layout(n_texts=6, n_states=3, d=20_000, layers=(0, 1, 2), poolings=("mean",))
    order = np.arange(6)

    def arrays(b, v):
        # every number of batch b's rows carries the same stamp: a mix of two writes holds two stamps
        stamp = b * 1_000_000 + v
        return {"pooled_mean": np.full((3, 2, layout.d), stamp, dtype=np.float32),
                "prenorm_mean": np.full((2, layout.d), stamp, dtype=np.float32),
                "nll_sum": np.full(2, stamp, dtype=np.float64), "n_scored": np.full(2, v), "n_tokens": np.full(2, b)}

    def stamps(snap, b):
        # the distinct stamps in batch b's rows of a copied entry, read with plain numpy (rows = store order)
        rows = slice(2 * b, 2 * b + 2)
        got = [np.load(snap / "pooled_mean.npy")[:, rows], np.load(snap / "prenorm_mean.npy")[rows],
               np.load(snap / "nll_sum.npy")[rows], np.load(snap / "n_scored.npy")[rows] + b * 1_000_000,
               np.load(snap / "n_tokens.npy")[rows] * 1_000_000 + np.load(snap / "n_scored.npy")[rows]]
        return set(np.unique(np.concatenate([x.ravel().astype(np.float64) for x in got])).tolist())

    store = LayerStore.open(folder, layout, order, {"test": "hammer"})
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.001)
    counts = {"write": 0, "valid": 0, "torn rejected": 0, "clean rejected": 0}
    scratch = Path(tempfile.mkdtemp())
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        if role == "writer":
            b = rng.randrange(3)
            counts["write"] += 1
            with store.locked():  # versions unique across processes: two writes never hold the same bytes
                store.write(2 * b, arrays(b, counts["write"] * 10 + int(seed)))
            continue
        snap = scratch / f"copy{sum(counts.values())}"
        # without the lock, while writers write: a copy may hold half a write (temp files of a journal being
        # rewritten come and go: left out)
        shutil.copytree(folder, snap, ignore=shutil.ignore_patterns(".*"))
        copy = LayerStore.open(snap, layout, order, {"test": "hammer"})
        copy.verify()  # checks every journalled chunk of the copy against the copy's bytes; drops damaged lines
        missing = copy.missing()
        for b in range(3):
            mixed = len(stamps(snap, b)) > 1
            if not missing[2 * b]:
                if mixed:
                    sys.exit(f"batch {b}: a copy holding two writes' rows passed verification")
                counts["valid"] += 1
            else:
                counts["torn rejected" if mixed else "clean rejected"] += 1
        shutil.rmtree(snap)
    print(json.dumps(counts))
"""


def test_processes_hammering_writes_and_verification_on_the_same_rows(tmp_path):
    """Writers rewrite the same rows with new numbers (each under the lock, as the store requires); verifiers copy
    the entry meanwhile, without the lock, and verify the copy. A copy taken mid-write holds rows of two writes:
    verification must never pass such rows."""
    folder, go, roles = tmp_path / "ab" / "entry", tmp_path / "go", ["writer", "writer", "verifier", "verifier"]
    first = LayerStore.open(folder, LAYOUT, np.arange(6), {"test": "hammer"})
    with first.locked():  # every batch written once (version 0): no row is left unwritten
        for b in range(3):
            stamp = b * 1_000_000
            first.write(2 * b, {"pooled_mean": np.full((3, 2, LAYOUT.d), stamp), "prenorm_mean": np.full((2, LAYOUT.d),
                        stamp), "nll_sum": np.full(2, stamp), "n_scored": np.zeros(2), "n_tokens": np.full(2, b)})
    ready = [tmp_path / f"{i}.ready" for i in range(len(roles))]
    procs = [start(HAMMER, folder, i, role, ready[i], go, 4.0, cache=tmp_path / "cache")
             for i, role in enumerate(roles)]
    release_together(procs, ready, go)
    counts = [json.loads(out) for out in finish(procs)]
    total = {key: sum(c[key] for c in counts) for key in counts[0]}
    assert total["write"] > 50 and total["valid"] > 20 and total["torn rejected"] > 0, total

    store = LayerStore.open(folder, LAYOUT, np.arange(6), {"test": "hammer"})
    with store.locked():
        assert not store.missing().any()  # each batch's last write stands
    assert len(journal_ranges(folder)) == 3  # stale lines of earlier writes were dropped
    for b in range(3):
        pooled = np.load(folder / "pooled_mean.npy")[:, 2 * b: 2 * b + 2]
        assert len(np.unique(pooled)) == 1 and np.unique(pooled)[0] // 1_000_000 == b


RACE = """
    import json, sys, time
    from pathlib import Path
    import numpy as np
    from layerscope.engine.cache.store import LayerStore, Layout

    root, me, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    layout = Layout(n_texts=6, n_states=3, d=64, layers=(0, 1, 2), poolings=("mean",))

    def arrays(b):
        return {"pooled_mean": np.full((3, 2, 64), b + 1.0), "prenorm_mean": np.full((2, 64), b + 1.0),
                "nll_sum": np.full(2, b + 1.0), "n_scored": np.full(2, 3), "n_tokens": np.full(2, 4)}

    out = []
    for r in range(rounds):
        (root / f"ready{r}.{me}").touch()
        while not (root / f"go{r}").exists():
            time.sleep(0.0005)
        try:
            store = LayerStore.open(root / f"r{r}" / "entry", layout, np.arange(6), {"test": "race"})
            computed = 0
            with store.locked():
                todo = store.missing()
                for b in range(3):
                    if todo[2 * b]:
                        store.write(2 * b, arrays(b))
                        computed += 1
                        time.sleep(0.005)
            want = np.repeat(np.arange(3) + 1.0, 2)
            ok = bool(np.array_equal(store.read_rows("nll_sum"), want)
                      and all(np.array_equal(store.pooled("mean")[:, k][:, 0], want) for k in range(3)))
            out.append({"computed": computed, "ok": ok})
        except Exception as exc:
            out.append({"error": repr(exc)})
    print(json.dumps(out))
"""


def test_processes_opening_a_new_entry_at_once_compute_each_batch_once_and_read_it_back(tmp_path):
    n_procs, rounds = 3, 8
    procs = [start(RACE, tmp_path, i, rounds, cache=tmp_path / "cache") for i in range(n_procs)]
    for r in range(rounds):
        release_together(procs, [tmp_path / f"ready{r}.{i}" for i in range(n_procs)], tmp_path / f"go{r}")
    results = [json.loads(out) for out in finish(procs)]
    for r in range(rounds):
        got = [res[r] for res in results]
        assert all("error" not in g for g in got), (r, got)
        assert all(g["ok"] for g in got), (r, got)
        assert sum(g["computed"] for g in got) == 3, (r, got)


@pytest.mark.parametrize("where", ["beside the entry", "inside the entry"])
def test_taking_the_lock_clears_temp_files_of_killed_writers_only(tmp_path, where):
    """Beside the entry: a folder being created (``.<name>.XXXX.tmp``); inside: the journal being rewritten after
    damage (``.journal.jsonl.XXXX.tmp``). A killed writer's (old) go, a live writer's (new) stay."""
    store = LayerStore.open(tmp_path / "ab" / "entry", LAYOUT, np.arange(6), {"test": "temp"})
    if where == "beside the entry":
        old, live = tmp_path / "ab" / ".entry.k1l2m3n4.tmp", tmp_path / "ab" / ".other.x9y8z7w6.tmp"
        old.mkdir()
        (old / "pooled_mean.npy").write_bytes(b"half a folder")
        live.mkdir()
    else:
        old, live = store.folder / ".journal.jsonl.k1l2m3n4.tmp", store.folder / ".journal.jsonl.x9y8z7w6.tmp"
        old.write_bytes(b"half a journal")
        live.write_bytes(b"being written")
    stale = time.time() - STALE_TEMP_S - 60
    os.utime(old, (stale, stale))
    with store.locked():
        assert not old.exists() and live.exists()
    assert (store.folder / "meta.json").is_file()
