"""An extraction's arrays on disk, layer-major, written batch by batch and read one layer at a time.

    store = LayerStore.open(folder, layout)        # created (atomically) or reopened
    with store.locked():                           # one writer per entry, across processes
        todo = store.missing()                     # (n_texts,) bool: rows not yet written and verified
        store.write(start, arrays)                 # rows [start, start + B) of every array
    store.pooled("mean")                           # a LayerStack reading pooled_mean.npy one layer at a time

Rows are in *store order*: texts sorted longest first (stable), which no batch plan changes, so a
batch is a contiguous run of rows and one layer of one batch is one contiguous write. Per pooling,
``pooled_<p>.npy`` is ``(n_stored_layers, n_texts, d)``: layer ``l``'s ``(n_texts, d)`` block is
contiguous. ``prenorm_<p>.npy`` is ``(n_texts, d)``; ``nll_sum``, ``n_scored``, ``n_tokens`` are ``(n_texts,)``.
Readers turn rows back into the caller's order.

Atomicity and corruption (the folder's side is :mod:`.entry`'s): the folder is created complete (sparse
files) under a temp name and renamed,
with the modes the umask allows (folder 0o777, files 0o666), while holding the entry's lock, the file
``<folder>.lock`` beside it (so processes opening a new entry at once build it once). After a batch's rows
are written, one line ``{"start", "stop", "sha256"}`` is appended to ``journal.jsonl``; only journalled
rows count as written. :meth:`locked` hashes every journalled range again, in the same read checking that
its stored floats are finite, and forgets one whose bytes no longer match (a killed writer, a damaged disk)
or that holds NaN or inf, so those rows are computed again; a torn last journal line is ignored. It also
removes temp files that killed writers left, beside the entry and in it. A ``meta.json`` that does not parse
is written again and the verified rows are kept; array files of another shape or dtype make the entry be
built again, and so does an ``order.npy`` that does not load as integers (``.npy`` files are read with
``allow_pickle=False``: an object array planted in the cache is never unpickled). Something that is not a file
where the store keeps one (a folder of the user's) is a
``CacheError``: the store never deletes it. A finite value too large for a float16 store is an
``ExtractionError``, raised before the batch is written. Reading never holds more than one layer's block.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path

import numpy as np
from filelock import FileLock

from ..errors import CacheError, ExtractionError, spelled
from ..io import atomic_write_bytes, is_disk_full
from ..paths import cache_error
from .entry import STALE_TEMP_S, Layout, create, data_offset, entry_state, lock_path, remove_stale, repair

__all__ = ["STALE_TEMP_S", "LayerStore", "Layout", "RowArrays", "StoreSource"]
from .layers import LayerSource, LayerStack

log = logging.getLogger(__name__)

FLOAT32_FIX = spelled("--store-dtype float32", "store_dtype='float32'")


class LayerStore:
    """Layer-major arrays in one folder; see the module docstring. Build with :meth:`open` or :meth:`temporary`."""

    def __init__(self, folder: Path, layout: Layout, order: np.ndarray, writable: CacheError | None = None):
        self.folder = Path(folder)
        self.layout = layout
        self.order = np.asarray(order, dtype=np.int64)
        """(n_texts,) the caller's position of each store row."""
        self._cannot_write = writable
        self._offsets = {key: data_offset(self.folder / f"{key}.npy") for key in layout.shapes()}
        self._done: list[tuple[int, int, str]] = []

    # ---- opening ---------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, folder: Path, layout: Layout, order: np.ndarray, meta: dict) -> LayerStore:
        """The store in ``folder`` for ``layout`` (rows in ``order``), created when missing or not matching (under
        the entry's lock); an unreadable ``meta.json`` is written again and the stored batches kept. ``CacheError``
        naming the fix when the cache cannot be written and the entry is missing, or when something that is not
        the store's file stands where it keeps one (it is left alone)."""
        folder = Path(folder)
        meta = json.loads(json.dumps({**meta, "layout": asdict(layout)}))
        if entry_state(folder, layout, order, meta) != "ok":
            repair(folder, layout, order, meta)
        on_disk = read_order(folder)
        if on_disk is None:  # a damaged order.npy (or one holding pickled objects, never unpickled): build again
            log.warning("%s is unreadable; building the cache entry again", folder / "order.npy")
            _rebuild(folder, layout, order, meta)
            on_disk = np.asarray(order, dtype=np.int64)
        store = cls(folder, layout, on_disk)
        if not np.array_equal(store.order, order):
            raise CacheError(f"cache entry {folder} holds another row order than these texts give: remove the "
                             "folder (it is recomputed)")
        return store

    @classmethod
    def temporary(cls, layout: Layout, order: np.ndarray) -> LayerStore:
        """A store in a fresh temp folder, removed once no stack reads it any more (``extract(cache=False)``)."""
        folder = Path(tempfile.mkdtemp(prefix="layerscope-acts-")) / "store"
        create(folder, layout, order, {"layout": asdict(layout)})
        store = cls(folder, layout, order)
        store._cleanup = weakref.finalize(store, shutil.rmtree, folder.parent, True)
        return store

    # ---- writing ---------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """``with store.locked(): ...``: hold the entry's lock, clear killed writers' temp files (beside the entry
        and in it), and read the journal, verifying every range (its hash, and that its floats are finite). Where
        the lock cannot be taken (a read-only cache) the block runs without it and may only read."""
        lock = FileLock(lock_path(self.folder))
        try:
            lock.acquire()
        except OSError as exc:
            log.info("cannot lock %s (%s); reading the cache without the lock", lock.lock_file, exc)
            self._cannot_write = self._cannot_write or cache_error(lock.lock_file, exc, "lock")
            self._done = self._verified()
            yield
            return
        try:
            remove_stale(self.folder.parent)
            remove_stale(self.folder)  # a journal or meta.json rewrite that was killed half-way
            self._done = self._verified()
            yield
        finally:
            lock.release()

    def missing(self) -> np.ndarray:
        """(n_texts,) bool in store order: rows no verified journal line covers."""
        todo = np.ones(self.layout.n_texts, dtype=bool)
        for start, stop, _ in self._done:
            todo[start:stop] = False
        return todo

    def write(self, start: int, arrays: dict[str, np.ndarray]) -> None:
        """Write rows ``[start, start + B)``: ``pooled_<p>`` (n_stored_layers, B, d), ``prenorm_<p>`` (B, d), and
        (B,) ``nll_sum``, ``n_scored``, ``n_tokens``; then journal them. ``CacheError`` when the cache is read-only."""
        if self._cannot_write is not None:
            raise self._cannot_write
        shapes = self.layout.shapes()
        if set(arrays) != set(shapes):
            raise ValueError(f"a batch must hold exactly {sorted(shapes)}, got {sorted(arrays)}")
        stop = start + len(arrays["nll_sum"])
        with np.errstate(over="ignore"):  # a float16 overflow is checked (and named) below
            cast = {key: np.asarray(arrays[key], dtype=dtype) for key, (_, dtype) in shapes.items()}
        if self.layout.store_dtype == "float16":
            self._check_float16(start, arrays, cast)
        digest = hashlib.sha256()
        try:
            for key in sorted(shapes):
                with open(self.folder / f"{key}.npy", "r+b") as f:
                    for offset, chunk in self._chunks(key, start, stop, cast[key]):
                        data = chunk.tobytes()
                        os.pwrite(f.fileno(), data, offset)
                        digest.update(data)
            line = json.dumps({"start": start, "stop": stop, "sha256": digest.hexdigest()})
            with open(self.folder / "journal.jsonl", "a") as f:
                f.write(line + "\n")
        except OSError as exc:
            if is_disk_full(exc):
                raise
            raise cache_error(self.folder, exc) from None
        self._done.append((start, stop, digest.hexdigest()))

    def _check_float16(self, start: int, arrays: dict[str, np.ndarray], cast: dict[str, np.ndarray]) -> None:
        """``ExtractionError`` naming the text (and hidden state) of the first finite value of ``arrays`` that
        became inf in its float16 ``cast``; one ``isfinite`` pass per array when there is none."""
        for key in sorted(cast):
            if cast[key].dtype != np.float16 or np.isfinite(cast[key]).all():
                continue
            over = np.argwhere(~np.isfinite(cast[key]) & np.isfinite(np.asarray(arrays[key])))
            if not len(over):
                continue  # NaN or inf that was already there, not made by the cast
            where = tuple(int(i) for i in over[np.argmin(self.order[start + over[:, -2]])])  # first caller text
            kind, pooling = key.split("_", 1)
            vector = (f"{pooling} pooled vector of hidden state {self.layout.layers[where[0]]}" if kind == "pooled"
                      else f"{pooling} pooled vector before the final norm")
            value = np.asarray(arrays[key])[where]
            raise ExtractionError(f"text {self.order[start + where[-2]]}'s {vector} holds {value:.6g}, beyond the "
                                  f"largest float16 value ({np.finfo(np.float16).max:.0f}): a float16 store would "
                                  f"keep inf, so the batch was not stored; store vectors as float32 ({FLOAT32_FIX})")

    def _chunks(self, key: str, start: int, stop: int, array: np.ndarray | None = None):
        """(file offset, rows) of ``key``'s rows ``[start, stop)``, in file order; ``array`` holds them (to write)."""
        (shape, dtype) = self.layout.shapes()[key]
        item = np.dtype(dtype).itemsize
        base = self._offsets[key]
        if len(shape) == 3:  # (layers, n, d): one contiguous run per layer
            per_row = shape[2] * item
            for slot in range(shape[0]):
                offset = base + (slot * shape[1] + start) * per_row
                yield offset, (None if array is None else np.ascontiguousarray(array[slot]))
        else:
            per_row = (shape[1] if len(shape) == 2 else 1) * item
            yield base + start * per_row, (None if array is None else np.ascontiguousarray(array))

    def _verified(self) -> list[tuple[int, int, str]]:
        """The journal's ranges whose bytes still hash to what was written; a damaged one is dropped."""
        try:
            lines = (self.folder / "journal.jsonl").read_text().splitlines()
        except OSError:
            return []
        good, bad = [], {"damaged": 0, "holding NaN or inf": 0}
        for line in lines:
            try:
                entry = json.loads(line)
                start, stop, sha = int(entry["start"]), int(entry["stop"]), str(entry["sha256"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn line from a killed writer
            digest = self._hash(start, stop) if 0 <= start < stop <= self.layout.n_texts else ""
            if digest == sha:
                good.append((start, stop, sha))
            else:
                bad["holding NaN or inf" if digest is None else "damaged"] += 1
        if any(bad.values()):
            log.warning("stored batches in %s: %s; computing them again", self.folder,
                        ", ".join(f"{n} {why}" for why, n in bad.items() if n))
            if self._cannot_write is None:
                with contextlib.suppress(OSError):
                    atomic_write_bytes(self.folder / "journal.jsonl",
                                       "".join(json.dumps({"start": s, "stop": e, "sha256": h}) + "\n"
                                               for s, e, h in good).encode())
        return good

    def _hash(self, start: int, stop: int) -> str | None:
        """SHA-256 of rows ``[start, stop)`` of every array, as :meth:`write` journals it; ``""`` when they cannot
        be read in full, None when a stored float among them is NaN or inf (checked in the same read)."""
        digest = hashlib.sha256()
        shapes = self.layout.shapes()
        try:
            for key in sorted(shapes):
                shape, dtype = shapes[key]
                floats = np.dtype(dtype).kind == "f"
                size = (stop - start) * (shape[-1] if len(shape) > 1 else 1) * np.dtype(dtype).itemsize
                with open(self.folder / f"{key}.npy", "rb") as f:
                    for offset, _ in self._chunks(key, start, stop):
                        data = os.pread(f.fileno(), size, offset)
                        if len(data) != size:
                            return ""
                        if floats and not np.isfinite(np.frombuffer(data, dtype=dtype)).all():
                            return None
                        digest.update(data)
        except OSError:
            return ""
        return digest.hexdigest()

    # ---- reading ---------------------------------------------------------------------------------------------
    def pooled(self, pooling: str) -> LayerStack:
        """One pooling's vectors in the caller's row order, read one layer at a time."""
        return LayerStack(StoreSource(self, pooling))

    def pre_norm(self) -> RowArrays:
        """{pooling: (n_texts, d) float32} of the last block's output before the final norm, read on each access."""
        return RowArrays(self, {p: f"prenorm_{p}" for p in self.layout.poolings})

    def read_rows(self, key: str) -> np.ndarray:
        """A whole (n_texts,) or (n_texts, d) array in the caller's row order (float32 for stored vectors)."""
        shape, dtype = self.layout.shapes()[key]
        stored = _read(self.folder / f"{key}.npy", self._offsets[key], shape, dtype)
        out = np.empty(shape, dtype=np.float32 if len(shape) == 2 else dtype)
        out[self.order] = stored
        return out

    def read_layer(self, pooling: str, slot: int) -> np.ndarray:
        """(n_texts, d) float32: stored layer ``slot`` of ``pooling``, in the caller's row order."""
        n, d = self.layout.n_texts, self.layout.d
        item = np.dtype(self.layout.store_dtype).itemsize
        offset = self._offsets[f"pooled_{pooling}"] + slot * n * d * item
        block = _read(self.folder / f"pooled_{pooling}.npy", offset, (n, d), self.layout.store_dtype)
        out = np.empty((n, d), dtype=np.float32)
        out[self.order] = block
        return out


class StoreSource(LayerSource):
    """One pooling of a :class:`LayerStore`, for a :class:`LayerStack`; keeps the last layer it read."""

    def __init__(self, store: LayerStore, pooling: str):
        self.store, self.pooling = store, pooling
        layout = store.layout
        self.n_texts, self.n_states, self.d, self.layers = layout.n_texts, layout.n_states, layout.d, layout.layers
        self._slot = {k: i for i, k in enumerate(layout.layers)}
        self._last: tuple[int, np.ndarray] | None = None

    def read(self, layer: int) -> np.ndarray:
        layer = self.check_layer(layer)
        if self._last is None or self._last[0] != layer:
            self._last = (layer, self.store.read_layer(self.pooling, self._slot[layer]))
        return self._last[1]

    def __getstate__(self):
        return {**self.__dict__, "_last": None}


class RowArrays(Mapping):
    """A read-only mapping whose values are read from a :class:`LayerStore` when asked for, not kept."""

    def __init__(self, store: LayerStore, keys: dict[str, str]):
        self.store, self.keys = store, keys

    def __getitem__(self, name: str) -> np.ndarray:
        return self.store.read_rows(self.keys[name])

    def __iter__(self):
        return iter(self.keys)

    def __len__(self) -> int:
        return len(self.keys)


def _read(path: Path, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Read ``shape`` values at ``offset`` with plain file reads (no memory map: pages stay out of this process)."""
    out = np.empty(shape, dtype=dtype)
    with open(path, "rb") as f:
        f.seek(offset)
        if f.readinto(memoryview(out).cast("B")) != out.nbytes:
            raise CacheError(f"cache file {path} is shorter than its header says: remove its folder "
                             f"{path.parent} (it is recomputed)")
    return out




def read_order(folder: Path) -> np.ndarray | None:
    """``order.npy`` of the entry ``folder`` (1-D integers), or ``None`` when it is missing, damaged or anything
    else; an object array in it is refused by numpy without unpickling (``allow_pickle=False``)."""
    try:
        order = np.load(folder / "order.npy", allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    return order if order.ndim == 1 and np.issubdtype(order.dtype, np.integer) else None


def _rebuild(folder: Path, layout: Layout, order: np.ndarray, meta: dict) -> None:
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
