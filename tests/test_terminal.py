"""layerscope.terminal: every character a terminal acts on is escaped at each place text is printed (the command
line's lines, progress lines, log records, report.md), by hand-listed expectations."""

import logging
import shutil

import pytest
from typer.testing import CliRunner

from layerscope import progress
from layerscope.cli import app
from layerscope.report.markdown import md_text, no_raw_html
from layerscope.terminal import ShownFormatter, shown

HOSTILE = "lab\x1b]0;pwned\x07\x1b[2Jels\r\x08\u202e\x9b"
ESCAPED = "lab\\x1b]0;pwned\\x07\\x1b[2Jels\\r\\x08\\u202e\\x9b"
"""An OSC title, a screen clear, a carriage return, a backspace, a right-to-left override and a C1 CSI, and what
each becomes (Python's escapes, written out by hand)."""


def test_shown_escapes_what_a_terminal_acts_on_and_keeps_text_and_layout():
    assert shown(HOSTILE) == ESCAPED
    assert shown("é ü 中 – ok\n\tnext") == "é ü 中 – ok\n\tnext"  # printable text, line breaks and tabs stay
    assert shown(shown(HOSTILE)) == ESCAPED  # escaping twice changes nothing


def test_progress_lines_and_log_records_are_shown(monkeypatch, capsys):
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    list(progress._lines(range(2), HOSTILE, "step", 2, 0))
    err = capsys.readouterr().err
    assert "\x1b" not in err and ESCAPED in err
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "model %s", (HOSTILE,), None)
    assert ShownFormatter("%(message)s").format(record) == f"model {ESCAPED}"


def test_report_markdown_holds_no_control_character():
    assert "\x1b" not in md_text(HOSTILE) and "\x1b" not in no_raw_html(f"# {HOSTILE}\n\ntext\n")
    assert no_raw_html("# a\n\nb\n") == "# a\n\nb\n"


def test_a_run_folder_named_with_escapes_is_printed_as_text(tiny_suite, tmp_path):
    folder, _ = tiny_suite
    hostile = tmp_path / "run\x1b]0;pwned\x07\x1b[2J"
    shutil.copytree(folder / "divergence", hostile)
    result = CliRunner().invoke(app, ["report", str(hostile)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "run\\x1b]0;pwned\\x07\\x1b[2J" in result.output


@pytest.mark.parametrize("char", ["\x1b", "\x07", "\r", "\x9b", "\u202e"])
def test_each_control_character_alone(char):
    assert char not in shown(f"a{char}b")
