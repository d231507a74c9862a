"""The cache environment: $LAYERSCOPE_CACHE a file, a read-only cache, an entry that cannot be read.

A complete read-only cache is read without a single write; anything that needs a write it cannot
take is one CacheError that names LAYERSCOPE_CACHE and the fix.

    .venv/bin/python -m pytest -q tests/engine/cache/test_cache_env.py
"""

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tiny
from layerscope import extract
from layerscope.engine.cache import entry as entry_module
from layerscope.engine.cache import store as store_module
from layerscope.engine.cache.store import LayerStore, Layout
from layerscope.errors import CacheError


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with the SHA-256 of its bytes, and its inode (a rewrite by rename shows)."""
    return {p.relative_to(folder).as_posix(): "dir" if p.is_dir() else
            f"{hashlib.sha256(p.read_bytes()).hexdigest()} {p.stat().st_ino}" for p in sorted(folder.rglob("*"))}


def entry(cache: Path) -> Path:
    """The one cache entry folder under ``cache``."""
    (folder,) = [p for p in cache.glob("activations/*/*") if p.is_dir()]
    return folder


class ForwardCounter:
    """Forward passes of ``model`` from now on (after the first extraction with it: see engine.forward.head's probe)."""

    def __init__(self, model):
        self.calls = 0
        model.register_forward_pre_hook(lambda *_: setattr(self, "calls", self.calls + 1))


@contextlib.contextmanager
def read_only(*folders: Path):
    """``folders`` and the files directly in them as on a read-only disk: no file can be created, renamed,
    removed or written (the store writes its arrays in place). Immutable (chattr +i) for root, whom permission
    bits do not stop; modes 555 and 444 otherwise."""
    root = os.geteuid() == 0
    if root and not shutil.which("chattr"):
        pytest.skip("running as root without chattr: no folder can be made read-only")
    files = [p for folder in folders for p in folder.iterdir() if p.is_file() and not p.is_symlink()]
    done = []
    try:
        for path in [*files, *folders]:
            mode = path.stat().st_mode & 0o777
            if root:
                if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
                    pytest.skip("chattr +i is not supported on this file system")
            else:
                path.chmod(0o555 if path.is_dir() else 0o444)
            done.append((path, mode))
        yield
    finally:
        for path, mode in reversed(done):
            if root:
                subprocess.run(["chattr", "-i", str(path)])
            else:
                path.chmod(mode)


def cache_folders(cache: Path) -> list[Path]:
    """The cache root, activations/ and every folder under it."""
    return [cache, cache / "activations", *sorted(p for p in (cache / "activations").rglob("*") if p.is_dir())]


def assert_same(a, b):
    assert a.fingerprint == b.fingerprint
    for p in a.pooled:
        np.testing.assert_array_equal(np.asarray(a.pooled[p]), np.asarray(b.pooled[p]))
        np.testing.assert_array_equal(a.pre_norm[p], b.pre_norm[p])
    np.testing.assert_array_equal(a.nll_sum, b.nll_sum)


def test_a_second_run_writes_nothing_not_even_meta_json(isolated_cache):
    lm = tiny.tiny_lm("llama")
    extract(lm, tiny.TEXTS, batch_size=4)
    (meta,) = isolated_cache.glob("activations/*/*/meta.json")
    assert isinstance(json.loads(meta.read_text())["settings"]["poolings"], list)
    before = snapshot(isolated_cache / "activations")
    extract(lm, tiny.TEXTS, batch_size=4)
    assert snapshot(isolated_cache / "activations") == before  # same bytes, same inodes: meta.json not rewritten


@pytest.mark.parametrize("lock_file", ["kept", "removed"])
def test_a_complete_read_only_cache_is_read_without_writing(isolated_cache, lock_file):
    lm = tiny.tiny_lm("llama")
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    if lock_file == "removed":  # a cache copied without its lock files: the lock cannot be created
        for lock in isolated_cache.glob("activations/*/*.lock"):
            lock.unlink()
    before = snapshot(isolated_cache / "activations")
    counter = ForwardCounter(lm.model)
    with read_only(*cache_folders(isolated_cache)):
        again = extract(lm, tiny.TEXTS, batch_size=4)
    assert counter.calls == 0 and again.stats.batches_reused == 3
    assert_same(clean, again)
    assert snapshot(isolated_cache / "activations") == before


@pytest.mark.parametrize("lock_file", ["kept", "removed"])
def test_a_read_only_cache_missing_a_batch_is_one_error_and_unchanged(isolated_cache, lock_file):
    lm = tiny.tiny_lm("llama")
    extract(lm, tiny.TEXTS, batch_size=4)
    journal = entry(isolated_cache) / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    assert len(lines) == 3
    journal.write_text(lines[0] + lines[2])  # the second batch was never finished
    if lock_file == "removed":
        for lock in isolated_cache.glob("activations/*/*.lock"):
            lock.unlink()
    before = snapshot(isolated_cache / "activations")
    with read_only(*cache_folders(isolated_cache)), pytest.raises(CacheError) as caught:
        extract(lm, tiny.TEXTS, batch_size=4)
    message = str(caught.value)
    assert "LAYERSCOPE_CACHE" in message and "--no-cache" in message and str(isolated_cache) in message
    assert "\n" not in message
    assert snapshot(isolated_cache / "activations") == before


def test_a_new_entry_in_a_read_only_cache_is_one_error(isolated_cache):
    (isolated_cache / "activations").mkdir()
    with read_only(isolated_cache, isolated_cache / "activations"), pytest.raises(CacheError) as caught:
        extract(tiny.tiny_lm("llama"), tiny.TEXTS, batch_size=4)
    assert "cannot create" in str(caught.value) and "set LAYERSCOPE_CACHE to another folder" in str(caught.value)
    assert list((isolated_cache / "activations").iterdir()) == []


@pytest.mark.parametrize("where", ["the cache", "a folder inside it"])
def test_cache_variable_naming_a_file_is_one_error_and_the_file_is_kept(tmp_path, monkeypatch, where):
    (tmp_path / "notes.txt").write_bytes(b"my notes\n")
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(tmp_path / "notes.txt" / ("" if where == "the cache" else "sub")))
    with pytest.raises(CacheError) as caught:
        extract(tiny.tiny_lm("llama"), tiny.TEXTS, batch_size=4)
    message = str(caught.value)
    assert f"{tmp_path / 'notes.txt'} is a file, not a folder" in message
    assert "set LAYERSCOPE_CACHE to another folder" in message and "--no-cache" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_bytes() == b"my notes\n"
    assert extract(tiny.tiny_lm("llama"), tiny.TEXTS[:2], cache=False).nll_sum.shape == (2,)  # --no-cache works


def test_a_cache_folder_given_in_python_that_is_a_file_says_cache_false(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(CacheError, match="pass another cache folder, or cache=False"):
        extract(tiny.tiny_lm("llama"), tiny.TEXTS, batch_size=4, cache=tmp_path / "f")
    assert (tmp_path / "f").read_text() == "x"


def test_an_unreadable_array_file_is_recomputed_and_replaced(isolated_cache, tmp_path, monkeypatch):
    """pooled_mean.npy cannot be read (root reads every file, so the store's reads of it are refused): it holds
    rows of every batch, so the entry is built again, and the same numbers come back."""
    lm = tiny.tiny_lm("llama")
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    victim = entry(isolated_cache) / "pooled_mean.npy"
    held = tmp_path / "held"
    os.link(victim, held)  # keeps the victim's inode alive, so a new file cannot get its number
    real_open = open

    def denied(path, *args, **kwargs):
        if os.path.exists(path) and os.stat(path).st_ino == held.stat().st_ino:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)
    with monkeypatch.context() as patched:  # not monkeypatch.undo(): that would drop the isolated cache too
        for module in (store_module, entry_module):  # the entry check reads headers, the store reads rows
            patched.setattr(module, "open", denied, raising=False)
        counter = ForwardCounter(lm.model)
        again = extract(lm, tiny.TEXTS, batch_size=4)
    assert counter.calls == 3 and again.stats.batches_computed == 3
    assert_same(clean, again)
    assert victim.stat().st_ino != held.stat().st_ino
    assert extract(lm, tiny.TEXTS, batch_size=4).stats.batches_computed == 0


@pytest.mark.parametrize("name", ["journal.jsonl", "pooled_mean.npy", "meta.json"])
def test_a_folder_where_a_store_file_should_be_is_one_error_and_kept(isolated_cache, name):
    lm = tiny.tiny_lm("llama")
    extract(lm, tiny.TEXTS, batch_size=4)
    victim = entry(isolated_cache) / name
    victim.unlink()
    victim.mkdir()
    (victim / "mine.txt").write_text("not layerscope's")
    with pytest.raises(CacheError) as caught:
        extract(lm, tiny.TEXTS, batch_size=4)
    message = str(caught.value)
    assert "is a directory" in message and str(victim.parent) in message and "LAYERSCOPE_CACHE" in message
    assert (victim / "mine.txt").read_text() == "not layerscope's"


def test_an_entry_is_as_readable_as_the_umask_allows(isolated_cache):
    extract(tiny.tiny_lm("llama"), tiny.TEXTS[:3], batch_size=4)
    mask = os.umask(0)
    os.umask(mask)
    folder = entry(isolated_cache)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~mask
    for path in folder.iterdir():
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path


LAYOUT = Layout(n_texts=3, n_states=2, d=4, layers=(0, 1), poolings=("mean", "last"))


def test_meta_with_tuples_matches_its_json_on_disk(tmp_path):
    folder, order = tmp_path / "entry", np.array([2, 0, 1])
    LayerStore.open(folder, LAYOUT, order, {"poolings": ("mean", "last"), "n": 3})
    before = snapshot(folder)
    LayerStore.open(folder, LAYOUT, order, {"poolings": ("mean", "last"), "n": 3})
    assert snapshot(folder) == before  # same bytes and inodes: the tuple meta matched its list on disk
    LayerStore.open(folder, LAYOUT, order, {"poolings": ("mean",), "n": 3})  # changed: written again
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["poolings"] == ["mean"] and meta["layout"]["poolings"] == ["mean", "last"]


def test_converting_a_model_in_a_read_only_cache_is_one_cache_error(tmp_path, monkeypatch):
    """A GGUF file not yet converted, and a cache whose models folder cannot be written: one CacheError naming
    the variable, and nothing written anywhere (no lock file, no partial folder)."""
    from layerscope.models.zoo import converted_gguf

    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(cache))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))  # the magic bytes pass; the write fails before any conversion
    with read_only(cache / "models"):
        with pytest.raises(CacheError, match=r"LAYERSCOPE_CACHE.*cannot convert the model into"):
            converted_gguf(gguf)
    assert list((cache / "models").iterdir()) == []
