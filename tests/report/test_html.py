"""The run folder's index.html: self-contained, complete, rebuilt by `layerscope report`, and
rendered by a real browser (headless Chromium) with every figure loaded."""

import base64
import html
import re
import shutil

import pytest
from typer.testing import CliRunner

from browser import render
from layerscope.cli import app
from layerscope.run import get_study
from layerscope.run.config_file import SUITE
from layerscope.study import StudyResult
from layerscope.study.verdicts import STATUSES

runner = CliRunner()


def test_index_embeds_every_figure_and_shows_every_verdict_and_hash(tiny_suite):
    folder, _ = tiny_suite
    page = (folder / "index.html").read_text()
    pngs = sorted(folder.glob("*/*.png"))
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(embedded) == len(pngs) >= len(SUITE)
    assert sorted(base64.b64decode(e) for e in embedded) == sorted(p.read_bytes() for p in pngs)
    assert not re.search(r'(src|href)="https?:', page)  # nothing to fetch
    assert page.index("Summary of verdicts") < page.index('id="divergence"')
    top = page[page.index('id="summary"'):page.index('id="divergence"')]
    assert top.count('<table class="summary-table">') == 1 and "<li>" not in top
    for name in SUITE:
        result = StudyResult.load(folder / name)
        section = page[page.index(f'<h2 id="{name}">'):]
        section = section[:section.index("<h2", 4)]
        for line in get_study(name).headline(result):  # the sentences: in the study's own section
            assert html.escape(line)[:60] in section
        verdicts = get_study(name).verdicts(result)
        assert {v.model for v in verdicts} == {m["name"] for m in result.manifest["models"]} | (
            {", ".join(m["name"] for m in result.manifest["models"])} if name == "scaling" else set())
        for v in verdicts:  # the summary table: one row per verdict, its study linked to its section
            assert v.status in STATUSES
            assert (f'<tr><td><a href="#{name}">{html.escape(get_study(name).title)}</a></td><td>'
                    f'{html.escape(v.model)}</td><td>{html.escape(v.claim)}</td>') in top
        for model in result.manifest["models"]:
            assert model["weights_hash"][:16] in page
        assert result.manifest["dataset"]["hash"] in page
    assert "Method notes" in page and "leave-one-out" in page


def test_report_command_rebuilds_the_page_without_the_model(tiny_suite, tmp_path):
    folder, _ = tiny_suite
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "index.html").unlink()
    result = runner.invoke(app, ["report", str(copy)])
    assert result.exit_code == 0, result.output
    strip = lambda text: re.sub(r"Rendered [^<]* by layerscope", "", text).replace("copy", "run")  # noqa: E731
    assert strip((copy / "index.html").read_text()) == strip((folder / "index.html").read_text())


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_report_on_a_folder_without_results_is_a_clear_error(tmp_path, make):
    target = tmp_path / "x"
    if make == "empty":
        target.mkdir()
    result = runner.invoke(app, ["report", str(target)])
    assert result.exit_code == 2 and result.output.startswith("error: ")
    assert not (target / "index.html").exists()


def test_chromium_renders_the_page_and_loads_every_figure(tiny_suite):
    folder, _ = tiny_suite
    check = render(folder / "index.html")
    assert len(check["images"]) == len(list(folder.glob("*/*.png"))) and all(check["images"])
    assert check["sections"] == ["Summary of verdicts", *[get_study(n).title for n in SUITE], "Manifest"]
    assert check["height"] > 2000
