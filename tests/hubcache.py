"""A fake Hugging Face hub cache on disk, so hub ids with revisions load offline in tests.

    hub = fake_hub(tmp_path / "hub", "owner/tiny", {"step100": folder_a, "step200": folder_b})
    use_hub(monkeypatch, hub)                   # this process and its subprocesses read it, offline
    lm = load_model("owner/tiny@step100")       # folder_a's model; "owner/tiny" alone is refs/main

Each folder is a ``save_pretrained`` folder (model and tokenizer, e.g. from ``tiny.save``).
Call ``fake_hub`` once per repository; several repositories can share one cache root.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest


def fake_hub(root: Path, repo_id: str, revisions: dict[str, Path], main: str | None = None) -> Path:
    """Write ``revisions`` ({revision name: folder}) into the hub cache at ``root`` as revisions of ``repo_id``.

    The layout is huggingface_hub's: ``models--OWNER--NAME/refs/REVISION`` holds a 40-hex commit
    hash and ``snapshots/HASH/`` the folder's files. ``refs/main`` points at ``main`` (default: the
    last revision given). Returns ``root``, the value for ``HF_HUB_CACHE``.
    """
    if not revisions:
        raise ValueError("fake_hub needs at least one revision")
    repo = Path(root) / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    commits = {}
    for revision, folder in revisions.items():
        commits[revision] = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
        (repo / "refs" / revision).write_text(commits[revision])
        shutil.copytree(folder, repo / "snapshots" / commits[revision], dirs_exist_ok=True)
    (repo / "refs" / "main").write_text(commits[main or list(revisions)[-1]])
    return Path(root)


def use_hub(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Point huggingface_hub (and so transformers) at the cache ``root``, offline.

    huggingface_hub reads ``HF_HUB_CACHE`` once, at import, so its constant is patched for this
    process and the environment variable is set for subprocesses.
    """
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
