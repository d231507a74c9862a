"""An extraction's arrays on disk, layer-major, written batch by batch and read one layer at a time.

    store = LayerStore.open(folder, layout)        # created (atomically) or reopened
    with store.locked():                           # one writer per entry, across processes
        todo = store.missing()                     # (n_texts,) bool: rows no journal line covers
        store.write(start, arrays)                 # rows [start, start + B) of every array, then their journal line
    store.pooled("mean")                           # a LayerStack reading pooled_mean.npy one layer at a time
    store.heal = recompute                         # recompute(store, todo) when a read finds damaged rows

Rows are in *store order*: texts sorted longest first (stable), which no batch plan changes, so a
batch is a contiguous run of rows and one layer of one batch is one contiguous write. Per pooling,
``pooled_<p>.npy`` is ``(n_stored_layers, n_texts, d)``: layer ``l``'s ``(n_texts, d)`` block is
contiguous. ``prenorm_<p>.npy`` is ``(n_texts, d)``; ``nll_sum``, ``n_scored``, ``n_tokens`` are ``(n_texts,)``.
Readers turn rows back into the caller's order.

Writing goes at the disk's speed: each chunk is written from the array's own buffer (``os.pwrite``, no copy)
and hashed with XXH3 while its bytes are in the cache, the files of a batch side by side on a few threads; then
one journal line holds every chunk's checksum (:mod:`.journal`). Only journalled rows count as written.

Checking is lazy. Opening an entry reads its journal and nothing else, so a cache hit costs the same for ten
texts or a million. A chunk's bytes are checked against their checksum the first time a reader reads them (a
layer of a pooling, the NLLs, the pre-norm vectors). A chunk that no longer matches (a damaged disk, a changed
file), or that holds NaN or inf (which no extraction stores), drops its batch's journal line, and the batch is
computed again at once by :attr:`LayerStore.heal` (``extract`` sets it while its model is alive; otherwise one
``CacheError`` says to run the extraction again) before the read returns.
:meth:`verify` checks every journalled byte at once.

Atomicity (the folder's side is :mod:`.entry`'s): the folder is created complete (sparse files) under a temp name
and renamed, with the modes the umask allows (folder 0o777, files 0o666), while holding the entry's lock, the file
``<folder>.lock`` beside it (so processes opening a new entry at once build it once). :meth:`locked` removes temp
files that killed writers left, beside the entry and in it, and drops journal lines that later ones superseded. A
``meta.json`` that does not parse is written again and the journalled rows are kept; array files of another shape
or dtype make the entry be built again, and so does an ``order.npy`` that does not load as integers (``.npy``
files are read with ``allow_pickle=False``: an object array planted in the cache is never unpickled). Something
that is not a file where the store keeps one (a folder of the user's) is a ``CacheError``: the store never deletes
it. A finite value too large for a float16 store is an ``ExtractionError``, raised before the batch is journalled.
Reading never holds more than one layer's block.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
from filelock import FileLock

from ...errors import CacheError, DiskFullError, ExtractionError, spelled
from ...io import atomic_write_bytes
from ...paths import cache_error
from . import journal
from .entry import (
    STALE_TEMP_S,
    Layout,
    create,
    data_offset,
    entry_state,
    json_copy,
    lock_path,
    read_order,
    rebuild,
    remove_stale,
    repair,
)
from .files import pwrite_all, read_block, writers
from .layers import LayerStack
from .views import RowArrays, StoreSource

__all__ = ["STALE_TEMP_S", "LayerStore", "Layout", "RowArrays", "StoreSource"]

log = logging.getLogger(__name__)

FLOAT32_FIX = spelled("--store-dtype float32", "store_dtype='float32'")

class LayerStore:
    """Layer-major arrays in one folder; see the module docstring. Build with :meth:`open` or :meth:`temporary`."""

    heal: Callable[[LayerStore, np.ndarray], None] | None = None
    """``heal(store, todo)``: compute and :meth:`write` the rows ``todo`` ((n_texts,) bool, store order) again,
    holding the entry's lock; called when a read finds stored bytes that no longer match their checksum."""

    def __init__(self, folder: Path, layout: Layout, order: np.ndarray, writable: CacheError | None = None):
        self.folder = Path(folder)
        self.layout = layout
        self.order = np.asarray(order, dtype=np.int64)
        """(n_texts,) the caller's position of each store row."""
        self._cannot_write = writable
        self._offsets = {key: data_offset(self.folder / f"{key}.npy") for key in layout.shapes()}
        self._done: list[journal.Entry] = []
        self._checked: set[tuple[str, int, int, int]] = set()
        """(key, slot, start, stop) chunks whose bytes matched their checksum since they were journalled."""
        self._lock = FileLock(lock_path(self.folder), thread_local=False)  # one lock object: re-entrant

    def __getstate__(self):
        return {**self.__dict__, "heal": None, "_lock": None, "_cleanup": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = FileLock(lock_path(self.folder), thread_local=False)

    # ---- opening ---------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, folder: Path, layout: Layout, order: np.ndarray, meta: dict) -> LayerStore:
        """The store in ``folder`` for ``layout`` (rows in ``order``), created when missing or not matching (under
        the entry's lock); an unreadable ``meta.json`` is written again and the stored batches kept. ``CacheError``
        naming the fix when the cache cannot be written and the entry is missing, or when something that is not
        the store's file stands where it keeps one (it is left alone)."""
        folder = Path(folder)
        meta = json_copy({**meta, "layout": asdict(layout)})
        if entry_state(folder, layout, order, meta) != "ok":
            repair(folder, layout, order, meta)
        on_disk = read_order(folder)
        if on_disk is None:  # a damaged order.npy (or one holding pickled objects, never unpickled): build again
            log.warning("%s is unreadable; building the cache entry again", folder / "order.npy")
            rebuild(folder, layout, order, meta)
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

    # ---- the journal -----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """``with store.locked(): ...``: hold the entry's lock, clear killed writers' temp files (beside the entry
        and in it), and read the journal (no stored byte is read). Where the lock cannot be taken (a read-only
        cache) the block runs without it and may only read."""
        try:
            self._lock.acquire()
        except OSError as exc:
            log.info("cannot lock %s (%s); reading the cache without the lock", self._lock.lock_file, exc)
            self._cannot_write = self._cannot_write or cache_error(self._lock.lock_file, exc, "lock")
            self._load_journal()
            yield
            return
        try:
            if self._lock.lock_counter == 1:
                remove_stale(self.folder.parent)
                remove_stale(self.folder)  # a journal or meta.json rewrite that was killed half-way
            self._load_journal()
            yield
        finally:
            self._lock.release()

    def _load_journal(self) -> None:
        """Read the journal; rewrite it without superseded or unusable lines when the lock is held."""
        path = self.folder / "journal.jsonl"
        entries, lines = journal.parse(path, self.layout.n_texts)
        if entries != self._done:
            self._checked = {c for c in self._checked if any((c[2], c[3]) == (e.start, e.stop) for e in entries)}
        self._done = entries
        if lines != len(entries) and self._cannot_write is None and self._lock.is_locked:
            self._rewrite_journal()

    def _rewrite_journal(self) -> None:
        """Write the journal again holding only ``self._done`` (best effort: a later line supersedes a stale one)."""
        with contextlib.suppress(OSError, DiskFullError):
            atomic_write_bytes(self.folder / "journal.jsonl", journal.text(self._done))

    def missing(self) -> np.ndarray:
        """(n_texts,) bool in store order: rows no journal line covers."""
        todo = np.ones(self.layout.n_texts, dtype=bool)
        for entry in self._done:
            todo[entry.start : entry.stop] = False
        return todo

    @property
    def batches(self) -> int:
        """Journalled batches."""
        return len(self._done)

    # ---- writing ---------------------------------------------------------------------------------------------
    def write(self, start: int, arrays: dict[str, np.ndarray]) -> None:
        """Write rows ``[start, start + B)``: ``pooled_<p>`` (n_stored_layers, B, d), ``prenorm_<p>`` (B, d), and
        (B,) ``nll_sum``, ``n_scored``, ``n_tokens``; then journal them. Each chunk goes to disk from its array's
        buffer and is hashed on the way. ``CacheError`` naming the path and the cause when it cannot be written (a
        read-only cache, a full disk, a quota, a file-size limit); the batch is then not journalled."""
        if self._cannot_write is not None:
            raise self._cannot_write
        shapes = self.layout.shapes()
        if set(arrays) != set(shapes):
            raise ValueError(f"a batch must hold exactly {sorted(shapes)}, got {sorted(arrays)}")
        stop = start + len(arrays["nll_sum"])
        parts = self._parts(shapes)  # the big files' layers in pieces, each written (and cast) on a thread
        done = list(writers().map(lambda part: self._write_part(*part, start, stop, arrays[part[0]]), parts))
        failed = next((result for result, _ in done if isinstance(result, tuple)), None)
        if failed is not None:
            raise cache_error(*failed) from None
        if any(inf for _, inf in done):  # a float16 cast holds inf: ExtractionError if the cast made it
            with np.errstate(over="ignore"):
                self._check_float16(start, arrays, {key: np.asarray(arrays[key], dtype=dtype)
                                                    for key, (_, dtype) in shapes.items()})
        digests: dict[str, str] = {}
        for (key, _, _), (result, _) in zip(parts, done, strict=True):
            digests[key] = digests.get(key, "") + result  # the pieces are in layer order
        keys = list(digests)
        entry = journal.Entry(start, stop, {key: digests[key] for key in keys})
        path = self.folder / "journal.jsonl"
        try:
            with open(path, "a") as f:
                f.write(entry.line() + "\n")
        except OSError as exc:
            raise cache_error(path, exc) from None
        self._done = [e for e in self._done if e.stop <= start or e.start >= stop] + [entry]

    def _parts(self, shapes: dict) -> list[tuple[str, int, int]]:
        """``(key, first layer, last layer + 1)`` pieces of a batch's files, the big ones first: a layer-major
        file in as many pieces as there are writer threads, the others whole."""
        threads = writers()._max_workers
        parts = []
        for key, (shape, _) in sorted(shapes.items(), key=lambda kv: -int(np.prod(kv[1][0]))):
            n = shape[0] if len(shape) == 3 else 1
            step = max(1, -(-n // threads)) if len(shape) == 3 else 1
            parts += [(key, lo, min(n, lo + step)) for lo in range(0, n, step)]
        return parts

    def _write_part(self, key: str, lo: int, hi: int, start: int, stop: int,
                    array: np.ndarray) -> tuple[str | tuple[Path, OSError], bool]:
        """Write layers ``[lo, hi)`` (all of a file without layers) of ``key``'s rows ``[start, stop)`` from
        ``array``, cast to the store's dtype here; (their chunks' digests or (path, error), whether the cast holds a
        non-finite value)."""
        path = self.folder / f"{key}.npy"
        dtype = self.layout.shapes()[key][1]
        layered = len(self.layout.shapes()[key][0]) == 3
        with np.errstate(over="ignore"):  # a float16 overflow is checked (and named) by the caller
            part = np.asarray(array[lo:hi] if layered else array, dtype=dtype)
        inf = part.dtype == np.float16 and not np.isfinite(part).all()
        digests = []
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                for offset, chunk in self._chunks(key, start, stop, part, lo):
                    pwrite_all(fd, chunk, offset)
                    digests.append(journal.digest(chunk))
            finally:
                os.close(fd)
        except OSError as exc:
            return (path, exc), inf
        return "".join(digests), inf

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

    def _chunks(self, key: str, start: int, stop: int, array: np.ndarray | None = None, first: int = 0):
        """(file offset, rows) of ``key``'s rows ``[start, stop)``, in file order; ``array`` holds them (to write),
        for a layer-major file its layers from ``first`` on (all of them when no ``array``)."""
        (shape, dtype) = self.layout.shapes()[key]
        item = np.dtype(dtype).itemsize
        base = self._offsets[key]
        if len(shape) == 3:  # (layers, n, d): one contiguous run per layer
            per_row = shape[2] * item
            for slot in range(first, shape[0] if array is None else first + len(array)):
                offset = base + (slot * shape[1] + start) * per_row
                yield offset, (None if array is None else np.ascontiguousarray(array[slot - first]))
        else:
            per_row = (shape[1] if len(shape) == 2 else 1) * item
            yield base + start * per_row, (None if array is None else np.ascontiguousarray(array))

    # ---- checking --------------------------------------------------------------------------------------------
    def _check(self, key: str, slot: int, block: np.ndarray) -> list[journal.Entry]:
        """The journal lines whose chunk of ``key`` (layer ``slot``) in ``block`` (every row of it, store order)
        does not match its checksum; the others are remembered as checked."""
        bad = []
        for entry in self._done:
            mark = (key, slot, entry.start, entry.stop)
            if mark in self._checked:
                continue
            chunk = block[entry.start : entry.stop]
            if entry.chunk(key, slot) == journal.digest(chunk) and (chunk.dtype.kind != "f" or
                                                                     np.isfinite(chunk).all()):
                self._checked.add(mark)
            else:  # changed bytes, or NaN or inf that no extraction stores (it refuses such a batch)
                bad.append(entry)
        return bad

    def _checked_read(self, key: str, slot: int, read: Callable[[], np.ndarray]) -> np.ndarray:
        """``read()`` (every row of ``key``'s layer ``slot``, store order), its journalled chunks checked; damaged
        batches are dropped from the journal and computed again (:attr:`heal`), then read once more."""
        block = read()
        bad = self._check(key, slot, block)
        if not bad:
            return block
        self._repair(bad, key)
        block = read()
        if self._check(key, slot, block):
            raise CacheError(f"cache entry {self.folder} was computed again but {key}.npy still does not match its "
                             "checksum (is another process writing it?): remove the folder (it is recomputed)")
        return block

    def _repair(self, bad: list[journal.Entry], key: str) -> None:
        """Drop the damaged journal lines ``bad`` and compute their rows again, under the entry's lock."""
        rows = ", ".join(f"[{e.start}, {e.stop})" for e in bad)
        log.warning("stored rows %s of %s in %s do not match their checksum (damaged); computing them again",
                    rows, key, self.folder)
        if self._cannot_write is not None or self.heal is None:
            raise CacheError(f"cache entry {self.folder}: stored rows {rows} of {key}.npy no longer match their "
                             "checksum (the file was damaged or changed); run the extraction again to compute them "
                             "(or remove the folder)")
        with self.locked():
            self._done = [e for e in self._done if e not in bad]
            self._rewrite_journal()
            todo = self.missing()
            if todo.any():
                self.heal(self, todo)

    def verify(self) -> list[tuple[int, int]]:
        """Check every journalled chunk now (reading the whole entry); drop the lines of damaged ones from the
        journal (their rows are then missing: computed again by the next extraction) and return their rows."""
        bad: list[journal.Entry] = []
        with self.locked():
            for key, (shape, _) in self.layout.shapes().items():
                for slot in range(shape[0] if len(shape) == 3 else 1):
                    try:
                        block = self._read_block(key, slot)
                    except CacheError:
                        bad += [e for e in self._done if e not in bad]
                        break
                    bad += [e for e in self._check(key, slot, block) if e not in bad]
            if bad and self._cannot_write is None:
                self._done = [e for e in self._done if e not in bad]
                self._rewrite_journal()
        return [(e.start, e.stop) for e in bad]

    # ---- reading ---------------------------------------------------------------------------------------------
    def pooled(self, pooling: str) -> LayerStack:
        """One pooling's vectors in the caller's row order, read one layer at a time."""
        return LayerStack(StoreSource(self, pooling))

    def pre_norm(self) -> RowArrays:
        """{pooling: (n_texts, d) float32} of the last block's output before the final norm, read on each access."""
        return RowArrays(self, {p: f"prenorm_{p}" for p in self.layout.poolings})

    def _read_block(self, key: str, slot: int = 0) -> np.ndarray:
        """Every row of ``key`` (layer ``slot`` of a pooled array) as stored: store order, stored dtype."""
        shape, dtype = self.layout.shapes()[key]
        offset = self._offsets[key]
        if len(shape) == 3:
            offset += slot * shape[1] * shape[2] * np.dtype(dtype).itemsize
            shape = shape[1:]
        return read_block(self.folder / f"{key}.npy", offset, shape, dtype)

    def read_rows(self, key: str) -> np.ndarray:
        """A whole (n_texts,) or (n_texts, d) array in the caller's row order (float32 for stored vectors)."""
        shape, dtype = self.layout.shapes()[key]
        stored = self._checked_read(key, 0, lambda: self._read_block(key))
        out = np.empty(shape, dtype=np.float32 if len(shape) == 2 else dtype)
        out[self.order] = stored
        return out

    def read_layer(self, pooling: str, slot: int) -> np.ndarray:
        """(n_texts, d) float32: stored layer ``slot`` of ``pooling``, in the caller's row order."""
        key = f"pooled_{pooling}"
        block = self._checked_read(key, slot, lambda: self._read_block(key, slot))
        out = np.empty(block.shape, dtype=np.float32)
        out[self.order] = block
        return out
