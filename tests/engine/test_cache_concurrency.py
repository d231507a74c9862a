"""The activation cache shared by concurrent processes: no lost, torn or duplicated batches.

    .venv/bin/python -m pytest -q tests/engine/test_cache_concurrency.py

Children are separate Python processes (``subprocess``), started together and released at once through a
"go" file, so they really do hit the same cache entry at the same time.
"""

from __future__ import annotations

import hashlib
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

TESTS = Path(__file__).resolve().parents[1]
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


def check_cache_files(root: Path) -> list[Path]:
    """Every batch file's bytes hash to the name it carries, and nothing half-written is left; returns them."""
    files = [p for p in root.rglob("*") if p.is_file()]
    leftovers = [p for p in files if p.name.startswith(".") or p.suffix in (".tmp", ".partial")]
    assert not leftovers, leftovers
    batches = [p for p in files if p.name.startswith("batch-")]
    for path in batches:
        assert hashlib.sha256(path.read_bytes()).hexdigest()[:16] == path.stem.rsplit("-", 1)[-1], path
    assert {p.name for p in files} - {p.name for p in batches} <= {"meta.json"} | {p.name for p in files
                                                                                    if p.suffix == ".lock"}
    return batches


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


def test_two_processes_extracting_the_same_texts_into_one_cache(tmp_path, model_folder):
    shared, go, texts = tmp_path / "shared", tmp_path / "go", tmp_path / "texts.json"
    texts.write_text(json.dumps(TEXTS))
    procs = [start(EXTRACT, model_folder, texts, BATCH_SIZE, tmp_path / f"{n}.npz", tmp_path / f"{n}.ready", go,
                   cache=shared) for n in "ab"]
    release_together(procs, [tmp_path / f"{n}.ready" for n in "ab"], go)
    stats = [json.loads(out) for out in finish(procs)]

    total = stats[0]["batches"]
    assert total == len(TEXTS) // BATCH_SIZE
    # one process computes, the other waits on the entry's lock and then reuses: no batch is computed twice
    assert stats[0]["computed"] + stats[1]["computed"] == total
    assert stats[0]["reused"] + stats[1]["reused"] == total
    ref = extract(layerscope.load_model(str(model_folder)), TEXTS, batch_size=BATCH_SIZE, cache=tmp_path / "fresh")
    assert ref.stats.batches_computed == total
    for got in (Activations.load(tmp_path / f"{n}.npz") for n in "ab"):
        assert got.fingerprint == ref.fingerprint and got.texts == TEXTS
        for p in ref.pooled:
            assert np.array_equal(got.pooled[p], ref.pooled[p])
        for key in ("nll_sum", "n_scored", "n_tokens"):
            assert np.array_equal(getattr(got, key), getattr(ref, key))
    assert len(check_cache_files(shared)) == total
    assert len(check_cache_files(tmp_path / "fresh")) == total


HAMMER = """
    import json, random, sys, time
    from pathlib import Path
    import numpy as np
    from layerscope.engine.cache import BatchStore

    folder, seed, ready, go, seconds = sys.argv[1:]
    rng = random.Random(int(seed))

    def arrays(b):
        return {"x": np.arange(40_000, dtype=np.float32) * (b + 1), "n": np.full(7, b, dtype=np.int64)}

    store = BatchStore(Path(folder), {"test": "hammer"})
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.001)
    counts = {"put": 0, "hit": 0, "miss": 0}
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        b = rng.randrange(3)
        if rng.random() < 0.4:
            store.put(b, arrays(b))
            counts["put"] += 1
            continue
        got = store.get(b)
        if got is None:
            counts["miss"] += 1
            continue
        want = arrays(b)
        if set(got) != set(want) or not all(np.array_equal(got[k], want[k]) for k in want):
            sys.exit(f"batch {b}: get returned a wrong or torn array")
        counts["hit"] += 1
    print(json.dumps(counts))
"""


def test_processes_hammering_put_and_get_on_the_same_batches(tmp_path):
    folder, go, n = tmp_path / "entry", tmp_path / "go", 3
    ready = [tmp_path / f"{i}.ready" for i in range(n)]
    procs = [start(HAMMER, folder, i, ready[i], go, 2.0, cache=tmp_path / "cache") for i in range(n)]
    release_together(procs, ready, go)
    counts = [json.loads(out) for out in finish(procs)]
    assert sum(c["put"] for c in counts) > 100 and sum(c["hit"] for c in counts) > 100, counts
    batches = check_cache_files(folder)
    assert {p.name.split("-")[1] for p in batches} == {"00000", "00001", "00002"}


def test_taking_the_lock_clears_temp_files_of_killed_writers_only(tmp_path):
    from layerscope.engine.cache import STALE_TEMP_S, BatchStore

    store = BatchStore(tmp_path / "entry", {"test": "temp"})
    old, live = store.folder / ".batch-00000-0123456789abcdef.npz.k1l2.tmp", store.folder / ".meta.json.x9y8.tmp"
    old.write_bytes(b"half a batch")
    live.write_bytes(b"being written")
    stale = time.time() - STALE_TEMP_S - 60
    os.utime(old, (stale, stale))
    with store.locked():
        assert not old.exists() and live.exists()
