"""A store entry's folder on disk: what it holds, built complete under a lock, checked, repaired.

    layout = Layout(n_texts, n_states, d, layers, poolings)  # the arrays and their shapes
    if entry_state(folder, layout, order, meta) != "ok":      # "meta" (only meta.json unreadable) or "build"
        repair(folder, layout, order, meta)                   # under <folder>.lock: rewrite meta.json or build
    remove_stale(folder)                                      # temp files a killed writer left

:mod:`layerscope.engine.cache.store` reads and writes the rows of an entry; this module makes the folder they live
in. A folder is built complete (sparse files) under a temp name with the modes the umask allows, then renamed
into place, while holding the lock file beside it. Something in the folder that the store does not write (a
user's folder or file) is a ``CacheError`` and is never deleted.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

from ...errors import CacheError, DiskFullError
from ...io import atomic_write_json
from ...jsonfile import read_json
from ...paths import cache_error

log = logging.getLogger(__name__)

STALE_TEMP_S = 600.0
"""A temp folder or file this old is a killed writer's."""

SCALARS = {"nll_sum": "float64", "n_scored": "int64", "n_tokens": "int64"}
"""Per-text arrays, (n_texts,), and their dtypes."""

@dataclass(frozen=True)
class Layout:
    """What a store holds: sizes, which hidden states and poolings, how pooled vectors are stored."""

    n_texts: int
    n_states: int
    """Hidden states 0 .. n_layers, stored or not."""
    d: int
    layers: tuple[int, ...]
    poolings: tuple[str, ...]
    store_dtype: str = "float32"

    def shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """file key -> (shape, dtype) of every array."""
        out = {f"pooled_{p}": ((len(self.layers), self.n_texts, self.d), self.store_dtype) for p in self.poolings}
        out.update({f"prenorm_{p}": ((self.n_texts, self.d), self.store_dtype) for p in self.poolings})
        out.update({k: ((self.n_texts,), dtype) for k, dtype in SCALARS.items()})
        return out


def data_offset(path: Path) -> int:
    return _header(path)[1]


def _header(path: Path) -> tuple[tuple, int]:
    """((shape, fortran_order, dtype), data offset) of the ``.npy`` file ``path``; ValueError when it is not one."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        header = read_header(f)
        return header, f.tell()


def lock_path(folder: Path) -> str:
    """The entry's lock file, beside it (it can be taken before the folder exists)."""
    return str(folder) + ".lock"


def entry_state(folder: Path, layout: Layout, order: np.ndarray, meta: dict) -> str:
    """``"ok"``; ``"meta"`` when only ``meta.json`` is unreadable (the arrays fit ``layout``, ``order.npy`` is
    ``order``); else ``"build"``. ``CacheError`` when a name the store keeps a file under is something else."""
    _check_kinds(folder, layout)
    if not _files_fit(folder, layout):
        return "build"
    on_disk = _read_json(folder / "meta.json")
    if on_disk == meta:
        return "ok"
    try:
        same_order = on_disk is None and np.array_equal(np.load(folder / "order.npy", allow_pickle=False), order)
    except (OSError, ValueError):
        same_order = False
    return "meta" if same_order else "build"


def repair(folder: Path, layout: Layout, order: np.ndarray, meta: dict) -> None:
    """Under the entry's lock, look again (another process may have built it meanwhile), then write ``meta.json``
    again or build the entry."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(lock_path(folder))
        lock.acquire()
    except OSError as exc:
        raise cache_error(folder, exc, "create") from None
    try:
        state = entry_state(folder, layout, order, meta)
        if state == "meta":
            log.warning("%s is unreadable; writing it again and keeping the stored batches", folder / "meta.json")
            try:
                atomic_write_json(folder / "meta.json", meta)
            except OSError as exc:
                raise cache_error(folder / "meta.json", exc) from None
        elif state == "build":
            create(folder, layout, order, meta)
    finally:
        lock.release()


def _check_kinds(folder: Path, layout: Layout) -> None:
    """``CacheError`` when ``folder`` or a name in it where the store keeps a file is something else (a folder of
    the user's, say): it is left alone, never replaced."""
    if folder.exists() and not folder.is_dir():
        raise _not_ours(folder, folder, "is a file, not a folder")
    for name in (*(f"{key}.npy" for key in layout.shapes()), "order.npy", "meta.json", "journal.jsonl"):
        try:
            mode = (folder / name).stat().st_mode
        except OSError:
            continue  # missing or unreadable: the entry is built again
        if stat.S_ISDIR(mode):
            raise _not_ours(folder, folder / name, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(mode):
            raise _not_ours(folder, folder / name, "is not a regular file")


def _check_replaceable(folder: Path) -> None:
    """``CacheError`` when the entry ``folder``, about to be built again, holds something the store does not
    write (a folder, a file of another name): it is left alone, never deleted."""
    for path in folder.iterdir():
        if path.name.startswith(".") and path.name.endswith(".tmp"):
            continue  # a killed writer's temp file
        if path.is_dir():
            raise _not_ours(folder, path, os.strerror(errno.EISDIR))
        if not (path.suffix == ".npy" or path.name in ("meta.json", "journal.jsonl")):
            raise _not_ours(folder, path, "is not a file layerscope writes")


def _not_ours(folder: Path, path: Path, what: str) -> CacheError:
    """The error for ``path``, which is not what the store keeps there (``what`` it is), in the entry ``folder``."""
    base = cache_error(path, OSError(0, what), "use")
    where = "it away" if path == folder else f"{path.name} out of the cache entry {folder}"
    return CacheError(f"{base}; or move {where} (layerscope leaves it alone; without it the entry is repaired or "
                      "computed again)")


def create(folder: Path, layout: Layout, order: np.ndarray, meta: dict) -> None:
    """Build the folder complete under a temp name, then put it in place (replacing a stale or damaged one).
    Hold the entry's lock. ``CacheError`` (and nothing deleted) when the old folder holds what the store does not
    write."""
    try:
        if folder.exists():
            _check_replaceable(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = _new_folder(folder.parent, f".{folder.name[:16]}.", ".tmp")
    except OSError as exc:
        raise cache_error(folder, exc, "create") from None
    try:
        for key, (shape, dtype) in layout.shapes().items():
            with open(tmp / f"{key}.npy", "wb") as f:  # a header, then zeros the file system need not store
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                          "shape": shape}
                np.lib.format.write_array_header_1_0(f, header)
                f.truncate(f.tell() + int(np.prod(shape)) * np.dtype(dtype).itemsize)
        np.save(tmp / "order.npy", np.asarray(order, dtype=np.int64))
        (tmp / "journal.jsonl").write_text("")
        atomic_write_json(tmp / "meta.json", meta)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except (OSError, DiskFullError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise cache_error(folder, exc, "create") from None


def _new_folder(parent: Path, prefix: str, suffix: str) -> Path:
    """A new empty folder ``parent/<prefix>XXXXXXXX<suffix>``, with the modes the umask allows (``mkdtemp``'s
    is private, and the entry it becomes should be as readable as any other folder the user makes)."""
    while True:
        path = parent / f"{prefix}{os.urandom(4).hex()}{suffix}"
        try:
            path.mkdir(mode=0o777)
            return path
        except FileExistsError:
            continue


def _files_fit(folder: Path, layout: Layout) -> bool:
    """Whether every array file is there with the layout's shape and dtype and its full size (a truncated or
    reshaped copy is rebuilt)."""
    try:
        for key, (shape, dtype) in layout.shapes().items():
            path = folder / f"{key}.npy"
            header, offset = _header(path)
            if header != (shape, False, np.dtype(dtype)):
                return False
            if path.stat().st_size < offset + int(np.prod(shape)) * np.dtype(dtype).itemsize:
                return False
        return (folder / "order.npy").is_file()
    except (OSError, ValueError):
        return False


def remove_stale(parent: Path, older_than_s: float = STALE_TEMP_S) -> None:
    """Delete temp folders and files (``.name.XXXX.tmp``) that killed writers left in ``parent``."""
    cutoff = time.time() - older_than_s
    for path in parent.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < cutoff:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
                log.info("removed %s, left by a killed writer", path)


def _read_json(path: Path):
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def json_copy(meta: dict) -> dict:
    """``meta`` as it reads back from JSON (tuples become lists), to compare with a ``meta.json`` on disk."""
    return json.loads(json.dumps(meta))


def read_order(folder: Path) -> np.ndarray | None:
    """``order.npy`` of the entry ``folder`` (1-D integers), or ``None`` when it is missing, damaged or anything
    else; an object array in it is refused by numpy without unpickling (``allow_pickle=False``)."""
    try:
        order = np.load(folder / "order.npy", allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    return order if order.ndim == 1 and np.issubdtype(order.dtype, np.integer) else None


def rebuild(folder: Path, layout: Layout, order: np.ndarray, meta: dict) -> None:
    """Under the entry's lock, build ``folder`` again unless another process already has (its rows recomputed)."""
    try:
        lock = FileLock(lock_path(folder))
        lock.acquire()
    except OSError as exc:
        raise cache_error(folder, exc, "create") from None
    try:
        if read_order(folder) is None:
            create(folder, layout, order, meta)
    finally:
        lock.release()
