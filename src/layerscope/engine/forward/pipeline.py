"""Batches leave the device while the next one runs: copies to the host and store writes off the critical path.

    packing = Packing(poolings, layers, d=d, n_states=n_layers + 1)
    with Writer(store, packing, device, max_rows, check=check, on_stored=on_batch) as writer:
        for start, out in batches:             # out: (packing.nbytes(B),) uint8 on the device, filled by the pass
            writer.put(start, rows, out)       # returns at once; raises the writer's error, if it had one
            writer.planned_done()              # after the last piece of a planned batch: on_stored(n) when written
    # leaving the block waits for the last writes and raises the writer's error, if any

One batch's results are one flat byte buffer on the device (:class:`Packing`): every pooled vector (float32) and
a row of scalars per text (float64: NLL, counts, the finiteness flags). On CUDA, :meth:`Writer.put` copies it on
a copy stream (after the compute stream's work so far) into one of two pinned host buffers allocated once for the
largest batch of the plan, records an event, and queues it; the writer thread waits on that event (not on the
device), checks the flags, writes the store and gives the buffer back. So the forward pass of batch k + 1 runs
while batch k travels and is written, at most two batches are in flight (host memory is two buffers, whatever the
number of texts), and the main thread never waits on the device for them. On a CPU the buffer is read in place.

An error in the writer (a full disk, a read-only cache, a NaN in a batch, a callback's exception) stops it: the
failing batch is not journalled, batches queued after it are dropped, and the main thread raises that error at its
next :meth:`Writer.put` or when the block ends.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

SCALARS = ("nll_sum", "n_scored", "n_tokens", "bad_nll")
"""The first columns of a batch's scalar rows; the hidden states' finiteness flags follow."""

SLOTS = 2
"""Batches in flight: one being written, one travelling or queued."""


@dataclass(frozen=True)
class Packing:
    """Where a batch's results lie in its flat byte buffer (rows B): vectors (P, V, B, d) float32, pooling by
    pooling its stored ``layers`` then the pre-norm state (V = len(layers) + 1); scalars (B, 4 + V) float64: the
    :data:`SCALARS`, then 1 where a vector of that slot (any pooling) is not finite."""

    poolings: tuple[str, ...]
    layers: tuple[int, ...]
    d: int
    n_states: int
    """Hidden states 0 .. n_layers (stored or not)."""

    @property
    def n_vectors(self) -> int:
        return len(self.layers) + 1

    def vector_bytes(self, rows: int) -> int:
        return -(-len(self.poolings) * self.n_vectors * rows * self.d * 4 // 8) * 8  # 8-aligned for the scalars

    def nbytes(self, rows: int) -> int:
        return self.vector_bytes(rows) + rows * (len(SCALARS) + self.n_vectors) * 8

    def views(self, buffer, rows: int):
        """``vectors, scalars`` of ``buffer`` (a uint8 torch tensor or numpy array of at least :meth:`nbytes`)."""
        split, end = self.vector_bytes(rows), self.nbytes(rows)
        shape = (len(self.poolings), self.n_vectors, rows, self.d)
        if isinstance(buffer, torch.Tensor):
            vectors = buffer[: split].view(torch.float32)[: int(np.prod(shape))].view(shape)
            return vectors, buffer[split:end].view(torch.float64).view(rows, -1)
        vectors = buffer[: split].view(np.float32)[: int(np.prod(shape))].reshape(shape)
        return vectors, buffer[split:end].view(np.float64).reshape(rows, -1)

    def arrays(self, buffer: np.ndarray, rows: int) -> dict[str, np.ndarray]:
        """The store's arrays of one batch, as views of ``buffer`` (no copy but the two small count columns)."""
        vectors, scalars = self.views(buffer, rows)
        out = {}
        for i, p in enumerate(self.poolings):
            out[f"pooled_{p}"] = vectors[i, :-1]
            out[f"prenorm_{p}"] = vectors[i, -1]
        out["nll_sum"] = scalars[:, 0]
        out["n_scored"] = scalars[:, 1].astype(np.int64)
        out["n_tokens"] = scalars[:, 2].astype(np.int64)
        return out

    def flags(self, buffer: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """(bad_layers (B, n_states) bool, bad_nll (B,) bool) of one batch; the pre-norm state counts as hidden
        state n_layers (it is the last block's output)."""
        _, scalars = self.views(buffer, rows)
        slots = scalars[:, len(SCALARS):] != 0  # (B, V)
        bad = np.zeros((rows, self.n_states), dtype=bool)
        bad[:, list(self.layers)] = slots[:, :-1]
        bad[:, -1] |= slots[:, -1]
        return bad, scalars[:, 3] != 0


class Writer:
    """The writer thread and its pinned buffers; see the module docstring."""

    def __init__(self, store, packing: Packing, device: torch.device, max_rows: int,
                 check: Callable[[np.ndarray, np.ndarray, np.ndarray], None],
                 on_stored: Callable[[], None] | None = None):
        """``check(index, bad_layers, bad_nll)`` raises for a batch that must not be stored; ``on_stored()`` runs
        (on the writer thread) after every planned batch is written."""
        self.store, self.packing, self.check, self.on_stored = store, packing, check, on_stored
        self.cuda = device.type == "cuda"
        self.error: BaseException | None = None
        self.waited = 0.0
        """Seconds the main thread waited for the writer (a free buffer or a queue place in :meth:`put`, the last
        writes when the block ends): the store held the passes up."""
        self.busy = 0.0
        """Seconds the writer thread spent checking and writing batches (not waiting for copies)."""
        self._queue: queue.Queue = queue.Queue(maxsize=SLOTS - 1)
        self._free: queue.Queue = queue.Queue()
        if self.cuda:
            self._stream = torch.cuda.Stream(device)
            for _ in range(SLOTS):
                pinned = torch.empty(packing.nbytes(max_rows), dtype=torch.uint8, pin_memory=True)
                self._free.put((pinned, pinned.numpy()))
        self._thread = threading.Thread(target=self._run, name="layerscope-writer", daemon=True)
        self._thread.start()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        began = time.perf_counter()
        self._queue.put(None)
        self._thread.join()
        self.waited += time.perf_counter() - began
        if exc[0] is None and self.error is not None:
            raise self.error

    def put(self, start: int, index: np.ndarray, out: torch.Tensor) -> None:
        """Hand over rows ``[start, start + len(index))`` (caller positions ``index``), packed in ``out``."""
        self._raise()
        rows = len(index)
        began = time.perf_counter()
        if not self.cuda:
            self._queue.put((start, index, out.numpy(), None, None))
            self.waited += time.perf_counter() - began
            return
        pinned, host = self._free.get()
        self.waited += time.perf_counter() - began
        self._raise()
        self._stream.wait_stream(torch.cuda.current_stream(out.device))
        with torch.cuda.stream(self._stream):
            pinned[: out.numel()].copy_(out, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._stream)
        out.record_stream(self._stream)  # the allocator keeps ``out`` until the copy has read it
        self._queue.put((start, index, host[: self.packing.nbytes(rows)], done, (pinned, host)))

    def planned_done(self) -> None:
        """Mark the end of a planned batch (after its last piece): ``on_stored()`` once it is written."""
        self._raise()
        self._queue.put("planned")

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self.error is not None:  # drop what comes after a failure; give the buffers back
                if isinstance(item, tuple) and item[4] is not None:
                    self._free.put(item[4])
                continue
            try:
                if item == "planned":
                    if self.on_stored is not None:
                        self.on_stored()
                    continue
                start, index, host, done, slot = item
                if done is not None:
                    done.synchronize()
                rows = len(index)
                began = time.perf_counter()
                self.check(index, *self.packing.flags(host, rows))
                self.store.write(start, self.packing.arrays(host, rows))
                self.busy += time.perf_counter() - began
                if slot is not None:
                    self._free.put(slot)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                self.error = exc
                if isinstance(item, tuple) and item[4] is not None:
                    self._free.put(item[4])
