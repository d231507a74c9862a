"""The figure files of a run folder that a page may embed: a run folder is data from outside (a tarball from
someone else), so a file is read only when it is what its name says it is.

    figures = figure_files(Path("runs/X/phases"), inside=Path("runs/X"), skipped=skipped)  # one per figure
    read_figure(Path("runs/X/phases/curve.svg"), inside=Path("runs/X"))  # its bytes, or NotAFigure(why)
    warn_skipped(Path("runs/X"), skipped)   # one warning line naming every file left out, and why

A figure file is embedded only when it is a regular file (not a symbolic link, device, FIFO or folder) that
resolves inside the run folder, at most :data:`MAX_FIGURE_BYTES` long, whose bytes are the type its suffix says:
a PNG starts with the PNG signature, a PDF with ``%PDF-``, and an SVG parses as XML with root ``<svg>``, declares
no entity, holds no processing instruction, no ``<script>``, no ``<foreignObject>``, no ``on*`` event attribute
and no reference outside itself (every ``href``/``xlink:href``/``src`` and every CSS ``url(...)`` is a
``#fragment`` or a ``data:image/`` URI; no ``@import``). A link to a figure, even one inside the folder, is
skipped: only the run folder's own files are shown. Everything else is skipped and named in one warning line.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from xml.parsers import expat

log = logging.getLogger(__name__)

MAX_FIGURE_BYTES = 20 * 1024 * 1024
"""The largest figure file a page embeds (per file): layerscope's own figures are a few hundred KiB."""
FIGURE_TYPES = {".svg": "image/svg+xml", ".png": "image/png", ".pdf": "application/pdf"}
"""The figure files a page shows, best first: an SVG (sharp at any zoom), else the PNG, else a PDF (linked)."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PDF_SIGNATURE = b"%PDF-"
SVG_NAMESPACE = "http://www.w3.org/2000/svg"
_URL = re.compile(r"url\(\s*(['\"]?)(.*?)\1\s*\)", re.IGNORECASE | re.DOTALL)


class NotAFigure(Exception):
    """A file a page does not embed; the message says why, in a few words ("a symlink", "holds a script")."""


@dataclass(frozen=True)
class Figure:
    """A figure file that passed :func:`read_figure`, with the bytes that were checked (embed these, never the
    file read again)."""

    path: Path
    data: bytes

    @property
    def kind(self) -> str:
        """Its MIME type: ``image/svg+xml``, ``image/png`` or ``application/pdf``."""
        return FIGURE_TYPES[self.path.suffix.lower()]


def figure_files(folder: Path, inside: Path | None = None, skipped: list[str] | None = None) -> list[Figure]:
    """The figures of a study folder to show, one per figure (its .svg, else its .png, else its .pdf: the best
    file that passes :func:`read_figure`), in name order. ``inside`` is the run folder the files must resolve in
    (default ``folder``); each file refused is appended to ``skipped`` as ``"name (why)"``, named relative to
    ``inside``."""
    inside = folder if inside is None else inside
    found: dict[str, Figure] = {}
    for suffix in FIGURE_TYPES:  # best first: a figure keeps the first file that passes
        for path in sorted(folder.glob(f"*{suffix}")):
            if path.stem in found:
                continue
            try:
                found[path.stem] = Figure(path, read_figure(path, inside))
            except NotAFigure as why:
                if skipped is not None:
                    skipped.append(f"{_name(path, inside)} ({why})")
    return [found[stem] for stem in sorted(found)]


def read_figure(path: Path, inside: Path) -> bytes:
    """The bytes of the figure file ``path`` when :func:`read_inside` reads it and they are the type its suffix
    says; :class:`NotAFigure` saying why not otherwise."""
    data = read_inside(path, inside)
    kind = FIGURE_TYPES.get(path.suffix.lower())
    if kind is None:
        raise NotAFigure("not a figure type")
    if kind == "image/png" and not data.startswith(PNG_SIGNATURE):
        raise NotAFigure("not a PNG")
    if kind == "application/pdf" and not data.startswith(PDF_SIGNATURE):
        raise NotAFigure("not a PDF")
    if kind == "image/svg+xml":
        check_svg(data)
    return data


def read_inside(path: Path, inside: Path) -> bytes:
    """The bytes of ``path`` (a figure, a report.md) when it is a regular file resolving inside the folder
    ``inside``, at most :data:`MAX_FIGURE_BYTES`; :class:`NotAFigure` saying why not otherwise. The file is
    opened without following a link and checked again once open."""
    try:
        st = os.lstat(path)
    except OSError:
        raise NotAFigure("unreadable") from None
    _check_mode(st.st_mode)
    real, root = os.path.realpath(path), os.path.realpath(inside)
    if real == root or os.path.commonpath([real, root]) != root:  # a linked folder on the way out of the run
        raise NotAFigure("outside the run folder")
    if st.st_size > MAX_FIGURE_BYTES:
        raise NotAFigure(f"over {_size(MAX_FIGURE_BYTES)}")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # ELOOP: it became a link since lstat
        raise NotAFigure("unreadable") from None
    with os.fdopen(fd, "rb") as f:
        _check_mode(os.fstat(f.fileno()).st_mode)
        data = f.read(MAX_FIGURE_BYTES + 1)
    if len(data) > MAX_FIGURE_BYTES:
        raise NotAFigure(f"over {_size(MAX_FIGURE_BYTES)}")
    return data


def check_svg(data: bytes) -> None:
    """:class:`NotAFigure` unless ``data`` is an SVG document that runs nothing and refers to nothing outside
    itself (see the module's docstring for the rules)."""
    parser = expat.ParserCreate(namespace_separator=" ")
    seen_root = False
    style_depth = 0  # inside a <style> element: its text is CSS

    def refuse(why: str):
        def handler(*_):
            raise NotAFigure(why)
        return handler

    def start(name: str, attrs: dict[str, str]) -> None:
        nonlocal seen_root, style_depth
        namespace, _, local = name.rpartition(" ")
        if not seen_root and (local != "svg" or namespace not in ("", SVG_NAMESPACE)):
            raise NotAFigure("not an SVG")
        seen_root = True
        element = local.lower()
        if element == "script":
            raise NotAFigure("holds a script")
        if element == "foreignobject":
            raise NotAFigure("holds a foreignObject")
        if style_depth or element == "style":
            style_depth += 1
        for key, value in attrs.items():
            attribute = key.rpartition(" ")[2].lower()
            if attribute.startswith("on"):
                raise NotAFigure(f"holds an event handler ({attribute})")
            if attribute in ("href", "src") and not _internal(value):
                raise NotAFigure("refers outside itself")
            if element in ("set", "animate") and attribute == "attributename" and value.strip().lower().endswith(
                    ("href", "src")):
                raise NotAFigure("animates a link")
            _check_css(value)

    def end(_name: str) -> None:
        nonlocal style_depth
        style_depth = max(style_depth - 1, 0)

    def text(chars: str) -> None:
        if style_depth:
            _check_css(chars)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    parser.EntityDeclHandler = refuse("declares an entity")  # no entity: no expansion bomb, nothing external
    parser.ProcessingInstructionHandler = refuse("holds a processing instruction")  # <?xml-stylesheet href=...?>
    parser.ExternalEntityRefHandler = refuse("refers outside itself")
    try:
        parser.Parse(data, True)
    except (expat.ExpatError, RecursionError):
        raise NotAFigure("not well-formed XML") from None
    if not seen_root:
        raise NotAFigure("not an SVG")


def warn_skipped(where: Path, skipped: list[str]) -> None:
    """One warning line naming every file of ``where`` (a figure, a report.md) that a page left out, and why;
    none when none."""
    if skipped:
        count = f"{len(skipped)} file{'s' * (len(skipped) != 1)}"
        log.warning("skipped %s in %s: %s", count, _printable(str(where)), ", ".join(skipped))


def _check_mode(mode: int) -> None:
    if stat.S_ISLNK(mode):
        raise NotAFigure("a symlink")
    if not stat.S_ISREG(mode):
        raise NotAFigure("not a regular file")


def _internal(url: str) -> bool:
    """Whether a link in an SVG stays inside it: a ``#fragment`` or an embedded ``data:image/`` URI."""
    url = url.strip()
    return url.startswith("#") or url[:11].lower() == "data:image/"


def _check_css(text: str) -> None:
    if "@import" in text.lower():
        raise NotAFigure("refers outside itself")
    if any(not _internal(m.group(2)) for m in _URL.finditer(text)):
        raise NotAFigure("refers outside itself")


def _name(path: Path, inside: Path) -> str:
    """``path`` relative to ``inside`` (its name when it is not under it), every unprintable character escaped:
    a file name never breaks the warning line."""
    try:
        name = path.relative_to(inside).as_posix()
    except ValueError:
        name = path.name
    return _printable(name)


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"
