"""Open a page in headless Chromium and report what the browser made of it.

    check = render("runs/x/index.html")   # {"images": [True, ...], "sections": [...], "height": 9000}
    dom = dump("runs/x/index.html")       # the page's DOM after loading, as Chromium serialises it
    dom = dump("runs/x/index.html", csp=False)   # the same with the page's Content-Security-Policy taken out
    page = Dom(dom)                       # page.title, page.elements [(tag, attrs)], page.text, page.tables

:func:`render` adds a probe script, so it takes the page's Content-Security-Policy (which runs no script) out of
its copy; :func:`dump` adds nothing and keeps that policy unless told otherwise.
"""

import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

CHECK = """<script>
window.addEventListener("load", () => {
  const images = [...document.images].map(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0);
  const sections = [...document.querySelectorAll("h2")].map(h => h.textContent);
  document.body.setAttribute("data-check", JSON.stringify({images, sections, height: document.body.scrollHeight}));
});
</script>"""
CSP_META = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>', re.IGNORECASE)
"""The policy layerscope writes in every page's head."""


def without_csp(text: str) -> str:
    """``without_csp(page_text)``: the page with its Content-Security-Policy meta tag taken out."""
    return CSP_META.sub("", text)


def render(page: Path) -> dict:
    """Load a copy of ``page`` with a probe script added (and its script-blocking policy taken out); images:
    whether each one decoded."""
    stdout, stderr = _chromium(without_csp(Path(page).read_text()).replace("</body>", CHECK + "</body>"))
    match = re.search(r'data-check="([^"]*)"', stdout)
    assert match, f"Chromium did not render the page: {stderr[-2000:]}"
    return json.loads(match.group(1).replace("&quot;", '"'))


def dump(page: Path, csp: bool = True) -> str:
    """The DOM of a copy of ``page`` after Chromium loaded it (and ran whatever scripts it allows), serialised;
    with ``csp=False`` its Content-Security-Policy is taken out first, so nothing but escaping keeps a script from
    running."""
    text = Path(page).read_text()
    stdout, stderr = _chromium(text if csp else without_csp(text))
    assert "</html>" in stdout, f"Chromium did not render the page: {stderr[-2000:]}"
    return stdout


def _chromium(text: str) -> tuple[str, str]:
    """Chromium's --dump-dom output (and its error output) for the page ``text``."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "headless Chromium is missing: `make test` installs Debian's chromium package"
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.html"
        probe.write_text(text)
        done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                               f"--user-data-dir={tmp}/profile", "--dump-dom", probe.as_uri()],
                              capture_output=True, text=True, timeout=180)
    return done.stdout, done.stderr


def words(text: str) -> str:
    """``text`` with each run of whitespace made one space: how a page shows a line break."""
    return " ".join(text.split())


class Dom(HTMLParser):
    """``dom = Dom(html)``: what a page holds, read back from its markup: the title, every element with its
    attributes, the text, and for each table the number of cells of each row."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.tables: list[list[int]] = []
        self.title, self.text = "", []
        self._open: list[list[int]] = []
        self._in_title = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        self._in_title = tag == "title"
        if tag == "table":
            self._open.append([])
        elif tag == "tr" and self._open:
            self._open[-1].append(0)
        elif tag in ("td", "th") and self._open and self._open[-1]:
            self._open[-1][-1] += 1

    def handle_endtag(self, tag):
        self._in_title = False
        if tag == "table" and self._open:
            self.tables.append(self._open.pop())

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        self.text.append(data)
