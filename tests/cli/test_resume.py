"""``layerscope run`` killed with SIGKILL mid-extraction, then run again: it resumes from the cached batches and
writes exactly what an uninterrupted run writes.

    .venv/bin/python -m pytest -q tests/cli/test_resume.py
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tiny

N_CATEGORIES, N_PAIRS = 4, 40
TOTAL = 2 * N_CATEGORIES * N_PAIRS
"""Batches of one text each."""
KILL_AFTER = 20
"""Journalled batches to wait for before the kill: well after the start, well before the end."""


def start_run(model: Path, dataset: Path, out: Path, cache: Path) -> subprocess.Popen:
    """``proc = start_run(model, dataset, out, cache)``: ``layerscope run divergence`` in a new process."""
    cmd = [sys.executable, "-m", "layerscope.cli", "run", "divergence", "--model", str(model), "--dataset",
           str(dataset), "--batch-size", "1", "--out", str(out)]
    env = {**os.environ, "LAYERSCOPE_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen, timeout: float = 180) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out


def journalled(cache: Path) -> list[tuple[int, int]]:
    """The (start, stop) rows of every complete journal line of the cache's entries: one per stored batch."""
    ranges = []
    for journal in cache.glob("activations/*/*/journal.jsonl"):
        if journal.parent.name.startswith("."):  # an entry still being made, renamed into place any moment
            continue
        try:
            text = journal.read_text()
        except FileNotFoundError:  # renamed or rewritten between the glob and the read
            continue
        for line in text.splitlines(keepends=True):
            with contextlib.suppress(ValueError, KeyError):
                if line.endswith("\n"):  # a line the kill cut short does not count
                    ranges.append((json.loads(line)["start"], json.loads(line)["stop"]))
    return sorted(ranges)


def kill_mid_extraction(proc: subprocess.Popen, cache: Path, timeout: float = 120) -> int:
    """SIGKILL ``proc`` once ``KILL_AFTER`` batches are journalled; returns how many are after it died."""
    deadline = time.monotonic() + timeout
    while len(journalled(cache)) < KILL_AFTER:
        assert proc.poll() is None, f"the run ended before the kill:\n{proc.communicate()[1]}"
        assert time.monotonic() < deadline, "no batches were written"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return len(journalled(cache))


@pytest.mark.slow
def test_a_killed_run_resumes_and_writes_what_an_uninterrupted_run_writes(tmp_path):
    model = tiny.save(tmp_path / "tiny-llama", "llama", adds_bos=False)
    dataset = tmp_path / "pairs.json"
    dataset.write_text(json.dumps(tiny.pairs(N_CATEGORIES, N_PAIRS)))
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    out = runs / "div"

    done = kill_mid_extraction(start_run(model, dataset, out, cache), cache)
    assert KILL_AFTER <= done < TOTAL, "the kill must land mid-extraction"
    # the run folder is staged only after extraction: a kill before then leaves nothing beside --out
    assert not out.exists() and not list(runs.glob(".div*"))

    # a kill while the folder is being written leaves a hidden staging folder (SIGKILL runs no clean-up);
    # plant one: the rerun must not be disturbed by it, nor take anything from it
    stale = runs / ".div.stale123.partial"
    stale.mkdir(parents=True)
    (stale / "result.json").write_text("{half a file")

    # the rerun, and an uninterrupted run of the same command with a fresh cache, side by side
    rerun = start_run(model, dataset, out, cache)
    reference = start_run(model, dataset, tmp_path / "ref", tmp_path / "fresh-cache")
    finished(rerun)
    finished(reference)

    resumed = json.loads((out / "result.json").read_text())
    uninterrupted = json.loads((tmp_path / "ref" / "result.json").read_text())
    extraction = resumed["manifest"]["models"][0]["extraction"]
    assert extraction == {"batches": TOTAL, "computed": TOTAL - done, "reused": done}
    assert uninterrupted["manifest"]["models"][0]["extraction"]["computed"] == TOTAL
    assert (out / "table.csv").read_bytes() == (tmp_path / "ref" / "table.csv").read_bytes()
    assert resumed["summary"] == uninterrupted["summary"]
    assert journalled(cache) == [(i, i + 1) for i in range(TOTAL)]  # each text's row stored once
    assert sorted(p.name for p in runs.iterdir()) == [".div.stale123.partial", "div"]  # ignored, not removed
