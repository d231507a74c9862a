"""Every string from outside is text, never markup (issue 26): hostile names and texts in every input a run reads
leave an index.html in which nothing runs, no link leads to a script and every table keeps its columns.

    .venv/bin/python -m pytest -q tests/security

One suite run (every study, two tiny random models) reads payloads from its dataset's category names and
statements, its language codes and texts, its prompts, the folder names of both models, the dataset's file name
and the out folder's name; one plugin study, registered in a subprocess, returns payloads as its title, question,
method notes, warnings, headline, report body, manifest and a file name. Real headless Chromium loads each page
twice: with its Content-Security-Policy, and with the policy taken out, so escaping alone is proven. A payload
that ran would set ``document.title`` to "X".
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

import tiny
from browser import Dom, dump, words
from layerscope.cli import app
from payloads import (
    CLOSE,
    DATASET,
    HOSTILE_FILE,
    HOVER,
    IMG,
    LANG_HIGH,
    LANG_LOW,
    MODEL_A,
    MODEL_B,
    OUT,
    PAYLOADS,
    SCRIPT,
)


def check_page(page: Path, title: str, csp: bool) -> Dom:
    """Load ``page`` in Chromium (with or without its policy) and assert that nothing in it is live markup: the
    title stays ``title``, no element carries an ``on...`` handler, no script or frame exists, every image is an
    embedded figure, every link is relative, ``#`` or http(s), and every table row has its header's cells."""
    dom = Dom(dump(page, csp=csp))
    assert dom.title == title
    handlers = [(tag, name) for tag, attrs in dom.elements for name in attrs if name.lower().startswith("on")]
    assert handlers == []
    tags = {tag for tag, _ in dom.elements}
    assert not tags & {"script", "iframe", "object", "embed", "frame", "base", "form"}
    for tag, attrs in dom.elements:
        if tag == "img":
            assert (attrs.get("src") or "").startswith("data:image/png;base64,")
        for name in ("href", "src", "action", "formaction"):
            if tag != "img" and attrs.get(name) is not None:
                assert urlsplit(attrs[name]).scheme in ("", "http", "https"), (tag, attrs)
    assert dom.tables
    for rows in dom.tables:
        assert rows and all(cells == rows[0] for cells in rows), rows
    return dom


def no_raw_html(markdown: str) -> bool:
    """Whether a markdown file holds no HTML (read by markdown-it with HTML on, as a viewer might)."""
    tokens = MarkdownIt("commonmark", {"html": True}).enable("table").parse(markdown)
    found = [t for t in tokens if t.type == "html_block"]
    found += [c for t in tokens for c in t.children or [] if c.type == "html_inline"]
    return not found


# --- a suite run on hostile inputs -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_suite(tmp_path_factory):
    """A suite run (`layerscope run`, every study) whose every input holds payloads; returns the run folder."""
    root = tmp_path_factory.mktemp("hostile")
    models = [str(tiny.save(root / MODEL_A, "llama", adds_bos=False)),
              str(tiny.save(root / MODEL_B, "gpt2", adds_bos=True))]
    subjects = ["the river", "the market", "our team"]
    pairs = {name: {"pairs": [[f"Without doubt {s} grew {c + 2} times in year {i}. {name}",
                               f"Maybe {s} grew a little in year {i}, some say {PAYLOADS[(c + i) % 7]}"]
                              for i, s in enumerate(subjects)]} for c, name in enumerate(PAYLOADS)}
    texts = {LANG_HIGH: {"resource": "high", "texts": [f"The cat sat on the mat. {SCRIPT}", "Prices rose by four."]},
             LANG_LOW: {"resource": "low", "texts": [f"Bread dough doubles in size. {IMG}", "Ice floats on water."]}}
    dataset, languages, prompts = root / DATASET, root / "texts.json", root / "prompts.txt"
    dataset.write_text(json.dumps(pairs))
    languages.write_text(json.dumps(texts))
    prompts.write_text("\n".join([*tiny.TEXTS[:6], *(words(p) for p in PAYLOADS)]) + "\n")
    args = ["run", "--model", models[0], "--model", models[1], "--dataset", str(dataset), "--texts",
            str(languages), "--prompts", str(prompts), "--n-bootstrap", "100", "--n-permutations", "100",
            "--out", str(root / OUT)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return root / OUT


@pytest.mark.parametrize("csp", [True, False], ids=["with-csp", "without-csp"])
def test_a_suite_on_hostile_inputs_shows_them_as_text(hostile_suite, csp):
    dom = check_page(hostile_suite / "index.html", f"layerscope run {OUT}", csp)
    shown = words(" ".join(dom.text))
    for payload in [*PAYLOADS, MODEL_B, LANG_LOW, DATASET, OUT]:  # each one shown, as the text it is
        assert words(payload) in shown, payload
    cells = {words(text) for text in dom.text}
    assert {words(p) for p in PAYLOADS} <= cells  # each category name a whole table cell (the influence table)


def test_no_report_of_the_suite_holds_raw_html(hostile_suite):
    reports = sorted(hostile_suite.glob("*/report.md"))
    assert len(reports) >= 5
    for report in reports:
        assert no_raw_html(report.read_text()), report


# --- a plugin study that returns payloads ---------------------------------------------------------------------

PLUGIN = '''
import json, sys
from pathlib import Path

from layerscope.study import Study, StudyConfig, StudyResult, register_study
from layerscope.run.pages import write_index
from layerscope.study.result import layer_row, make_table

P = json.loads(sys.argv[1])
TABLE = "| name | value |\\n| --- | --- |\\n" + "".join(f"| {p} | 1 |\\n" for p in P)


@register_study
class Hostile(Study):
    name = "hostile"
    title = "Hostile " + P[0]
    question = P[1]
    compat_notes = ((P[2], P[3]),)

    def run(self, config):
        manifest = {"models": [{"name": P[0], "weights_hash": P[1], "n_layers": P[2], "dtype": P[3], "device": P[6]}],
                    "dataset": {"source": P[4], "hash": P[5]}, "seed": P[2], "versions": {P[0]: P[6]},
                    "timings": {P[1]: 1.0}}
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest,
                           summary={"warnings": P}, table=make_table([layer_row(P[0], 0, 1, "x", 1.0)]))

    def figures(self, result):
        return {}

    def report(self, result):
        return "\\n\\n".join([f"# {P[0]}", *P, TABLE, "<div>", P[1], "</div>", "[y](vbscript:msgbox(1))",
                              "<javascript:document.title='X'>", "<!-- comment -->"])

    def headline(self, result):
        return P

    def numbers(self, result, model):
        return {}

    def finish(self, folder, result):
        (folder / sys.argv[3]).write_text("a,b\\n")


out = Hostile().run(StudyConfig("hostile")).write(Path(sys.argv[2]))
write_index(out)  # again, as `layerscope report` does: now the page links to the file finish() left
'''


@pytest.fixture(scope="module")
def hostile_plugin(tmp_path_factory):
    """A run folder written by a plugin study whose every string is a payload (in a subprocess, so the study is
    registered there and nowhere else)."""
    out = tmp_path_factory.mktemp("plugin") / OUT
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PLUGIN), json.dumps(PAYLOADS), str(out),
                           HOSTILE_FILE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.parametrize("csp", [True, False], ids=["with-csp", "without-csp"])
def test_a_plugin_study_s_strings_are_text(hostile_plugin, csp):
    dom = check_page(hostile_plugin / "index.html", f"layerscope run {OUT}", csp)
    shown = words(" ".join(dom.text))
    for payload in PAYLOADS:
        assert words(payload) in shown, payload
    assert shown.count(words(CLOSE)) >= 5  # warning, headline, report paragraph and table cell, manifest
    links = [attrs["href"] for tag, attrs in dom.elements if tag == "a" and "href" in attrs]
    assert HOSTILE_FILE in {unquote(link) for link in links if not urlsplit(link).scheme}  # relative, to the file
    assert not any("vbscript" in link for link in links)


def test_a_plugin_report_keeps_no_raw_html(hostile_plugin):
    report = (hostile_plugin / "report.md").read_text()
    assert no_raw_html(report)
    for payload in PAYLOADS:  # still there, to be read
        assert re.sub(r"\\(?=<)", "", report).count(payload.split("\n")[0]) >= 1


def test_the_check_catches_a_live_payload(tmp_path):
    """The harness itself: the same payloads as markup do run once the policy is out, and are flagged."""
    page = tmp_path / "index.html"
    page.write_text('<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src '
                    f"'none'\"><title>T</title></head><body><table><tr><th>a</th></tr>{IMG}{HOVER}</table></body>"
                    "</html>")
    assert Dom(dump(page, csp=True)).title == "T"
    assert Dom(dump(page, csp=False)).title == "X"
    with pytest.raises(AssertionError):
        check_page(page, "T", csp=True)  # the handler attribute is there, even where it cannot run
