"""What the findings tools share: a block of a page between two markers, rewritten.

    text = replace_block(text, "lens-headline", body)   # between <!-- lens-headline:start --> and :end -->
"""

from __future__ import annotations

import re


def replace_block(text: str, tag: str, body: str) -> str:
    """``text`` with whatever stands between ``<!-- tag:start -->`` (and its line end) and ``<!-- tag:end -->``
    replaced by ``body`` and a line end; ``SystemExit`` naming the markers when they are missing."""
    pattern = re.compile(rf"(<!-- {tag}:start -->\n).*?(<!-- {tag}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"no <!-- {tag}:start --> ... <!-- {tag}:end --> block; add the two markers first")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
