"""Where layerscope keeps converted models and cached activations.

Everything lives under one folder: ``$LAYERSCOPE_CACHE`` if set, else
``~/.cache/layerscope``.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    env = os.environ.get("LAYERSCOPE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "layerscope"


def models_dir() -> Path:
    return cache_root() / "models"


def activations_dir() -> Path:
    return cache_root() / "activations"
