"""Where layerscope keeps converted models and cached activations.

    activations_dir()                   # $LAYERSCOPE_CACHE/activations (CacheError if the cache is a file)
    raise cache_error(path, exc)        # the one error for a cache path that cannot be written

Everything lives under one folder: ``$LAYERSCOPE_CACHE`` if set, else
``~/.cache/layerscope``. Reading needs no write: a complete read-only cache is usable.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import CacheError

FIX = "set LAYERSCOPE_CACHE to another folder (one you can write to), or pass --no-cache"
"""How to get past an unusable cache, in every cache error."""


def cache_root() -> Path:
    """The cache folder; a :class:`CacheError` when it names something that is not a folder."""
    env = os.environ.get("LAYERSCOPE_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "layerscope"
    blocker = _not_a_folder(root)
    if blocker is not None:
        raise CacheError(f"the layerscope cache {root} ($LAYERSCOPE_CACHE) is unusable: {blocker} is a file, "
                         f"not a folder; {FIX}")
    return root


def cache_error(path: str | os.PathLike, exc: OSError, doing: str = "write") -> CacheError:
    """The error for ``path`` in a cache that could not be used (``exc`` from the attempt): what is wrong,
    which variable sets the cache, and the fix. A folder passed as ``cache=`` gets its own fix."""
    path = Path(path)
    blocker = _not_a_folder(path.parent)
    reason = f"{blocker} is a file, not a folder" if blocker else (exc.strerror or str(exc)).lower()
    env = os.environ.get("LAYERSCOPE_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "layerscope"
    if not _inside(path, root):
        return CacheError(f"cannot {doing} the activation cache {path}: {reason}; pass another cache folder, "
                          "or cache=False")
    return CacheError(f"the layerscope cache {root} ($LAYERSCOPE_CACHE) is unusable: cannot {doing} {path}: "
                      f"{reason}; {FIX}")


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
