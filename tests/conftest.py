import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `import tiny`

from layerscope.paths import models_dir  # noqa: E402

USER_MODELS = models_dir()
"""Converted zoo models in the real cache, found before any test redirects $LAYERSCOPE_CACHE;
shared by every test so each zoo model is converted once per machine, not once per test."""


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own empty activation cache and never reaches the hub."""
    root = tmp_path_factory.mktemp("cache")
    USER_MODELS.mkdir(parents=True, exist_ok=True)
    (root / "models").symlink_to(USER_MODELS, target_is_directory=True)
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M from its PyPI package."""
    import layerscope

    return layerscope.load_model("smollm2-135m")
