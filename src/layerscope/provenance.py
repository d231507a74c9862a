"""Hashes and library versions that make a result traceable.

    sha256_json({"texts": texts})        # stable hash of JSON-able data
    jsonable({"r": np.float64("nan")})   # {"r": None}: plain JSON types (numpy converted, NaN and inf as null)
    sha256_file(path)                     # hash of a file's bytes
    library_versions()                    # {"python": "3.11.7", "torch": ..., ...}
    VERSION                               # layerscope's own version ("0+unknown" in an uninstalled tree)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from importlib import metadata
from typing import Any

try:
    VERSION = metadata.version("layerscope")
except metadata.PackageNotFoundError:  # running from a source tree without installing
    VERSION = "0+unknown"

_LIBRARIES = ("layerscope", "torch", "transformers", "tokenizers", "numpy", "scipy", "pandas", "matplotlib",
              "safetensors")


def sha256_json(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def jsonable(obj: Any) -> Any:
    """Plain JSON types: numpy (or torch) scalars and arrays converted through ``.tolist()``, NaN and inf as
    null, dict keys as strings."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):  # numpy arrays and scalars, no numpy import
        return jsonable(obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    return obj
