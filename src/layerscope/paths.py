"""Where layerscope keeps converted models and cached activations, and which names may become file names.

    activations_dir()                   # $LAYERSCOPE_CACHE/activations (CacheError if the cache is a file)
    raise cache_error(path, exc)        # the one error for a cache path that cannot be written
    safe_name("en", "language code")    # "en"; an UnsafeNameError for "../x", "a/b", "CON", "" ...
    safe_slug("org/My Model..v2")       # "org_My_Model.v2": a derived name that safe_name accepts

Everything lives under one folder: ``$LAYERSCOPE_CACHE`` if set, else
``~/.cache/layerscope``. Reading needs no write: a complete read-only cache is usable.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

from .errors import CacheError, DiskFullError, LayerscopeError, short, write_cause

FIX = "set LAYERSCOPE_CACHE to another folder (one you can write to), or pass --no-cache"
"""How to get past an unusable activation cache, in every cache error whose cause has no fix of its own."""
MODELS_FIX = "set LAYERSCOPE_CACHE to another folder (one you can write to)"
"""The same for a converted model, which ``--no-cache`` does not skip."""


def cache_root() -> Path:
    """The cache folder; a :class:`CacheError` when it names something that is not a folder."""
    env = os.environ.get("LAYERSCOPE_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "layerscope"
    blocker = _not_a_folder(root)
    if blocker is not None:
        raise CacheError(f"the layerscope cache {root} ($LAYERSCOPE_CACHE) is unusable: {blocker} is a file, "
                         f"not a folder; {FIX}")
    return root


def cache_error(path: str | os.PathLike, exc: BaseException, doing: str = "write") -> CacheError:
    """``raise cache_error(path, exc) from None``: the one error for ``path`` in a cache that could not be used
    (``exc`` from the attempt: an ``OSError``, or a ``SafetensorError`` that names one): what is wrong, which variable
    sets the cache, and the fix. A full disk, an exceeded quota, a file-size limit, a read-only file system and a
    refused permission each get their own words and fix (:func:`layerscope.errors.write_cause`). A folder passed as
    ``cache=`` gets its own fix; a converted model (under ``models/``) none that ``--no-cache`` would be. A
    :class:`DiskFullError` (from ``io.atomic_file``) is worded by its errno, with the cache's fix."""
    if isinstance(exc, DiskFullError):
        exc = OSError(exc.code, os.strerror(exc.code))
    path = Path(path)
    blocker = _not_a_folder(path.parent)
    cause = None if blocker else write_cause(exc)
    if blocker:
        reason = f"{blocker} is a file, not a folder"
    elif cause:
        reason = cause.words
    else:
        reason = (getattr(exc, "strerror", None) or str(exc)).lower()
    env = os.environ.get("LAYERSCOPE_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "layerscope"
    if not _inside(path, root):
        other = "pass another cache folder"
        return CacheError(f"cannot {doing} the activation cache {path}: {reason}; "
                          f"{cause.fix(other) if cause else other}, or cache=False")
    if cause:
        fix = cause.fix("set LAYERSCOPE_CACHE to another folder")
        fix += "" if _inside(path, root / "models") else ", or pass --no-cache"
    else:
        fix = MODELS_FIX if _inside(path, root / "models") else FIX
    return CacheError(f"the layerscope cache {root} ($LAYERSCOPE_CACHE) is unusable: cannot {doing} {path}: "
                      f"{reason}; {fix}")


def _not_a_folder(path: Path) -> Path | None:
    """The first of ``path`` and its parents that exists and is not a folder, or None."""
    for probe in (path, *path.parents):
        if probe.exists():
            return None if probe.is_dir() else probe
    return None


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.absolute().is_relative_to(root.absolute())
    except (OSError, ValueError):
        return False


def models_dir() -> Path:
    return cache_root() / "models"


def activations_dir() -> Path:
    return cache_root() / "activations"


class UnsafeNameError(LayerscopeError, ValueError):
    """A name that would become a file or folder name but could step out of its folder or break on some system."""


WINDOWS_RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", *(f"{port}{n}" for port in ("COM", "LPT")
                                                             for n in [*"123456789", "\u00b9", "\u00b2", "\u00b3"])})
"""Device names Windows reserves in every folder, whatever the case or extension (``con``, ``NUL.txt``, ``Com1``)."""

NAME_FIX = "rename it with letters, digits, '-', '_' and single dots, e.g. 'en' or 'my_model'"
"""How to get past an :class:`UnsafeNameError`, in every one."""


def name_problem(value: object) -> str | None:
    """``name_problem("a/b")`` -> ``"holds a path separator ('/')"``: why ``value`` cannot be a file name, or None.

    Refused: a non-string, an empty name, ``.``, ``..`` anywhere, ``/`` or ``\\``, NUL and every other control
    character, and the device names Windows reserves (:data:`WINDOWS_RESERVED`)."""
    if not isinstance(value, str):
        return f"is not a string but of type {type(value).__name__}"
    if not value.strip():
        return "is empty"
    for sep in ("/", "\\"):
        if sep in value:
            return f"holds a path separator ({sep!r})"
    if ".." in value:
        return "holds '..', which names the folder above"
    if value == ".":
        return "is '.', which names the folder itself"
    if (char := control_char(value)) is not None:
        return f"holds the control character {char!r}"
    if is_reserved(value):
        return f"is {value.split('.')[0]!r}, a device name Windows reserves in every folder"
    return None


def safe_name(value: str, what: str) -> str:
    """``path = folder / safe_name(key, "figure name")``: ``value`` unchanged when it is safe as one file or
    folder name, else an :class:`UnsafeNameError` naming ``what``, the value, the rule and the fix (see
    :func:`name_problem`). Call it wherever a name from a user, a file or a plugin becomes part of a path."""
    problem = name_problem(value)
    if problem is not None:
        raise UnsafeNameError(f"{what} {short(value)} cannot be used as a file name: it {problem}; {NAME_FIX}")
    return value


_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._@=+-]")


def safe_slug(value: str, fallback: str = "unnamed") -> str:
    """``safe_slug("org/My Model..v2")`` -> ``"org_My_Model.v2"``: a name derived from ``value`` (a path, a model
    spec) that :func:`safe_name` accepts: characters other than ASCII letters, digits and ``._@=+-`` become ``_``,
    runs of dots one dot, leading ``-`` and ``.`` go, a Windows device name gets a leading ``_`` (``CON`` ->
    ``_CON``); ``fallback`` when nothing is left. Two values may share a slug."""
    slug = re.sub(r"\.{2,}", ".", _UNSAFE_CHARS.sub("_", value)).lstrip("-.")
    if not slug:
        return fallback
    return f"_{slug}" if is_reserved(slug) else slug


def control_char(value: str) -> str | None:
    """``control_char("a\\nb")`` -> ``"\\n"``: the first control character in ``value`` (NUL, newline, escape,
    DEL, ...), or None."""
    return next((c for c in value if unicodedata.category(c) == "Cc"), None)


def is_reserved(name: str) -> bool:
    """``is_reserved("nul.txt")`` -> True: whether Windows reserves ``name`` for a device (``CON``, ``nul.txt``,
    ``Com1.tar.gz``, ``LPT9 ``; not ``CONSOLE`` or ``com10``)."""
    return name.split(".")[0].rstrip(" ").upper() in WINDOWS_RESERVED
