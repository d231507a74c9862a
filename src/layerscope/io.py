"""Atomic file and folder writes: readers see the old state or the new one, never half.

    atomic_write_json(path, {"a": 1})
    with atomic_file(path) as f:          # f is a temp file next to path
        np.savez(f, x=x)                  # renamed over path only on success
    with staged_dir(out, force=False, kind="run", inputs=[dataset]) as tmp:
        (tmp / "manifest.json").write_text("{}")   # tmp becomes out on success
    read_marker(out)                      # {"written_by": "layerscope", "kind": "run", "version": ...}

Every folder layerscope creates holds a marker file (``.layerscope.json``). ``force`` replaces only
a folder that holds it, and never one that is or holds the current folder, the home folder or an
input of the run. An output folder given as a symbolic link is the folder it points to (the link stays).
A write killed half-way leaves a hidden ``.<name>.XXXXXXXX.partial`` folder; the next write of the same
target removes it (unless another process is writing into that folder).
A full disk (or quota) is a :class:`DiskFullError` naming the folder and the bytes needed; another write failure
(a file-size limit, a read-only file system, no permission) an :class:`OutputError` naming the folder, the cause
and the fix (:func:`write_error`); nothing is left.

    cause = write_cause(exc)              # WriteCause for ENOSPC, EDQUOT, EFBIG, EROFS, EACCES/EPERM, else None
    cause.words                           # "the disk quota is exceeded"
    cause.fix("choose another --out")     # "free some space within your quota, or choose another --out on ..."
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from .errors import EDQUOT, FORCE, OUT, DiskFullError, OutputError, WriteCause, write_cause
from .jsonfile import read_json
from .paths import cache_error
from .provenance import VERSION

try:
    import fcntl
except ImportError:  # no flock (Windows): stale partial folders are left alone
    fcntl = None

MARKER = ".layerscope.json"
"""The file that marks a folder as written by layerscope (run, suite, sweep, extract, converted model)."""

PARTIAL, OLD = ".partial", ".old"
_STAGED = re.compile(r"\.(.+)\.[a-z0-9_]{8}(\.partial|\.old)")
"""The names of :func:`staged_dir`'s temporary folders (``tempfile.mkdtemp``'s 8 random characters)."""

@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", size: int | None = None) -> Iterator[IO]:
    """Open a temp file beside ``path``; on clean exit fsync it and rename it to ``path``.

    A full disk removes the temp file and raises :class:`DiskFullError` (``size``: the bytes the
    caller meant to write, if known). Another write failure (:func:`write_cause`) removes it too and stays an
    ``OSError``, now naming ``path`` (not the temp file): the caller words it (:func:`write_error`, or
    :func:`layerscope.paths.cache_error` in the cache)."""
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
    except BaseException as exc:
        written = _bytes_in(Path(tmp))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_full(exc) and not isinstance(exc, DiskFullError):
            raise disk_full(path, size or written, exact=size is not None, code=write_cause(exc).code) from None
        if isinstance(exc, OSError) and write_cause(exc) is not None and exc.filename in (None, tmp):
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_file(path, "wb", size=len(data)) as f:
        f.write(data)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_file(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False, allow_nan=False)
        f.write("\n")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_marker(folder: str | os.PathLike, kind: str, **extra: Any) -> None:
    """Mark ``folder`` as written by layerscope: ``kind`` (run, suite, sweep, ...), version, and ``extra``."""
    atomic_write_json(Path(folder) / MARKER, {"written_by": "layerscope", "kind": kind, "version": VERSION,
                                              **extra})


def read_marker(folder: str | os.PathLike) -> dict | None:
    """The marker of a folder layerscope wrote, or None (no marker, or not layerscope's)."""
    try:
        data = read_json(Path(folder) / MARKER)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("written_by") == "layerscope" else None


def protected(out: str | os.PathLike, inputs: Iterable[str | os.PathLike] = ()) -> str | None:
    """Why the existing folder ``out`` must never be replaced, or None: it is the root folder, is or holds
    the current or the home folder, or is or holds one of ``inputs`` (the run's files and model folders)."""
    forms = _forms(out)
    if any(f == Path(f.anchor) for f in forms):
        return "it is the root folder"
    places = []
    with contextlib.suppress(OSError):  # a current folder that was deleted
        places.append((Path.cwd(), "the current folder"))
    with contextlib.suppress(RuntimeError, KeyError):  # no home folder to be found
        places.append((Path.home(), "your home folder"))
    places += [(Path(item), f"{item}, an input of this run") for item in inputs]
    for place, label in places:
        inside = [f for f in forms for p in _forms(place) if f == p or f in p.parents]
        if inside:
            return f"it {'is' if inside[0] in _forms(place) else 'holds'} {label}"
    return None


def may_replace(out: str | os.PathLike, inputs: Iterable[str | os.PathLike] = ()) -> bool:
    """Whether ``force`` may replace the existing folder ``out``: layerscope wrote it, and it is not protected."""
    return read_marker(out) is not None and protected(out, inputs) is None


def resolve_out(out: str | os.PathLike) -> Path:
    """``out = resolve_out(out)``: ``out`` as given, or, when it is a symbolic link, the folder it points to
    (``Path.resolve``), so that replacing the output folder replaces the target and the link stays. A link to
    nothing is an :class:`OutputError` naming both ends and the fix."""
    out = Path(out)
    if not out.is_symlink():
        return out
    try:
        target = out.resolve()
    except (OSError, RuntimeError):  # a loop of links
        raise OutputError(f"output path {out} is a symbolic link that leads back to itself; choose another "
                          f"{OUT}") from None
    if not target.exists():
        raise OutputError(f"output path {out} is a symbolic link to {target}, which does not exist; create "
                          f"that folder, or choose another {OUT}")
    return target


def check_out_dir(out: str | os.PathLike, force: bool, inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """``out = check_out_dir(out, force, inputs)``: refuse an output folder whose contents would be lost, or that
    cannot be created; returns the folder to write (a symbolic link's target: see :func:`resolve_out`).

    ``inputs``: the run's input files and local model folders; a folder that holds one is never replaced.
    """
    given = Path(out)
    out = resolve_out(given)
    shown = f"{given} (a link to {out})" if given.is_symlink() else given
    if out.exists() and not out.is_dir():
        raise OutputError(f"output path {shown} exists and is not a folder; choose another {OUT}")
    if out.is_dir():
        inputs = list(inputs)
        reason = protected(out, inputs)
        if reason is not None:
            raise OutputError(f"will not write into {shown}: {reason}; choose another {OUT}")
        if any(out.iterdir()):
            if read_marker(out) is None:
                why = f"layerscope did not write it (it has no {MARKER}), so it may hold files of yours"
                if force:
                    raise OutputError(f"will not replace {shown}: {why}; choose another {OUT}")
                raise OutputError(f"output folder {shown} already exists and is not empty, and {why}: {FORCE} "
                                  f"will not replace it either; choose another {OUT}")
            if not force:
                raise OutputError(f"output folder {shown} already exists and is not empty; choose another {OUT}, "
                                  f"or pass {FORCE} to replace it (layerscope wrote it)")
    probe = out.resolve().parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"cannot create {out}: {probe} is a file, not a folder; choose another {OUT}")
    try:  # try it: os.access says yes to root even where writes fail (read-only or immutable folders)
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise OutputError(f"cannot write to {probe}: {exc.strerror.lower()}; choose a writable {OUT}") from None
    return out


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike, force: bool = False, kind: str = "folder",
               inputs: Iterable[str | os.PathLike] = (), size: int | None = None) -> Iterator[Path]:
    """Yield an empty temp folder beside ``out`` that replaces ``out`` on clean exit.

    The folder is marked as layerscope's (``kind``) from the start. On error the temp folder is
    removed and ``out`` is left as it was; a full disk raises :class:`DiskFullError` (``size``: the
    bytes the caller expects to write, if known), another write failure (:func:`write_cause`) an
    :class:`OutputError` naming ``out`` and the cause (kind ``"model"``, a converted model in the cache: a
    :class:`~layerscope.errors.CacheError` naming LAYERSCOPE_CACHE). Temp folders of ``out`` that a killed
    process left behind are removed first.
    """
    out = check_out_dir(out, force, inputs)
    out.parent.mkdir(parents=True, exist_ok=True)
    clear_stale(out.parent, out.name)
    lock = _lock(out.parent, shared=True)  # while held, no other process takes our folder for stale
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=PARTIAL, dir=out.parent))
        try:
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; the final folder should not be
            write_marker(tmp, kind)
            yield tmp
            replace_dir(tmp, out)
        except BaseException as exc:
            written = _bytes_in(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
            if is_disk_full(exc):
                code = exc.code if isinstance(exc, DiskFullError) else write_cause(exc).code
                raise disk_full(out, size or written, exact=size is not None, kind=kind, code=code) from None
            if write_cause(exc) is None:
                raise
            if kind == "model":
                raise cache_error(out, exc, "convert the model into") from None
            raise write_error(out, exc) from None
    finally:
        if lock is not None:
            os.close(lock)


def remove_dir(folder: Path) -> None:
    """Delete ``folder`` (which :func:`check_out_dir` allowed to be replaced): renamed aside first, so a
    kill half-way leaves a hidden folder the next write removes, never a half-deleted ``folder``."""
    replace_dir(None, folder)


def replace_dir(new: Path | None, out: Path) -> None:
    """Put the finished folder ``new`` in place of ``out`` (which may exist; ``new=None``: just remove ``out``).
    The old ``out`` is renamed aside first and deleted last, so a kill never leaves it half-deleted."""
    aside = None
    if out.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=OLD, dir=out.parent))
        os.replace(out, aside)  # a folder renames over an empty one
    if new is not None:
        os.replace(new, out)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def clear_stale(parent: Path, name: str | None = None) -> list[Path]:
    """Remove the temp folders of target ``name`` (None: of any target) that killed writes left in
    ``parent``; returns them. A temp folder is stale when it is marked as layerscope's (or empty) and
    no process is writing into ``parent`` now (each holds a shared lock on it while it stages);
    when one is, nothing is removed this time. A suite's resumable ``.<name>.partial`` is never touched.
    """
    lock = _lock(parent, shared=False, wait=False)
    if lock is None:
        return []
    removed = []
    try:
        for entry in parent.iterdir():
            match = _STAGED.fullmatch(entry.name)
            if (match and name in (None, match.group(1)) and entry.is_dir() and not entry.is_symlink()
                    and ((entry / MARKER).is_file() or not any(entry.iterdir()))):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    except OSError:
        pass  # a folder we cannot list or clean: leave it
    finally:
        os.close(lock)
    return removed


def disk_full(path: Path, needed: int, exact: bool = False, kind: str = "folder",
              code: int = errno.ENOSPC) -> DiskFullError:
    """``raise disk_full(out, n_bytes) from None``: the error for a write of ``path`` that filled the disk
    (``code`` ENOSPC) or the quota (EDQUOT): the cause, the path, the bytes needed (and free, for a disk), and the
    fix (kind ``"model"``: a converted model in the cache)."""
    cause = WriteCause.of(code if code == EDQUOT else errno.ENOSPC)
    free = ""
    if cause.code == errno.ENOSPC:  # the free bytes of the disk say nothing of a quota
        probe = Path(path).absolute()
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            free = f" and {shutil.disk_usage(probe).free:,} bytes are free there"
        except OSError:
            free = " and the free space there is unknown"
    elsewhere = "set LAYERSCOPE_CACHE to another folder" if kind == "model" else f"choose another {OUT}"
    return DiskFullError(f"{cause.words}: writing {path} needs {'about' if exact else 'more than'} {needed:,} "
                         f"bytes{free}; nothing of it was kept; {cause.fix(elsewhere)}", cause.code)


def write_error(path: str | os.PathLike, exc: BaseException, elsewhere: str = f"choose another {OUT}"
                ) -> OutputError:
    """``raise write_error(out, exc) from None``: one line naming ``path``, why the write failed and the fix, for
    an ``exc`` that :func:`write_cause` words (a :class:`DiskFullError` for a full disk or quota, else an
    :class:`OutputError`). ``elsewhere``: how to pick another folder, completed by what it needs."""
    cause = write_cause(exc)
    message = f"cannot write {path}: {cause.words}; {cause.fix(elsewhere)}"
    return DiskFullError(message, cause.code) if cause.full else OutputError(message)


@contextlib.contextmanager
def worded_writes(path: str | os.PathLike, elsewhere: str = f"choose another {OUT}") -> Iterator[None]:
    """``with worded_writes(out): ...``: a write in the block that fails for a reason :func:`write_cause` words
    becomes :func:`write_error` naming ``path`` (one line, not a traceback); other errors pass unchanged."""
    try:
        yield
    except Exception as exc:
        if write_cause(exc) is None:
            raise
        raise write_error(path, exc, elsewhere) from None


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the quota) is full: a :class:`DiskFullError`, an ``OSError`` ENOSPC or
    EDQUOT, or a ``SafetensorError`` that names one (``(os error 28)``)."""
    if isinstance(exc, DiskFullError):
        return True
    cause = write_cause(exc)
    return cause is not None and cause.full


def _bytes_in(path: Path) -> int:
    """The bytes of the file ``path``, or of every file under the folder ``path`` (0 if it is gone)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _forms(path: str | os.PathLike) -> set[Path]:
    """``path`` made absolute, as given and with symbolic links resolved."""
    return {Path(os.path.abspath(path)), Path(os.path.realpath(path))}


def _lock(folder: Path, shared: bool, wait: bool = True) -> int | None:
    """An open descriptor of ``folder`` holding a flock (shared or exclusive), or None if it cannot be had."""
    if fcntl is None:
        return None
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    return fd
