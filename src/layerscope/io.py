"""Atomic file and folder writes: readers see the old state or the new one, never half.

    atomic_write_json(path, {"a": 1})
    with atomic_file(path) as f:          # f is a temp file next to path
        np.savez(f, x=x)                  # renamed over path only on success
    with staged_dir(out, force=False) as tmp:
        (tmp / "manifest.json").write_text("{}")   # tmp becomes out on success
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .errors import OutputError


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Open a temp file beside ``path``; on clean exit fsync it and rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; the file we replace was not
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_file(path, "wb") as f:
        f.write(data)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_file(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False, allow_nan=False)
        f.write("\n")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_out_dir(out: str | os.PathLike, force: bool) -> Path:
    """Refuse an output folder whose contents would be lost, or that cannot be created."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"output path {out} exists and is not a folder; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise OutputError(
            f"output folder {out} already exists and is not empty; "
            "choose another --out, or pass --force to replace it"
        )
    probe = out.resolve().parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"cannot create {out}: {probe} is a file, not a folder; choose another --out")
    try:  # try it: os.access says yes to root even where writes fail (read-only or immutable folders)
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise OutputError(f"cannot write to {probe}: {exc.strerror.lower()}; choose a writable --out") from None
    return out


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike, force: bool = False) -> Iterator[Path]:
    """Yield an empty temp folder beside ``out`` that replaces ``out`` on clean exit.

    On error the temp folder is removed and ``out`` is left as it was.
    """
    out = check_out_dir(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; the final folder should not be
    try:
        yield tmp
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            os.replace(out, old / "x")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
