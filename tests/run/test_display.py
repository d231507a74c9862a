"""Results in a notebook: ``_repr_html_`` of each study's result and of a suite shows the verdicts with their checks
and the figures, rendered by the functions that write index.html, every outside string escaped."""

import html
import re

import pytest

from layerscope import load_run
from layerscope.errors import OutputError
from layerscope.run import SuiteResult, get_study, studies
from layerscope.run.display import SCOPE, scoped_style
from layerscope.study import StudyResult

BUILT_IN = ["divergence", "scaling", "phases", "anisotropy", "ablation", "atlas", "surgery", "probe"]


def images(text: str) -> list[str]:
    return re.findall(r'<img alt="[^"]*" src="data:image/(?:png|svg\+xml);base64,[A-Za-z0-9+/=]+"', text)


@pytest.mark.parametrize("study", BUILT_IN)
def test_each_studys_result_shows_its_verdict_lines_checks_and_figures(tiny_suite, study):
    folder, _ = tiny_suite
    result = StudyResult.load(folder / study)
    shown = result._repr_html_()
    lines = get_study(study).headline(result)
    assert lines and all(html.escape(line) in shown for line in lines)  # the sentences, with their checks
    figures = sorted(p.stem for p in (folder / study).glob("*.png"))
    assert figures and len(images(shown)) == len(figures)  # every figure the folder has, embedded
    assert "<table" in shown and 'class="summary-table"' in shown  # the summary table opens it
    for verdict in get_study(study).verdicts(result):
        assert html.escape(verdict.claim) in shown and html.escape(verdict.status) in shown
    assert shown.startswith(f'<div class="{SCOPE}">') and "<script" not in shown


def test_the_suite_shows_one_table_of_every_verdict_then_each_section(tiny_suite):
    folder, _ = tiny_suite
    suite = load_run(folder)
    assert isinstance(suite, SuiteResult) and sorted(suite) == sorted(BUILT_IN)
    shown = suite._repr_html_()
    table = shown[: shown.index("</table>")]
    for study in BUILT_IN:
        for verdict in get_study(study).verdicts(suite[study]):
            assert html.escape(verdict.claim) in table  # every study's claims in the one table at the top
        assert f'<h2 id="{study}">' in shown  # then each study's section, in suite order
    positions = [shown.index(f'<h2 id="{study}">') for study in BUILT_IN]
    assert positions == sorted(positions)
    n_figures = sum(len(list((folder / s).glob("*.png"))) for s in BUILT_IN)
    assert len(images(shown)) == n_figures


def test_a_result_in_memory_looks_like_its_folder(tiny_suite):
    folder, _ = tiny_suite
    loaded = StudyResult.load(folder / "phases")
    from_folder = loaded._repr_html_()
    loaded.folder = None  # as run_study returns it: nothing on disk yet
    in_memory = loaded._repr_html_()
    assert loaded.folder is None  # the temporary folder it was drawn in is gone, and not remembered
    for line in get_study("phases").headline(loaded):
        assert html.escape(line) in in_memory
    assert len(images(in_memory)) == len(images(from_folder)) > 0
    strip = re.compile(r'<a href="[^"]*">')  # file links are relative to where each was drawn
    assert strip.sub("", in_memory).count("<h") == strip.sub("", from_folder).count("<h")


def test_outside_text_is_text(tiny_suite, tmp_path):
    folder, _ = tiny_suite
    result = StudyResult.load(folder / "divergence")
    result.summary.setdefault("warnings", []).append('<script>alert("x")</script><img src=x onerror=alert(1)>')
    result.folder = None
    shown = result._repr_html_()
    assert "<script>" not in shown and "onerror=alert(1)>" not in shown
    assert html.escape('<script>alert("x")</script>') in shown


def test_the_style_reaches_only_the_output():
    css = scoped_style("body { color: red; }\nh2, th { margin: 0; }")
    assert css.startswith(f".{SCOPE} {{") and f".{SCOPE} h2, .{SCOPE} th {{" in css
    assert all(rule.strip().startswith(f".{SCOPE}") for rule in re.findall(r"([^{}]+)\{", css))


def test_load_run_tells_a_study_folder_from_a_suite_and_refuses_others(tiny_suite, tmp_path):
    folder, _ = tiny_suite
    assert isinstance(load_run(folder / "atlas"), StudyResult)
    with pytest.raises(OutputError, match="not a suite folder"):
        load_run(tmp_path)
    with pytest.raises(OutputError, match="not a folder"):
        load_run(tmp_path / "missing")
    assert set(BUILT_IN) <= set(studies())
