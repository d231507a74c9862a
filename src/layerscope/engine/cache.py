"""On-disk store of finished extraction batches, so a rerun is free and a killed run resumes.

    store = BatchStore(paths.activations_dir() / fingerprint, meta)
    with store.locked():                  # one writer per entry, across processes
        arrays = store.get(3)             # None when missing or corrupt
        store.put(3, {"nll_sum": ...})    # atomic; the file name carries its SHA-256

Each batch is one ``batch-NNNNN-<sha256[:16]>.npz`` file written by rename, so a file
that exists is complete; on read its bytes are hashed again, and a file that no longer
matches its name (disk corruption, a truncated copy) is deleted and recomputed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from ..io import atomic_write_bytes, atomic_write_json
from .activations import npz_bytes

log = logging.getLogger(__name__)


class BatchStore:
    def __init__(self, folder: Path, meta: dict[str, Any]):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path = self.folder / "meta.json"
        if _read_json(meta_path) != meta:
            atomic_write_json(meta_path, meta)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with FileLock(str(self.folder) + ".lock"):
            yield

    def get(self, batch_no: int) -> dict[str, np.ndarray] | None:
        for path in sorted(self.folder.glob(f"batch-{batch_no:05d}-*.npz")):
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest()[:16] == path.stem.rsplit("-", 1)[-1]:
                try:
                    with np.load(io.BytesIO(data)) as z:
                        return {k: z[k] for k in z.files}
                except (OSError, ValueError, zipfile.BadZipFile):
                    pass
            log.warning("cache file %s is corrupt; recomputing that batch", path)
            path.unlink(missing_ok=True)
        return None

    def discard(self, batch_no: int) -> None:
        for path in self.folder.glob(f"batch-{batch_no:05d}-*.npz"):
            path.unlink(missing_ok=True)

    def put(self, batch_no: int, arrays: dict[str, np.ndarray]) -> None:
        data = npz_bytes(arrays)
        digest = hashlib.sha256(data).hexdigest()[:16]
        self.discard(batch_no)
        atomic_write_bytes(self.folder / f"batch-{batch_no:05d}-{digest}.npz", data)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
