"""Model specs: ``NAME`` or ``NAME@REVISION`` (a hub id, folder or .gguf file at a revision).

    split_revision("EleutherAI/pythia-410m@step3000")    # ('EleutherAI/pythia-410m', 'step3000')
    split_revision("./models/a@b")                        # ('./models/a@b', None) when that path exists
"""

from __future__ import annotations

from pathlib import Path


def split_revision(spec: str) -> tuple[str, str | None]:
    """``NAME@REVISION`` -> (NAME, REVISION); a spec without ``@``, or a local path that exists, has none."""
    if "@" in spec and not path_exists(Path(spec)):
        name, revision = spec.rsplit("@", 1)
        return name, revision or None
    return spec, None


def path_exists(path: Path) -> bool:
    """``path.exists()``, but False for a name the file system refuses (e.g. too long) instead of an error."""
    try:
        return path.exists()
    except OSError:  # a name too long for the file system, say: no such file
        return False
