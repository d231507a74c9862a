"""The cache environment: $LAYERSCOPE_CACHE a file, a read-only cache, an entry that cannot be read.

A complete read-only cache is read without a single write; anything that needs a write it cannot
take is one CacheError that names LAYERSCOPE_CACHE and the fix.
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
from layerscope.engine.cache import BatchStore
from layerscope.errors import CacheError


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with the SHA-256 of its bytes, and its inode (a rewrite by rename shows)."""
    return {p.relative_to(folder).as_posix(): "dir" if p.is_dir() else
            f"{hashlib.sha256(p.read_bytes()).hexdigest()} {p.stat().st_ino}" for p in sorted(folder.rglob("*"))}


def entry_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("activations/*/*/*"))


class ForwardCounter:
    def __init__(self, model):
        self.calls = 0
        model.register_forward_pre_hook(lambda *_: setattr(self, "calls", self.calls + 1))


@contextlib.contextmanager
def read_only(*folders: Path):
    """No file can be created, renamed or removed in ``folders``: immutable (chattr +i) for root, whom
    permission bits do not stop; mode 555 otherwise."""
    root = os.geteuid() == 0
    if root and not shutil.which("chattr"):
        pytest.skip("running as root without chattr: no folder can be made read-only")
    done = []
    try:
        for folder in folders:
            if root:
                if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
                    pytest.skip("chattr +i is not supported on this file system")
            else:
                folder.chmod(0o555)
            done.append(folder)
        yield
    finally:
        for folder in done:
            if root:
                subprocess.run(["chattr", "-i", str(folder)])
            else:
                folder.chmod(0o755)


def cache_folders(cache: Path) -> list[Path]:
    """The cache root, activations/ and every folder under it."""
    return [cache, cache / "activations", *sorted(p for p in (cache / "activations").rglob("*") if p.is_dir())]


def assert_same(a, b):
    assert a.fingerprint == b.fingerprint
    for p in a.pooled:
        np.testing.assert_array_equal(a.pooled[p], b.pooled[p])
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


def test_a_read_only_cache_missing_a_batch_is_one_error_and_unchanged(isolated_cache):
    lm = tiny.tiny_lm("llama")
    extract(lm, tiny.TEXTS, batch_size=4)
    sorted(isolated_cache.glob("activations/*/*/batch-00001-*.npz"))[0].unlink()
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


def test_an_unreadable_batch_file_is_recomputed_and_replaced(isolated_cache, monkeypatch):
    lm = tiny.tiny_lm("llama")
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    victim = sorted(isolated_cache.glob("activations/*/*/batch-00002-*.npz"))[0]
    read_bytes = Path.read_bytes

    def denied(path):
        if path == victim:
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)
    monkeypatch.setattr(Path, "read_bytes", denied)  # root reads every file; a normal user may not
    counter = ForwardCounter(lm.model)
    again = extract(lm, tiny.TEXTS, batch_size=4)
    assert counter.calls == 1 and again.stats.batches_computed == 1
    assert_same(clean, again)
    assert len(list(isolated_cache.glob("activations/*/*/batch-*.npz"))) == 3


def test_a_folder_where_a_batch_file_should_be_is_one_error_and_kept(isolated_cache):
    lm = tiny.tiny_lm("llama")
    extract(lm, tiny.TEXTS, batch_size=4)
    victim = sorted(isolated_cache.glob("activations/*/*/batch-00000-*.npz"))[0]
    victim.unlink()
    victim.mkdir()
    (victim / "mine.txt").write_text("not layerscope's")
    with pytest.raises(CacheError) as caught:
        extract(lm, tiny.TEXTS, batch_size=4)
    assert f"cannot replace {victim}: is a directory" in str(caught.value)
    assert "LAYERSCOPE_CACHE" in str(caught.value)
    assert (victim / "mine.txt").read_text() == "not layerscope's"


def test_a_folder_where_meta_json_should_be_still_reads_and_refuses_writes(tmp_path):
    folder = tmp_path / "entry"
    BatchStore(folder, {"n": 1}).put(0, {"x": np.arange(3)})
    (folder / "meta.json").unlink()
    (folder / "meta.json").mkdir()
    store = BatchStore(folder, {"n": 1})
    np.testing.assert_array_equal(store.get(0)["x"], np.arange(3))
    with pytest.raises(CacheError, match="meta.json"):
        store.put(1, {"x": np.arange(2)})
    assert sorted(p.name for p in folder.iterdir()) == ["batch-00000-" + next(folder.glob("batch-*")).stem[-16:]
                                                        + ".npz", "meta.json"]


def test_meta_with_tuples_matches_its_json_on_disk(tmp_path):
    folder = tmp_path / "entry"
    BatchStore(folder, {"poolings": ("mean", "last"), "n": 2})
    inode = (folder / "meta.json").stat().st_ino
    BatchStore(folder, {"poolings": ("mean", "last"), "n": 2})
    assert (folder / "meta.json").stat().st_ino == inode
    BatchStore(folder, {"poolings": ("mean",), "n": 2})  # changed: rewritten
    text = (folder / "meta.json").read_text()
    assert text.count('"mean"') == 1 and '"last"' not in text


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
