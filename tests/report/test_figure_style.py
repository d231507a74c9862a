"""The house figure style and formats (issue 29): Okabe-Ito colours, font sizes from one base, SVG text kept as
<text>, PDFs that are PDFs, and a run page that embeds one file per figure (the SVG first) as a data: image."""

import base64
import xml.etree.ElementTree as ET

import pytest
from matplotlib.font_manager import font_scalings

from layerscope.report.figure_files import figure_files
from layerscope.report.html import embed_figure
from layerscope.report.plotting import COLORS, POOLING_COLORS, STYLE, figure, save_figure, styled

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
SVG = "{http://www.w3.org/2000/svg}"


def drawn():
    """A small figure drawn in the style: two lines, labelled axes, a legend."""
    with styled():
        fig, axes = figure(1, 1, size=(4, 3))
        ax = axes[0, 0]
        ax.plot([0, 1, 2], [1, 0, 1], label="first line")
        ax.plot([0, 1, 2], [0, 1, 0], label="second line")
        ax.set_xlabel("layer")
        ax.set_ylabel("delta NLL (nats)")
        ax.legend()
    return fig, ax


def test_the_palette_is_okabe_ito_everywhere():
    assert [c.upper() for c in COLORS] == OKABE_ITO
    assert set(POOLING_COLORS.values()) <= set(OKABE_ITO)
    assert STYLE["axes.prop_cycle"].by_key()["color"] == OKABE_ITO
    _, ax = drawn()
    assert [line.get_color() for line in ax.get_lines()] == OKABE_ITO[:2]  # the cycle, in order


def test_font_sizes_follow_the_base_size_inside_the_style_only():
    base = STYLE["font.size"]
    _, ax = drawn()
    assert ax.xaxis.label.get_fontsize() == pytest.approx(base * font_scalings["large"])
    assert ax.get_xticklabels()[0].get_fontsize() == pytest.approx(base * font_scalings["medium"])
    plain, plain_axes = figure(1, 1)
    plain_axes[0, 0].set_xlabel("x")  # outside styled(): matplotlib's own default (10 pt, "medium")
    assert plain_axes[0, 0].xaxis.label.get_fontsize() == pytest.approx(10.0)


def test_svg_keeps_text_as_text_and_pdf_is_a_pdf():
    fig, _ = drawn()
    root = ET.fromstring(save_figure(fig, "svg"))
    texts = {"".join(t.itertext()).strip() for t in root.iter(f"{SVG}text")}
    assert {"layer", "delta NLL (nats)", "first line", "second line"} <= texts
    pdf = save_figure(fig, "pdf")
    assert pdf.startswith(b"%PDF")
    assert b"/CIDFontType2" in pdf and b"/Type3" not in pdf  # pdf.fonttype 42: TrueType fonts, not Type 3 glyphs
    assert save_figure(fig, "png").startswith(b"\x89PNG\r\n\x1a\n")


def test_the_same_figure_gives_the_same_svg_and_pdf_bytes():  # no date, no random ids
    for fmt in ("svg", "pdf"):
        assert save_figure(drawn()[0], fmt) == save_figure(drawn()[0], fmt)


PNG_BYTES = b"\x89PNG\r\n\x1a\n fake"  # the signature is all the checks read
SVG_BYTES = b'<svg xmlns="http://www.w3.org/2000/svg"><text>a &lt;b&gt;</text></svg>'
FILE_BYTES = {".png": PNG_BYTES, ".svg": SVG_BYTES, ".pdf": b"%PDF-1.4 fake", ".md": b"x", ".csv": b"x"}


def test_figure_files_take_one_file_per_figure_svg_first(tmp_path):
    for name in ("b.png", "b.svg", "b.pdf", "a.png", "a.pdf", "c.pdf", "notes.md", "table.csv"):
        (tmp_path / name).write_bytes(FILE_BYTES[name[name.index("."):]])
    assert [f.path.name for f in figure_files(tmp_path)] == ["a.png", "b.svg", "c.pdf"]


def test_embed_figure_puts_svg_and_png_in_as_base64_img_never_as_markup(tmp_path):
    svg = tmp_path / "a<b.svg"
    svg.write_bytes(SVG_BYTES)
    png = tmp_path / "plot.png"
    png.write_bytes(PNG_BYTES)
    figures = {f.path.name: f for f in figure_files(tmp_path)}
    html_svg, html_png = embed_figure(figures["a<b.svg"]), embed_figure(figures["plot.png"])
    assert f'src="data:image/svg+xml;base64,{base64.b64encode(svg.read_bytes()).decode()}"' in html_svg
    assert "<svg" not in html_svg and "<text" not in html_svg
    assert "<figcaption" in html_svg and "a&lt;b</figcaption>" in html_svg and "a<b" not in html_svg
    assert f'src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}"' in html_png
    assert "plot</figcaption>" in html_png


def test_a_pdf_only_figure_is_named_and_linked_not_embedded(tmp_path):
    pdf = tmp_path / "curve.pdf"
    pdf.write_bytes(b"%PDF-1.4 fake")
    [figure] = figure_files(tmp_path)
    plain = embed_figure(figure)
    assert "<img" not in plain and "data:" not in plain and "<code>curve.pdf</code>" in plain
    linked = embed_figure(figure, href='phases/curve "1".pdf')
    assert '<a href="phases/curve%20%221%22.pdf">curve.pdf</a>' in linked
