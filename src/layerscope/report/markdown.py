"""Small markdown builders for reports.

    md_table(["layer", "r"], [[0, signed(0.12)], [4, signed(-0.3)]])
    number(1940821235921.001, 4)   # "1.941e+12": from LARGE on, scientific notation
    f"## {md_text(model)}"         # every string from outside (a category, text, model name, path) is text
    no_raw_html(report)            # a report.md with every `<` that would open raw HTML escaped

Every string from outside is text, never markup: a report interpolates a category, a text, a language code, a
model name or a path only through :func:`md_text` (or as a :func:`md_table` cell, whose `|` and line breaks
are escaped), and :func:`no_raw_html` takes whatever raw HTML is left out of a report.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from markdown_it import MarkdownIt

from ..modes import NOTEBOOKS
from ..terminal import shown

LARGE = 1e5
"""From this magnitude on, ``number`` and ``signed`` print scientific notation (``digits`` significant digits)."""
_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~!#])")
"""The characters that start markup (emphasis, code, links, images, HTML, entities, tables, headings)."""
_BLOCK_START = re.compile(r"^([-+=]|\d+[.)])")
"""What opens a list item or underlines a heading when a line starts with it."""
_LINE_BREAK = re.compile(r"\r\n?|\n")
_TABLE_PIPE = re.compile(r"(?<!\\)\|")
"""A `|` that would end a table cell (markdown-it, like GFM, takes one after a backslash as text)."""
_HTML_FINDER = MarkdownIt("commonmark", {"html": True}).enable("table")
_CODE_OR_TAG = re.compile(r"(?P<code>(?<!`)(?P<ticks>`+)(?!`).+?(?<!`)(?P=ticks)(?!`))"
                          r"|(?P<slashes>(?<!\\)(?:\\\\)*)<", re.S)
"""A code span (kept as it is) or a `<` after an even number of backslashes (one that can open HTML)."""
_TAG = re.compile(r"(?P<code>(?!))|(?P<slashes>(?<!\\)(?:\\\\)*)<")
"""Every `<` that can open HTML, in code spans too (its ``code`` group never matches)."""


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _large(x: Any) -> bool:
    return math.isfinite(x) and abs(x) >= LARGE


def signed(x: Any, digits: int = 3) -> str:
    """``signed(0.1234)`` -> ``+0.123``; ``signed(-2.5e6)`` -> ``-2.50e+06`` (|x| >= 1e5: ``digits``
    significant digits); ``n/a`` for a missing value."""
    if _missing(x):
        return "n/a"
    return f"{x:+.{max(digits - 1, 0)}e}" if _large(x) else f"{x:+.{digits}f}"


BITS_PER_NAT = 1 / math.log(2)
"""What a table's nats are multiplied by for display: every page, report and figure states KL, cross-entropy and
NLL in bits per token (the tables keep the nats they were computed in, and say so)."""


def bits(nats: Any) -> Any:
    """``bits(math.log(2))`` -> 1.0: a value (or numpy array, pandas column) in nats, in bits; None stays None."""
    return None if nats is None else nats * BITS_PER_NAT


def number(x: Any, digits: int = 3) -> str:
    """``number(0.1234)`` -> ``0.123``; ``number(2e-5)`` -> ``2e-05`` (|x| < 1e-3: ``digits`` significant
    digits); ``number(1.94e12)`` -> ``1.94e+12`` (|x| >= 1e5 likewise); ``n/a`` for a missing value."""
    if _missing(x):
        return "n/a"
    if _large(x):
        return f"{x:.{max(digits - 1, 0)}e}"
    return f"{x:.{digits}g}" if isinstance(x, float) and abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"


def md_table(headers: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """``md_table(["layer", "r"], [[0, "+0.120"]])``: a markdown table. Each header and cell is ``str(cell)`` with
    its line breaks made spaces and every unescaped ``|`` escaped, so no value can add a column or a row; numbers
    come out as they are. Free text in a cell still needs :func:`md_text` to show as text."""
    lines = ["| " + " | ".join(map(_cell, headers)) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return _TABLE_PIPE.sub(r"\\|", _LINE_BREAK.sub(" ", str(value)))


def method_line(config: dict) -> str:
    if config.get("compat") == NOTEBOOKS:
        return ("Method: **notebooks mode** (the notebooks' numerics: token 0 always dropped from mean pooling, "
                "every 4th layer plus the last).")
    return "Method: **corrected** (a BOS token dropped by its id, never by position)."


def with_models(report: str, manifest: dict) -> str:
    """``report`` with a line naming every model of ``manifest`` exactly (checkpoint and quantization, and the
    first 16 hex digits of its weights' SHA-256) after its title line (the first line, when it is a heading),
    else at its top: ``with_models("# Divergence\n\n...", result.manifest)``."""
    models = manifest.get("models") or []
    if not models:
        return report
    def named(m: dict) -> str:  # "spec = checkpoint, quantization" where the spec does not say it already
        exact = m.get("exact") or m.get("name")
        return md_text(m.get("name")) + ("" if exact == m.get("name") else f" = {md_text(exact)}")

    names = "; ".join(f"{named(m)} (weights SHA-256 {md_text(str(m.get('weights_hash'))[:16])})" for m in models)
    line = f"Model{'s' if len(models) > 1 else ''}: {names}."
    title, _, rest = report.partition("\n")
    if title.startswith("# "):
        return f"{title}\n\n{line}\n\n{rest.lstrip(chr(10))}"
    return f"{line}\n\n{report}"


def md_text(s: Any) -> str:
    """``f"## {md_text(model)}"``: ``str(s)`` as inert markdown text, shown as it is. Markup characters
    (``\\ ` * _ [ ] < > & | ~ ! #``) are backslash-escaped, line breaks become spaces, and a leading ``-``, ``+``,
    ``=`` or ``1.`` cannot open a list or underline a heading, nor leading spaces a code block. For markdown only:
    a headline shown in a terminal or escaped by :mod:`layerscope.report.html` takes the plain string."""
    text = _SPECIAL.sub(r"\\\1", shown(_LINE_BREAK.sub(" ", str(s)).lstrip(" \t")))
    return _BLOCK_START.sub(lambda m: f"{m.group(1)[:-1]}\\{m.group(1)[-1]}", text)


def no_raw_html(text: str) -> str:
    """``no_raw_html(report)``: ``report`` (markdown) with every ``<`` that opens raw HTML (an HTML block, an inline
    tag, a comment) backslash-escaped, so the file holds no HTML a viewer could run; it reads the same. Code
    blocks and code spans are kept; a text without raw HTML comes back unchanged. Terminal control characters
    (ESC and the rest, :func:`layerscope.terminal.shown`) are written as their escapes, so ``cat report.md`` is
    text too (a CRLF line end stays one)."""
    text = "\r\n".join(shown(part) for part in text.split("\r\n"))
    for _ in range(text.count("<") + 1):
        spans = [t.map for t in _HTML_FINDER.parse(text) if t.map and (t.type == "html_block" or (
            t.type == "inline" and any(c.type == "html_inline" for c in t.children or [])))]
        if not spans:
            return text
        lines = _LINE_BREAK.sub("\n", text).split("\n")
        escaped = _escape_spans(lines, spans, _CODE_OR_TAG)
        # a tag the code-span rule left (a backtick pair inside an HTML block) goes in the next pass
        text = escaped if escaped != "\n".join(lines) else _escape_spans(lines, spans, _TAG)
    return text


def _escape_spans(lines: list[str], spans: list[list[int]], pattern: re.Pattern) -> str:
    """``lines`` joined, every ``<`` that ``pattern`` finds in the line ranges ``spans`` backslash-escaped."""
    out = list(lines)
    for start, end in spans:
        chunk = "\n".join(out[start:end])
        chunk = pattern.sub(lambda m: m.group(0) if m.group("code") else f"{m.group('slashes')}\\<", chunk)
        out[start:end] = chunk.split("\n")
    return "\n".join(out)
