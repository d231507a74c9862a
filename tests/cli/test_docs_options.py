"""Every ``--option`` that README.md and docs/**/*.md mention exists, as the typer app declares it.

    PYTHONPATH=src .venv/bin/python -m pytest -q tests/cli/test_docs_options.py   # one failure per page, listing
                                                                               # each wrong mention and its line

- In a command (a line of a fenced block, continuation lines joined, or a code span in the text): after
  ``layerscope COMMAND``, or in a code span that starts with a command's name and has options
  (``lens --tuned FOLDER``), it is an option of that command; after ``layerscope run STUDY``, or in a code span
  that starts with a study's name (``phases --reference FILE``), it is one STUDY reads, as
  ``layerscope run STUDY --help`` lists them (the others are an error at run time).
- After another program (pip, python, make, mkdocs, a ``*.py`` script, ...) it is that program's and not checked;
  so is a code span of options alone later in the same sentence (``make docs`` (the site, ``--strict``)).
- Anywhere else it is an option of some layerscope command.

``PLUGIN`` lists what belongs to a study that is not built in (the toy plugin on docs/writing-a-study.md, which
tests/run/test_plugins.py installs and runs).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main

from layerscope.cli import app
from layerscope.run.registry import studies

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
OTHER = re.compile(r"(?<![\w/.-])(pip|python3?|pytest|make|mkdocs|git|ruff|lint-imports|uv|ray)\b|\S+\.py\b")
"""Programs whose options are theirs."""
PROSE = "\0"
"""Marks the words of a sentence outside its code spans: no command starts at their first word."""
PLUGIN = {"docs/writing-a-study.md": {"study": "toy", "options": {"--scale"}}}


@dataclass(frozen=True)
class Owner:
    """Whose options a mention is checked against: a command (and study), ``other`` (another program's, not
    checked) or ``*`` (any layerscope command's)."""

    command: str | None
    study: str | None = None


ANY = Owner("*")


def app_options() -> dict[tuple[str, str | None], set[str]]:
    """Every command's options, and ``layerscope run STUDY``'s for each study, from the app's click parameters
    (as ``--help`` shows them: ``run STUDY`` hides the settings STUDY does not read)."""
    root = typer.main.get_command(app)
    ctx = root.make_context("layerscope", ["--help"], resilient_parsing=True)
    found = {("", None): {o for p in root.get_params(ctx) for o in p.opts}}
    for name, command in root.commands.items():
        for study in [None, *studies()] if name == "run" else [None]:
            sub = command.make_context(name, [study] if study else [], parent=ctx, resilient_parsing=True)
            found[name, study] = {o for p in command.get_params(sub) if not p.hidden for o in p.opts}
    return found


OPTIONS = app_options()
COMMANDS = {name for name, _ in OPTIONS if name}
START = re.compile(r"(?<![\w-])layerscope\s+(" + "|".join(map(re.escape, sorted(COMMANDS, key=len, reverse=True)))
                   + r")(?![\w-])(?:\s+([a-z][\w-]*))?")


def owners(text: str, page: str, at_start: bool) -> list[tuple[int, Owner]]:
    """Where in ``text`` (one command line or code span) a command starts, and whose it is."""
    found = [(m.start(), Owner("other")) for m in OTHER.finditer(text)]
    for m in START.finditer(text):
        command, word = m.group(1), m.group(2)
        study = word if command == "run" and word in studies() else None
        plugin = command == "run" and word is not None and word == PLUGIN.get(page, {}).get("study")
        found.append((m.start(), Owner("other") if plugin else Owner(command, study)))
    first = text.split()[0] if at_start and OPTION.search(text) else ""
    if first in COMMANDS:
        found.append((0, Owner(first)))
    elif first in studies():
        found.append((0, Owner("run", first)))
    return sorted(found, key=lambda f: f[0])


def units(path: Path) -> list[tuple[list[str], bool]]:
    """The page as ``(pieces, fenced)``: a fenced block's logical lines (continuations joined), each cut at a
    comment, ``&&``, ``;`` and a pipe; and the prose's sentences, each as its code spans in order (a span may cross
    a line end) followed by the words outside them."""
    pieces: list[tuple[str, bool]] = []  # (text, fenced): a fenced block's line, or a prose paragraph
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif pieces and pieces[-1][1] and fenced and pieces[-1][0].endswith("\\"):
            pieces[-1] = (pieces[-1][0][:-1] + " " + line, True)
        elif pieces and not pieces[-1][1] and not fenced and line.strip() and pieces[-1][0].strip():
            pieces[-1] = (pieces[-1][0] + "\n" + line, False)
        else:
            pieces.append((line, fenced))
    found = []
    for text, in_block in pieces:
        if in_block:
            found += [([part], True) for part in re.split(r"\s#\s|&&|;|\s\|\s", text)]
            continue
        text = text.replace("\\`", "")  # an escaped backtick (in help text) opens no code span
        cuts, spans = [0], []
        for m in re.finditer(r"`[^`]+`|(?<=[.!?])\s+(?=[A-Z`*\[(])", text):  # a sentence ends outside code spans
            if m.group(0).startswith("`"):
                spans.append(m)
            else:
                cuts.append(m.start())
        for begin, end in itertools.pairwise([*cuts, len(text)]):
            inside = [m for m in spans if begin <= m.start() < end]
            words = re.sub(r"`[^`]+`", " ", text[begin:end])  # a sentence is cut outside its code spans
            found.append(([m.group(0)[1:-1] for m in inside] + [PROSE + words], False))
    return found


def mentions(path: Path) -> list[tuple[str, Owner, str]]:
    """``(option, owner, context)`` for every option the page mentions."""
    page = str(path.relative_to(ROOT))
    found = []
    for pieces, in_block in units(path):
        carried = ANY  # in a sentence, options alone after another program's span are that program's
        for piece in pieces:
            text = piece.removeprefix(PROSE)
            starts = owners(text, page, at_start=text == piece)
            for m in OPTION.finditer(text):
                before = [owner for at, owner in starts if at <= m.start()]
                found.append((m.group(0), before[-1] if before else carried, " ".join(text.split())))
            if starts and not in_block:
                carried = starts[-1][1] if starts[-1][1].command == "other" else ANY
    return found


def problems(path: Path) -> list[str]:
    page = str(path.relative_to(ROOT))
    every = set().union(*OPTIONS.values())
    wrong = []
    for option, owner, context in mentions(path):
        if owner.command == "other" or option in PLUGIN.get(page, {}).get("options", ()):
            continue
        if owner is ANY:
            ok, whose = option in every, "any layerscope command"
        else:
            ok = option in OPTIONS[owner.command, owner.study]
            whose = f"`layerscope {owner.command}{' ' + owner.study if owner.study else ''}`"
        if not ok:
            wrong.append(f"{page}: {option} is not an option of {whose}: {context[:160]}")
    return wrong


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_option_a_page_mentions_exists(path):
    assert problems(path) == []
