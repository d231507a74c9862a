"""The store's file I/O: a per-process pool of writer threads, whole-buffer ``pwrite``, plain block reads.

    writers().map(write_one, parts)               # a batch's files (pieces of them) side by side
    pwrite_all(fd, chunk, offset)                 # a C-contiguous array from its own buffer, no copy
    block = read_block(path, offset, shape, dtype)
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ...errors import CacheError

_WRITERS: dict[int, ThreadPoolExecutor] = {}
"""Per process (a forked child gets its own): threads that write a batch's files side by side."""


def writers() -> ThreadPoolExecutor:
    pid = os.getpid()
    if pid not in _WRITERS:
        _WRITERS[pid] = ThreadPoolExecutor(min(8, os.cpu_count() or 1), thread_name_prefix="layerscope-store")
    return _WRITERS[pid]


def pwrite_all(fd: int, chunk: np.ndarray, offset: int) -> None:
    """Write the C-contiguous ``chunk`` at ``offset`` from its own buffer, however many calls the kernel needs."""
    view = memoryview(chunk).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def read_block(path: Path, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Read ``shape`` values at ``offset`` with plain file reads (no memory map: pages stay out of this process)."""
    out = np.empty(shape, dtype=dtype)
    with open(path, "rb") as f:
        f.seek(offset)
        if f.readinto(memoryview(out).cast("B")) != out.nbytes:
            raise CacheError(f"cache file {path} is shorter than its header says: remove its folder "
                             f"{path.parent} (it is recomputed)")
    return out
