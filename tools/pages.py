"""What the findings tools share: a block of a page between two markers, rewritten.

    text = replace_block(text, "lens-headline", body)   # between <!-- lens-headline:start --> and :end -->
    stale = write_blocks(ROOT, {"README.md": {"lens-headline": body}}, check=False)   # the pages that changed
"""

from __future__ import annotations

import re
from pathlib import Path


def replace_block(text: str, tag: str, body: str) -> str:
    """``text`` with whatever stands between ``<!-- tag:start -->`` (and its line end) and ``<!-- tag:end -->``
    replaced by ``body`` and a line end; ``SystemExit`` naming the markers when they are missing."""
    pattern = re.compile(rf"(<!-- {tag}:start -->\n).*?(<!-- {tag}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"no <!-- {tag}:start --> ... <!-- {tag}:end --> block; add the two markers first")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def write_blocks(root: Path, blocks: dict[str, dict[str, str]], check: bool) -> list[str]:
    """Replace each page's blocks (``{page: {tag: body}}``, pages relative to ``root``); the pages whose text
    changed, which are written unless ``check``."""
    stale = []
    for page, bodies in blocks.items():
        path = root / page
        text = path.read_text(encoding="utf-8")
        new = text
        for tag, body in bodies.items():
            new = replace_block(new, tag, body)
        if new != text:
            stale.append(page)
            if not check:
                path.write_text(new, encoding="utf-8")
    return stale
