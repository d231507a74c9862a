"""One run of the README's first command (`layerscope run`, every study on the default models), shared by the
tests that check what it wrote: the suite test and the per-study end-to-end checks read the same folder instead of
running each study again."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from layerscope.paths import models_dir

MODELS = models_dir()
"""The converted zoo models of the real cache, read at collection, before any test redirects $LAYERSCOPE_CACHE."""


@dataclass(frozen=True)
class SuiteRun:
    """A finished `layerscope run`: its folder, its console output and one study's files."""

    folder: Path
    stdout: str
    stderr: str

    def study(self, name: str) -> tuple[dict, pd.DataFrame, Path]:
        """``(result.json, table.csv, folder)`` of study ``name``."""
        out = self.folder / name
        return json.loads((out / "result.json").read_text()), pd.read_csv(out / "table.csv"), out


@pytest.fixture(scope="session")
def real_suite(tmp_path_factory) -> SuiteRun:
    """`layerscope run` in a fresh folder with its own empty activation cache (the converted zoo models shared),
    offline, as a newcomer runs it."""
    root = tmp_path_factory.mktemp("real-suite")
    cache = root / "cache"
    cache.mkdir()
    MODELS.mkdir(parents=True, exist_ok=True)
    (cache / "models").symlink_to(MODELS, target_is_directory=True)
    env = {**os.environ, "LAYERSCOPE_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    layerscope = Path(sys.executable).parent / "layerscope"
    work = root / "work"
    work.mkdir()
    done = subprocess.run([str(layerscope), "run"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=3000)
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = (work / "runs").iterdir()
    return SuiteRun(folder, done.stdout, done.stderr)
