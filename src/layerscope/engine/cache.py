"""On-disk store of finished extraction batches, so a rerun is free and a killed run resumes.

    store = BatchStore(paths.activations_dir() / fingerprint, meta)
    with store.locked():                  # one writer per entry, across processes
        arrays = store.get(3)             # None when missing or corrupt
        store.put(3, {"nll_sum": ...})    # atomic; the file name carries its SHA-256

Each batch is one ``batch-NNNNN-<sha256[:16]>.npz`` file written by rename, so a file
that exists is complete; on read its bytes are hashed again, and a file that no longer
matches its name (disk corruption, a truncated copy) is deleted and recomputed.

``get`` and ``put`` are safe without the lock too: a ``get`` racing a ``put`` or ``discard``
of the same batch in another process returns the old arrays, the new ones or None, never
a torn array or an error. The lock is what keeps two extractions from computing the same
batches twice. A writer killed mid-``put`` leaves a hidden temp file; ``locked`` removes
those once they are older than ``STALE_TEMP_S``.

Reading a complete entry writes nothing, so a read-only cache still serves it: ``meta.json``
is rewritten only when its contents change, and where the lock file cannot be created the
entry is read without the lock. The first write such a cache cannot take (a missing entry,
a batch to store, a lock it could not hold) is one :class:`CacheError` naming the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from ..errors import CacheError
from ..io import atomic_write_bytes, atomic_write_json, is_disk_full
from ..paths import cache_error
from .activations import npz_bytes

log = logging.getLogger(__name__)

STALE_TEMP_S = 600.0
"""A temp file this old is a killed writer's: a batch is written in well under a second."""


class BatchStore:
    def __init__(self, folder: Path, meta: dict[str, Any]):
        self.folder = Path(folder)
        self._cannot_write: CacheError | None = None
        """Why this store may not write (set when the meta or the lock could not be written), or None."""
        if not self.folder.is_dir():
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise cache_error(self.folder, exc, "create") from None
        meta_path = self.folder / "meta.json"
        meta = json.loads(json.dumps(meta))  # as it reads back from disk: tuples become lists
        if _read_json(meta_path) != meta:
            try:
                atomic_write_json(meta_path, meta)
            except OSError as exc:  # a read-only cache can still serve the entry's batches
                self._cannot_write = cache_error(meta_path, exc)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """``with store.locked(): ...``: hold the entry's lock (other processes wait), and clear stale temp files.
        Where the lock cannot be taken (a read-only cache) the block runs without it and may only read."""
        lock = FileLock(str(self.folder) + ".lock")
        try:
            lock.acquire()
        except OSError as exc:
            log.info("cannot lock %s (%s); reading the cache without the lock", lock.lock_file, exc)
            self._cannot_write = self._cannot_write or cache_error(lock.lock_file, exc, "lock")
            yield
            return
        try:
            self.remove_stale_temp_files()
            yield
        finally:
            lock.release()

    def remove_stale_temp_files(self, older_than_s: float = STALE_TEMP_S) -> None:
        """``store.remove_stale_temp_files()``: delete temp files (``.name.XXXX.tmp``) left by killed writers."""
        cutoff = time.time() - older_than_s
        for path in self.folder.glob(".*.tmp"):
            with contextlib.suppress(OSError):  # gone already, or not ours to remove
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    log.info("removed %s, left by a killed writer", path)

    def get(self, batch_no: int) -> dict[str, np.ndarray] | None:
        """``arrays = store.get(3)``: the stored arrays of batch 3, or None when it is missing or corrupt."""
        for path in sorted(self.folder.glob(f"batch-{batch_no:05d}-*.npz")):
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # replaced or discarded by another process since the glob
                continue
            except OSError as exc:  # unreadable, or a folder: recompute; put replaces it or says why it cannot
                log.warning("cannot read cache file %s (%s); recomputing that batch", path, exc.strerror)
                continue
            if hashlib.sha256(data).hexdigest()[:16] == path.stem.rsplit("-", 1)[-1]:
                try:
                    with np.load(io.BytesIO(data)) as z:
                        return {k: z[k] for k in z.files}
                except (OSError, ValueError, zipfile.BadZipFile):
                    pass
            log.warning("cache file %s is corrupt; recomputing that batch", path)
            with contextlib.suppress(OSError):  # a read-only cache keeps it; put says so if it must be replaced
                path.unlink(missing_ok=True)
        return None

    def discard(self, batch_no: int) -> None:
        """``store.discard(3)``: remove every stored file of batch 3 (a :class:`CacheError` if one cannot be)."""
        for path in self.folder.glob(f"batch-{batch_no:05d}-*.npz"):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise cache_error(path, exc, "replace") from None

    def put(self, batch_no: int, arrays: dict[str, np.ndarray]) -> None:
        """``store.put(3, {"nll_sum": x})``: replace batch 3's file by these arrays, atomically (write, then rename).
        A :class:`CacheError` when the cache cannot be written."""
        if self._cannot_write is not None:
            raise self._cannot_write
        data = npz_bytes(arrays)
        digest = hashlib.sha256(data).hexdigest()[:16]
        self.discard(batch_no)
        path = self.folder / f"batch-{batch_no:05d}-{digest}.npz"
        try:
            atomic_write_bytes(path, data)
        except OSError as exc:
            if is_disk_full(exc):  # disk full: not the cache's fault, reported as such
                raise
            raise cache_error(path, exc) from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
