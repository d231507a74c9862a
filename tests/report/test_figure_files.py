"""A run folder is data from outside (issue 36): `layerscope report`, `load_run` in a notebook and a sweep's page
embed only the folder's own figure files that are what their names say. A link named like a figure (to a file
outside, standing in for ~/.ssh/id_rsa, or to a real figure inside: a link is never followed), a FIFO, a .png that
is no PNG, an SVG that holds a script or refers outside itself, and a file over the size bound are left out, and
one warning line names each of them with why; the study's own figures and valid planted ones are still shown."""

import base64
import logging
import os
import re
import shutil
import struct
import zlib

import pytest
from typer.testing import CliRunner

from layerscope import load_run
from layerscope.cli import app
from layerscope.report import figure_files as ff
from layerscope.report.figure_files import NotAFigure, check_svg, read_figure
from layerscope.report.plotting import figure, save_figure, styled
from layerscope.sweep.report import write_sweep_index

runner = CliRunner()

SECRET = b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAsecret-bytes-of-the-user\n"
FAKE_PNG = b"NOT-A-PNG: a text file of the sender's, named like a figure\n"
SCRIPT_MARK = "script-svg-marker-7f3a"
EXTERNAL_MARK = "external-svg-marker-91c2"
BIG_MARK = b"big-png-marker-55d0"


def png_bytes(width: int, height: int, value: int) -> bytes:
    """A real grey PNG, assembled here by hand (signature, IHDR, IDAT, IEND), independent of layerscope."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes([value]) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


VALID_PNG = png_bytes(3, 2, 200)
VALID_SVG = (b'<?xml version="1.0" encoding="utf-8" standalone="no"?>\n'
             b'<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
             b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="10" '
             b'height="10"><defs><clipPath id="c"><rect width="5" height="5"/></clipPath></defs>'
             b'<style type="text/css">*{stroke-linecap: butt}</style>'
             b'<g clip-path="url(#c)"><use xlink:href="#c"/><image href="data:image/png;base64,AAAA"/></g>'
             b'<text>valid-svg-marker-c0de</text></svg>\n')
SCRIPT_SVG = (f'<svg xmlns="http://www.w3.org/2000/svg"><text>{SCRIPT_MARK}</text>'
              '<script>document.title="X"</script></svg>').encode()
EXTERNAL_SVG = (f'<svg xmlns="http://www.w3.org/2000/svg"><text>{EXTERNAL_MARK}</text>'
                '<image href="http://evil.example/track.png"/></svg>').encode()

SKIPPED = {  # each planted file the page must leave out, and the reason the warning gives
    "stolen.png": "a symlink",
    "inner.png": "a symlink",
    "fake.png": "not a PNG",
    "script.svg": "holds a script",
    "external.svg": "refers outside itself",
    "queue.png": "not a regular file",
}


def plant(folder, tmp_path) -> dict[str, bytes]:
    """Plant the hostile files and two valid figures in the study folder ``folder``; the valid figures' bytes."""
    secret = tmp_path / "outside" / "id_rsa"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    own = sorted(folder.glob("*.png"))[0]  # a real figure of the run: linked to, it is still a link
    (folder / "stolen.png").symlink_to(secret)
    (folder / "inner.png").symlink_to(own.name)
    (folder / "fake.png").write_bytes(FAKE_PNG)
    (folder / "script.svg").write_bytes(SCRIPT_SVG)
    (folder / "external.svg").write_bytes(EXTERNAL_SVG)
    os.mkfifo(folder / "queue.png")  # reading it would block: it is never opened
    (folder / "extra.png").write_bytes(VALID_PNG)
    (folder / "extra_svg.svg").write_bytes(VALID_SVG)
    return {"extra.png": VALID_PNG, "extra_svg.svg": VALID_SVG}


def plant_big(folder, monkeypatch) -> None:
    """A valid PNG one byte over the bound, the bound lowered to just above the run's own figures."""
    bound = max(p.stat().st_size for p in folder.glob("*.png") if p.is_file() and not p.is_symlink()) + 16
    monkeypatch.setattr(ff, "MAX_FIGURE_BYTES", bound)
    big = b"\x89PNG\r\n\x1a\n" + BIG_MARK
    (folder / "big.png").write_bytes(big + b"\x00" * (bound + 1 - len(big)))


def embedded(page: str) -> list[bytes]:
    """The bytes of every data: image in ``page``."""
    return [base64.b64decode(data) for data in
            re.findall(r'src="data:image/(?:png|svg\+xml);base64,([A-Za-z0-9+/=]+)"', page)]


def assert_nothing_leaked(page: str, images: list[bytes]) -> None:
    for secret in (SECRET, FAKE_PNG, SCRIPT_MARK.encode(), EXTERNAL_MARK.encode(), BIG_MARK):
        assert all(secret not in image for image in images)
        assert secret.decode() not in page
        for shift in range(3):  # the secret's base64 at any alignment inside a larger data: URL
            assert base64.b64encode(b"x" * shift + secret).decode()[4 * ((shift + 2) // 3):-4] not in page


def warning_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "layerscope.report.figure_files" and r.levelno == logging.WARNING]


def assert_one_warning(caplog, where, skipped: dict[str, str]) -> None:
    lines = warning_lines(caplog)
    assert len(lines) == 1 and "\n" not in lines[0], lines
    line = lines[0]
    assert line.startswith(f"skipped {len(skipped)} files in {where}: ")
    named = line.split(": ", 1)[1].split(", ")
    assert sorted(named) == sorted(f"{name} ({why})" for name, why in skipped.items())


@pytest.fixture
def run(finished, tmp_path):
    """A private copy of conftest's divergence run folder (written by `layerscope run`)."""
    copy = tmp_path / "run"
    shutil.copytree(finished, copy, symlinks=True)
    return copy


def test_report_embeds_only_the_folders_own_valid_figures(run, tmp_path, monkeypatch, caplog):
    own = {p.name: p.read_bytes() for p in run.glob("*.png")}  # the study's figures, before anything is planted
    assert own and all(data.startswith(b"\x89PNG\r\n\x1a\n") for data in own.values())
    valid = plant(run, tmp_path)
    plant_big(run, monkeypatch)
    caplog.set_level(logging.WARNING)
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    page = (run / "index.html").read_text()
    images = embedded(page)
    assert sorted(images) == sorted([*own.values(), *valid.values()])  # every valid figure, each once
    assert_nothing_leaked(page, images)
    assert_one_warning(caplog, run, {**SKIPPED, "big.png": f"over {ff.MAX_FIGURE_BYTES} bytes"})


def test_load_run_in_a_notebook_shows_the_same_figures(run, tmp_path, monkeypatch, caplog):
    own = [p.read_bytes() for p in run.glob("*.png")]
    valid = plant(run, tmp_path)
    plant_big(run, monkeypatch)
    caplog.set_level(logging.WARNING)
    shown = load_run(run)._repr_html_()
    images = embedded(shown)
    assert sorted(images) == sorted([*own, *valid.values()])
    assert_nothing_leaked(shown, images)
    assert_one_warning(caplog, run, {**SKIPPED, "big.png": f"over {ff.MAX_FIGURE_BYTES} bytes"})


def test_a_suite_with_a_study_folder_linked_from_outside_shows_none_of_its_figures(run, tmp_path, caplog):
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.move(run, suite / "divergence")
    own = [p.read_bytes() for p in (suite / "divergence").glob("*.png")]
    elsewhere = tmp_path / "elsewhere"  # a folder of the user's, outside the run: a linked study folder points there
    shutil.copytree(suite / "divergence", elsewhere)
    (elsewhere / "private.png").write_bytes(png_bytes(2, 2, 17))
    (suite / "linked").symlink_to(elsewhere, target_is_directory=True)
    (suite / "divergence" / "fake.png").write_bytes(FAKE_PNG)
    caplog.set_level(logging.WARNING)
    for page in (load_run(suite)._repr_html_(), None):
        if page is None:
            result = runner.invoke(app, ["report", str(suite)])
            assert result.exit_code == 0, result.output
            page = (suite / "index.html").read_text()
        images = embedded(page)
        assert sorted(images) == sorted(own)  # the linked folder's figures (its private.png too) are not shown
        assert png_bytes(2, 2, 17) not in images and FAKE_PNG.decode() not in page
        outside = {f"linked/{p.name}": "outside the run folder" for p in [*elsewhere.glob("*.png"),
                                                                           *elsewhere.glob("report.md")]}
        assert_one_warning(caplog, suite, {"divergence/fake.png": "not a PNG", **outside})
        caplog.clear()


def test_a_sweep_page_embeds_only_valid_figures(tmp_path, caplog):
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "r_final.png").write_bytes(png_bytes(4, 4, 90))
    valid = plant(folder, tmp_path)
    caplog.set_level(logging.WARNING)
    write_sweep_index(folder, {"study": "divergence", "executor": "serial", "tasks": []})
    page = (folder / "index.html").read_text()
    images = embedded(page)
    assert sorted(images) == sorted([png_bytes(4, 4, 90), *valid.values()])
    assert_nothing_leaked(page, images)
    assert_one_warning(caplog, folder, SKIPPED)


def test_a_refused_svg_falls_back_to_the_figures_png(tmp_path, caplog):
    (tmp_path / "curve.svg").write_bytes(SCRIPT_SVG)
    (tmp_path / "curve.png").write_bytes(VALID_PNG)
    skipped = []
    figures = ff.figure_files(tmp_path, tmp_path, skipped)
    assert [(f.path.name, f.data) for f in figures] == [("curve.png", VALID_PNG)]
    assert skipped == ["curve.svg (holds a script)"]


def test_the_house_svg_and_pdf_pass(tmp_path):
    with styled():
        fig, axes = figure(1, 1, size=(3, 2))
        axes[0, 0].plot([0, 1, 2], [1, 0, 1], label="line")
        axes[0, 0].imshow([[0, 1], [1, 0]])  # an embedded raster: a data:image href
        axes[0, 0].legend()
    for fmt in ("svg", "pdf", "png"):
        data = save_figure(fig, fmt)
        (tmp_path / f"f.{fmt}").write_bytes(data)
        assert read_figure(tmp_path / f"f.{fmt}", tmp_path) == data


SVG = '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">{}</svg>'


@pytest.mark.parametrize(("body", "why"), [
    ("<script>alert(1)</script>", "holds a script"),
    ('<g><script xlink:href="x.js"/></g>', "holds a script"),
    ('<svg:script xmlns:svg="http://www.w3.org/2000/svg"/>', "holds a script"),
    ('<rect onload="alert(1)"/>', "holds an event handler (onload)"),
    ('<rect ONCLICK="alert(1)"/>', "holds an event handler (onclick)"),
    ("<foreignObject><p>x</p></foreignObject>", "holds a foreignObject"),
    ('<a href="https://evil.example/">x</a>', "refers outside itself"),
    ('<use xlink:href="file:///etc/hostname#x"/>', "refers outside itself"),
    ('<image xlink:href="/home/user/.ssh/id_rsa"/>', "refers outside itself"),
    ('<a href="javascript:alert(1)">x</a>', "refers outside itself"),
    ('<image src="http://evil.example/x.png"/>', "refers outside itself"),
    ('<image href="data:text/html,x"/>', "refers outside itself"),
    ('<rect fill="url(http://evil.example/p.svg#g)"/>', "refers outside itself"),
    ('<rect style="fill: url( \'https://evil.example/a\' )"/>', "refers outside itself"),
    ("<style>@import 'https://evil.example/a.css';</style>", "refers outside itself"),
    ("<style>rect { fill: url(http://evil.example/x) }</style>", "refers outside itself"),
    ('<set attributeName="href" to="javascript:alert(1)"/>', "animates a link"),
    ('<?xml-stylesheet href="http://evil.example/a.css"?>', "holds a processing instruction"),
    ("<rect>", "not well-formed XML"),
])
def test_an_svg_that_runs_or_fetches_anything_is_refused(tmp_path, body, why):
    path = tmp_path / "f.svg"
    path.write_text(SVG.format(body))
    with pytest.raises(NotAFigure, match=f"^{re.escape(why)}$"):
        read_figure(path, tmp_path)


@pytest.mark.parametrize(("text", "why"), [
    ('<html xmlns="http://www.w3.org/1999/xhtml"><script/></html>', "not an SVG"),
    ('<svg xmlns="urn:other"/>', "not an SVG"),
    ("", "not well-formed XML"),
    ('<!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><svg>&b;</svg>',
     "declares an entity"),
    ('<!DOCTYPE svg [<!ENTITY k SYSTEM "file:///etc/hostname">]><svg xmlns="http://www.w3.org/2000/svg">&k;</svg>',
     "declares an entity"),
])
def test_a_file_that_is_no_safe_svg_document_is_refused(text, why):
    with pytest.raises(NotAFigure, match=f"^{re.escape(why)}$"):
        check_svg(text.encode())


def test_links_folders_and_wrong_signatures_are_refused(tmp_path):
    outside = tmp_path / "outside.png"
    outside.write_bytes(VALID_PNG)
    run = tmp_path / "run"
    run.mkdir()
    (run / "a.png").symlink_to(outside)
    (run / "dir.png").mkdir()
    (run / "b.pdf").write_bytes(b"%!PS-Adobe-3.0")
    (run / "c.png").write_bytes(b"\x89PNG\r\n")  # a signature cut short
    (run / "dangling.svg").symlink_to(run / "missing.svg")
    for name, why in [("a.png", "a symlink"), ("dir.png", "not a regular file"), ("b.pdf", "not a PDF"),
                      ("c.png", "not a PNG"), ("dangling.svg", "a symlink"), ("gone.png", "unreadable")]:
        with pytest.raises(NotAFigure, match=f"^{re.escape(why)}$"):
            read_figure(run / name, run)


def test_a_report_md_linked_to_a_file_elsewhere_is_not_shown(run, tmp_path, caplog):
    """report.md is read like a figure: a link named report.md (to a key file outside the run) is left out and named
    in the warning line; the study's own report.md is shown."""
    own = (run / "report.md").read_text(encoding="utf-8")
    first_line = next(line for line in own.splitlines() if line.strip() and not line.startswith("#"))
    caplog.set_level(logging.WARNING)
    assert first_line.split()[0] in load_run(run)._repr_html_()
    secret = tmp_path / "id_rsa"
    secret.write_bytes(SECRET)
    (run / "report.md").unlink()
    (run / "report.md").symlink_to(secret)
    caplog.clear()
    for page in (load_run(run)._repr_html_(), None):
        if page is None:
            result = runner.invoke(app, ["report", str(run)])
            assert result.exit_code == 0, result.output
            page = (run / "index.html").read_text()
        assert SECRET.decode() not in page
    assert warning_lines(caplog) == [f"skipped 1 file in {run}: report.md (a symlink)"] * 2
