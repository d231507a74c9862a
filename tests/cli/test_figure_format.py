"""``--figure-format`` (issue 29): `layerscope run` writes each figure in every asked format, from the command
line or a config file; `layerscope report DIR --figure-format svg` draws a finished run's figures again from its
saved files without the model; the page embeds the SVG when there is one; a bad format is one error line."""

import base64
import hashlib
import json
import re
import shutil
import xml.etree.ElementTree as ET

import pytest
import transformers
import yaml
from typer.testing import CliRunner

import tiny
from conftest import error_line
from layerscope.cli import app
from layerscope.run.config_file import load_config_file
from layerscope.study.config import ConfigError, StudyConfig

runner = CliRunner()
SVG = "{http://www.w3.org/2000/svg}"


def svg_texts(path) -> set[str]:
    """The text of every <text> element of an SVG file (it must parse as XML)."""
    return {"".join(t.itertext()).strip() for t in ET.parse(path).getroot().iter(f"{SVG}text")}


def embedded(page: str, kind: str) -> list[bytes]:
    """The bytes of every ``data:<kind>;base64,`` image of a page."""
    return [base64.b64decode(data) for data in re.findall(rf'src="data:{re.escape(kind)};base64,([^"]+)"', page)]


@pytest.fixture(scope="module")
def gone_model_run(tmp_path_factory):
    """A finished divergence run (default: png figures) whose model folder was deleted after the run."""
    root = tmp_path_factory.mktemp("gone")
    model = tiny.save(root / "tiny", "llama", adds_bos=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        result = runner.invoke(app, ["run", "divergence", "--model", str(model), "--n-permutations", "100",
                                     "--out", str(root / "run")])
    assert result.exit_code == 0, result.output
    shutil.rmtree(model)
    shutil.rmtree(root / "cache")  # no cached activations either
    return root / "run"


@pytest.fixture(scope="module")
def svg_pdf_run(tmp_path_factory, out_model):
    """A divergence run made from a config file that asks for ``figure_format: [svg, pdf]``."""
    root = tmp_path_factory.mktemp("svgpdf")
    config = root / "run.yaml"
    config.write_text(yaml.safe_dump({"study": "divergence", "models": [out_model], "n_permutations": 100,
                                      "figure_format": ["svg", "pdf"]}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        result = runner.invoke(app, ["run", "--config", str(config), "--out", str(root / "run")])
    assert result.exit_code == 0, result.output
    return root / "run"


def test_the_default_is_png_only_and_the_page_embeds_it(gone_model_run):
    names = {p.name for p in gone_model_run.iterdir()}
    assert "divergence.png" in names and not names & {"divergence.svg", "divergence.pdf"}
    page = (gone_model_run / "index.html").read_text()
    assert embedded(page, "image/png") == [(gone_model_run / "divergence.png").read_bytes()]
    assert "data:image/svg+xml" not in page
    assert json.loads((gone_model_run / "result.json").read_text())["config"]["figure_format"] == ["png"]


def test_a_config_file_asks_for_svg_and_pdf(svg_pdf_run):
    names = {p.name for p in svg_pdf_run.iterdir()}
    assert {"divergence.svg", "divergence.pdf"} <= names and "divergence.png" not in names
    texts = svg_texts(svg_pdf_run / "divergence.svg")  # parses as XML; the labels are <text>, not paths
    assert {"Layer", "r(UA, output preference)", "Pooling strategy"} <= texts
    assert (svg_pdf_run / "divergence.pdf").read_bytes().startswith(b"%PDF")
    page = (svg_pdf_run / "index.html").read_text()
    assert embedded(page, "image/svg+xml") == [(svg_pdf_run / "divergence.svg").read_bytes()]
    assert "data:image/png" not in page and "<svg" not in page  # an <img>, never the SVG markup
    assert yaml.safe_load((svg_pdf_run / "config.yaml").read_text())["figure_format"] == ["svg", "pdf"]


def test_report_draws_svg_again_without_the_model(tmp_path, gone_model_run, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("layerscope report loaded a model")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_model)
    folder = tmp_path / "run"
    shutil.copytree(gone_model_run, folder)
    png = hashlib.sha256((folder / "divergence.png").read_bytes()).hexdigest()
    (folder / "divergence.svg").write_text("stale")  # a figure file of the study's own name: replaced
    (folder / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["report", str(folder), "--figure-format", "svg,pdf"])
    assert result.exit_code == 0, result.output
    assert {"Layer", "r(UA, output preference)"} <= svg_texts(folder / "divergence.svg")
    assert (folder / "divergence.pdf").read_bytes().startswith(b"%PDF")
    assert hashlib.sha256((folder / "divergence.png").read_bytes()).hexdigest() == png  # beside, not instead
    assert (folder / "notes.txt").read_text() == "mine"
    assert not list(folder.glob(".*.tmp"))  # written atomically: no temp file left
    page = (folder / "index.html").read_text()
    assert embedded(page, "image/svg+xml") == [(folder / "divergence.svg").read_bytes()]
    assert "data:image/png" not in page


def test_report_without_the_option_writes_no_figure(tmp_path, gone_model_run):
    folder = tmp_path / "run"
    shutil.copytree(gone_model_run, folder)
    before = sorted(p.name for p in folder.iterdir())
    result = runner.invoke(app, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == before


@pytest.mark.parametrize("args", [["run", "divergence", "--model", "m", "--figure-format", "png,jpg"],
                                  ["run", "divergence", "--model", "m", "--figure-format", ","],
                                  ["report", "FOLDER", "--figure-format", "gif"]])
def test_an_unknown_format_is_one_error_line_naming_the_allowed_ones(tmp_path, gone_model_run, args):
    args = [str(gone_model_run) if a == "FOLDER" else a for a in args]
    line = error_line(runner.invoke(app, args))
    assert "figure format" in line and "png, svg or pdf" in line


def test_figure_format_values_are_split_checked_and_kept_in_order(tmp_path):
    assert StudyConfig("phases").figure_format == ("png",)
    assert StudyConfig("phases", figure_format=("svg,PDF", "svg")).figure_format == ("svg", "pdf")
    path = tmp_path / "c.yaml"
    path.write_text("study: phases\nfigure_format: pdf, png\n")  # a string in a file is split as on the CLI
    assert load_config_file(path)["phases"].figure_format == ("pdf", "png")
    path.write_text("study: phases\nfigure_format: [svg, tiff]\n")
    with pytest.raises(ConfigError, match="unknown figure format 'tiff'; use png, svg or pdf"):
        load_config_file(path)


def test_a_sweep_writes_its_tasks_and_gathered_figures_in_the_formats_and_a_rerun_swaps_them(tmp_path, out_model,
                                                                                             monkeypatch):
    from layerscope.io import read_marker
    from layerscope.sweep import SweepPlan, run_sweep

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "sweep"
    run_sweep(SweepPlan(StudyConfig(study="divergence", models=(out_model,), n_permutations=100,
                                    figure_format=("svg",))), out, echo=lambda line: None)
    (task,) = (out / "tasks").iterdir()
    assert (task / "divergence.svg").is_file() and not (task / "divergence.png").exists()
    svgs = sorted(p.name for p in out.glob("*.svg"))
    assert svgs and not list(out.glob("*.png")) and read_marker(out)["figures"] == svgs
    for name in svgs:
        svg_texts(out / name)  # each parses as XML
    assert len(embedded((out / "index.html").read_text(), "image/svg+xml")) == len(svgs)
    run_sweep(SweepPlan(StudyConfig(study="divergence", models=(out_model,), n_permutations=100)), out,
              echo=lambda line: None)  # another figure format is the same sweep: resumed, figures redrawn
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert [n.replace(".png", ".svg") for n in pngs] == svgs and not list(out.glob("*.svg"))
