"""The pieces behind "every string from outside is text, never markup" (issue 26), each read back by an independent
markdown reader: ``md_text`` shows any string as itself, ``md_table`` keeps its columns whatever a cell holds,
``no_raw_html`` leaves a report.md without HTML that reads the same, and the page renderer drops links to
``javascript:``, ``vbscript:`` and ``data:`` and carries a script-blocking Content-Security-Policy.

    .venv/bin/python -m pytest -q tests/security/test_markdown_text.py
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

from browser import Dom, words
from layerscope.report.html import markdown_html, page, safe_link
from layerscope.report.markdown import md_table, md_text, no_raw_html, number, signed
from layerscope.sweep.report import sweep_report
from payloads import CLOSE, DATA_IMG, HOVER, IMG, JS_LINK, PAYLOADS, SCRIPT, TABLE

GFM = MarkdownIt("commonmark", {"html": True}).enable("table")
"""An independent reader, raw HTML on: what a markdown viewer could make of a report.md."""
TEXT_ONLY = MarkdownIt("commonmark", {"html": False}).enable("table")
"""The same reader with raw HTML shown as text, as layerscope's pages render markdown."""
MARKUP = [*PAYLOADS, "*em* and __strong__", "`code`", "# heading", "> quote", "- item", "+ item", "1. one",
          "3) three", "    indented", "---", "===", "a\\b\\", "&amp; &lt;b&gt;", "~~strike~~", "<!-- comment -->",
          "[ref]: https://example.org", "line one\r\nline two\rthree", "<https://example.org>", "a\\|b", "| x | y |"]
"""Strings that would be markup somewhere in markdown, the payloads among them."""


def tags(html: str) -> set[str]:
    return {tag for tag, _ in Dom(html).elements}


@pytest.mark.parametrize("text", MARKUP)
def test_md_text_shows_any_string_as_itself(text):
    for context in ("{}", "Para\n{}", "- {}", "> {}", "## {}"):  # alone, after a line, in a list, quote, heading
        html = GFM.render(context.format(md_text(text)))
        assert words(" ".join(Dom(html).text)) == words(context.replace("- ", "").replace("> ", "").replace(
            "## ", "").format(text)), context
        assert tags(html) <= {"p", "ul", "li", "blockquote", "h2"}, html


@pytest.mark.parametrize("text", MARKUP)
def test_md_table_keeps_its_columns_whatever_a_cell_holds(text):
    table = md_table(["name", md_text(text), "r"], [[md_text(text), text, signed(-0.5)], [text, "", number(2.5e6)]])
    tokens = GFM.parse(table)
    assert [t.type for t in tokens].count("tr_open") == 3 and not any(t.type == "html_block" for t in tokens)
    assert Dom(TEXT_ONLY.render(table)).tables == [[3, 3, 3]]  # a raw cell's HTML is text only with HTML off
    cells = [words(t.content) for t in tokens if t.type == "inline"]
    assert len(cells) == 9
    rendered = [words(" ".join(Dom(MarkdownIt("commonmark").renderInline(t.content)).text))
                for t in tokens if t.type == "inline"]
    assert rendered[1] == rendered[3] == words(text)  # md_text cells: the string itself


def test_md_table_leaves_numbers_as_they_are():
    assert md_table(["layer", "r", "big"], [[3, signed(-0.5), number(2.5e6)], [4, "n/a", signed(1e-4, 2)]]) == (
        "| layer | r | big |\n|---|---|---|\n| 3 | -0.500 | 2.50e+06 |\n| 4 | n/a | +0.00 |")
    assert md_text("-0.500") != "-0.500"  # a leading sign in free text is escaped (it could start a list) ...
    assert GFM.render(md_text("-0.500")) == "<p>-0.500</p>\n"  # ... and shows the same


DOCUMENTS = {
    "inline": "Hello <b onmouseover=alert(1)>b</b> and <img src=x onerror=alert(1)>.",
    "block": "Before.\n\n<div>\n<script>document.title='X'</script>\n</div>\n\nAfter.",
    "comment": "<!-- hidden -->\n\ntext <!-- inline -->",
    "table": "| a | b |\n|---|---|\n| <img src=x onerror=alert(1)> | </td></tr></table> |",
    "quote and list": "> <i>q</i>\n\n- <b>item</b>\n- <?php echo 1; ?> <![CDATA[x]]> <!DOCTYPE html>",
    "escaped backslash": "a \\\\<b>bold</b> c",
    "code kept": "`<b>` in code and <b>live</b>\n\n```\n<script>kept</script>\n```\n\n    <pre>indented</pre>\n",
    "code span in a block": "<b>`<script>`</b>\n",
    "crlf": "x\r\n<div>\r\ny\r\n</div>\r\n",
}


@pytest.mark.parametrize("text", DOCUMENTS.values(), ids=DOCUMENTS.keys())
def test_no_raw_html_leaves_no_html_and_reads_the_same(text):
    out = no_raw_html(text)
    tokens = GFM.parse(out)
    assert not any(t.type == "html_block" for t in tokens)
    assert not any(c.type == "html_inline" for t in tokens for c in t.children or [])
    assert TEXT_ONLY.render(out) == TEXT_ONLY.render(text)  # as text, nothing changed
    for kept in ("```\n<script>kept</script>\n```", "    <pre>indented</pre>", "`<b>` in code"):
        if kept in text:
            assert kept in out


def test_no_raw_html_returns_a_report_without_html_unchanged():
    text = "# Title\n\nr < 0.05 and q <= 0.1; a -> b; `x<y`\n\n| a | b |\n|---|---|\n| 1 < 2 | 3 |\n"
    assert no_raw_html(text) == text


@pytest.mark.parametrize(("url", "ok"), [
    ("#summary", True), ("tasks/a/index.html", True), ("result.json", True), ("https://arxiv.org/abs/1", True),
    ("HTTP://example.org", True), ("//example.org/x", True), ("javascript%3Aalert(1)", True),
    ("javascript:alert(1)", False), ("JavaScript:alert(1)", False), ("vbscript:msgbox(1)", False),
    ("data:text/html,x", False), ("data:image/png;base64,AAAA", False), ("file:///etc/passwd", False),
    ("mailto:a@b.c", False)])
def test_safe_link(url, ok):
    assert safe_link(url) is ok


@pytest.mark.parametrize("text", [
    "[a](javascript:alert(1))", "[a](JAVASCRIPT:alert(1))", "[a](vbscript:msgbox(1))", "<javascript:alert(1)>",
    "[a](java&#115;cript:alert(1))", "[a](&#x6A;avascript:alert(1))", "[a][r]\n\n[r]: javascript:alert(1)",
    "![i](data:text/html,<script>alert(1)</script>)", "![i](data:image/svg+xml;base64,PHN2Zz4=)",
    "[a](data:text/html;base64,PHNjcmlwdD4=)", "<b onmouseover=alert(1)>b</b>", SCRIPT, IMG, CLOSE])
def test_the_page_renderer_drops_scripts_and_script_links(text):
    dom = Dom(markdown_html(text))
    assert {tag for tag, _ in dom.elements} <= {"p", "a"}
    assert [attrs for tag, attrs in dom.elements if tag == "a"] == []
    assert all(not name.startswith("on") for _, attrs in dom.elements for name in attrs)


def test_the_page_renderer_keeps_relative_anchor_and_web_links():
    dom = Dom(markdown_html("[a](#x) [b](tasks/m/index.html) [c](https://example.org/p)"))
    assert [attrs["href"] for tag, attrs in dom.elements if tag == "a"] == [
        "#x", "tasks/m/index.html", "https://example.org/p"]


def test_every_page_carries_a_policy_that_runs_no_script():
    metas = [attrs for tag, attrs in Dom(page("t", "<p>x</p>")).elements if tag == "meta"]
    policy = [m["content"] for m in metas if (m.get("http-equiv") or "").lower() == "content-security-policy"]
    assert policy == ["default-src 'none'; img-src data:; style-src 'unsafe-inline'"]


def test_a_sweep_report_of_hostile_names_is_text():
    tasks = [{"spec": IMG, "model": IMG, "revision": JS_LINK, "step": 1, "n_layers": 3, "status": "done",
              "seconds": 1.0, "folder": f"tasks/{JS_LINK}", "numbers": {TABLE: 0.5, HOVER: 1.0}, "headline": PAYLOADS,
              "error": None},
             {"spec": DATA_IMG, "model": CLOSE, "revision": None, "step": None, "status": "failed", "seconds": None,
              "folder": "tasks/x", "numbers": None, "headline": [], "error": SCRIPT}]
    summary = {"study": HOVER, "executor": "serial", "tasks": tasks, "sections": [(CLOSE, DATA_IMG)]}
    text = sweep_report(summary)
    assert not any(t.type == "html_block" for t in GFM.parse(text))
    dom = Dom(GFM.render(text))  # raw HTML on: only the escaping keeps it text
    assert all(not name.startswith("on") for _, attrs in dom.elements for name in attrs)
    assert not {tag for tag, _ in dom.elements} & {"script", "img", "b"}
    assert all(rows == [rows[0]] * len(rows) for rows in dom.tables) and len(dom.tables) == 2
    links = [attrs["href"] for tag, attrs in dom.elements if tag == "a"]
    assert [unquote(link) for link in links] == [f"tasks/{JS_LINK}/index.html"] and not urlsplit(links[0]).scheme
    shown = words(" ".join(dom.text))
    assert all(words(p) in shown for p in PAYLOADS)
