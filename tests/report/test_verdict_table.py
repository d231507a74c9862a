"""The summary table at the top of a run page: one row per verdict, each status a badge with its word and its own
class (colours with enough contrast, the two that hold told apart without hue), every cell text, each study linked
to its section; and render_run puts it where the list of sentences was."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from layerscope.report.html import STATUS_CLASSES, STYLE, Section, render_run, verdict_table
from layerscope.study.verdicts import STATUSES

HOSTILE = '<script>alert("x")</script> & <img src=x onerror=alert(1)>'


class Cells(HTMLParser):
    """The text of every td and th, the open tags with their attributes, in order."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.cells: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_every_status_is_a_badge_with_its_word_and_class():
    rows = [("phases", "m", "claim", status, "key", ()) for status in STATUSES]
    page = verdict_table(rows)
    for status, cls in zip(STATUSES, ("status-robust", "status-fragile", "status-not-significant",
                                      "status-not-assessable"), strict=True):
        assert f'<span class="status {cls}">{status}</span>' in page
    assert set(STATUS_CLASSES) == set(STATUSES)
    cells = Cells(page).cells
    assert cells[:6] == ["study", "model", "claim", "status", "key number", "checks that flip it"]
    assert [cells[6 * i + 5] for i in range(1, 5)] == ["none", "none", "none", "n/a"]


def test_every_cell_is_text_and_the_study_links_to_its_section():
    page = verdict_table([(HOSTILE, HOSTILE, HOSTILE, "holds but fragile", HOSTILE, (HOSTILE, "without c3")),
                          ("divergence", "m", "c", HOSTILE, "k", ())], anchors=['x" onclick="a', None])
    assert "<script" not in page and "<img" not in page and 'onclick="a' not in page
    parsed = Cells(page)
    assert parsed.cells[6:12] == [HOSTILE, HOSTILE, HOSTILE, "holds but fragile", HOSTILE, f"{HOSTILE}, without c3"]
    assert parsed.cells[12:18] == ["divergence", "m", "c", HOSTILE, "k", "none"]
    links = [attrs for tag, attrs in parsed.tags if tag == "a"]
    assert links == [{"href": '#x" onclick="a'}]  # one attribute, its value the whole anchor
    assert {tag for tag, _ in parsed.tags} == {"table", "tr", "th", "td", "a", "span"}
    assert verdict_table([]) == '<p class="muted">No study reported a verdict.</p>'


def luminance(hex_colour: str) -> float:
    """WCAG 2 relative luminance of ``#rgb`` or ``#rrggbb``."""
    h = hex_colour.lstrip("#")
    h = "".join(c * 2 for c in h) if len(h) == 3 else h
    channels = [int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_status_colours_have_contrast_and_the_two_that_hold_differ_without_hue():
    colours = {}
    for cls in STATUS_CLASSES.values():
        rule = re.search(rf"\.{cls} \{{([^}}]*)\}}", STYLE).group(1)
        colours[cls] = (re.search(r"background: (#[0-9a-f]+)", rule).group(1),
                        re.search(r"(?<![-\w])color: (#[0-9a-f]+)", rule).group(1))
        assert "border" in rule  # each badge has an outline of its own besides its colour
    for background, text in colours.values():
        assert contrast(background, text) >= 4.5  # WCAG AA for normal text
    assert contrast(colours["status-robust"][0], colours["status-fragile"][0]) >= 3  # apart in lightness alone
    assert len({background for background, _ in colours.values()}) == 4


def test_render_run_puts_the_table_first_and_keeps_the_warnings(tmp_path):
    sections = [Section(anchor=a, title=t, question="q", headline=[f"{t} line <b>"], folder=tmp_path, method="m",
                        warnings=[f"few {t} <i>"], verdicts=[(a, "model-a", f"{t} claim", status, "r = +0.5", flips)])
                for a, t, status, flips in (("phases", "Phases", "holds but fragile", ("without c3",)),
                                            ("atlas", "Layer atlas", "holds and robust", ()))]
    page = render_run(tmp_path, "run", sections)
    summary, first = page.index('<h2 id="summary">Summary of verdicts</h2>'), page.index('<h2 id="phases">')
    top = page[summary:first]
    assert top.count("<table") == 1 and "<ul" not in top  # the table, not the list of sentences
    cells = Cells(top).cells
    assert cells[6:18] == ["Phases", "model-a", "Phases claim", "holds but fragile", "r = +0.5", "without c3",
                           "Layer atlas", "model-a", "Layer atlas claim", "holds and robust", "r = +0.5", "none"]
    assert [a["href"] for tag, a in Cells(top).tags if tag == "a"] == ["#phases", "#atlas", "#phases", "#atlas"]
    assert "few Phases &lt;i&gt;" in top and "few Layer atlas &lt;i&gt;" in top
    assert "Phases line &lt;b&gt;" not in top and "Phases line &lt;b&gt;" in page[first:]  # sentences in the section
