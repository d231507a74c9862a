"""Open a page in headless Chromium and report what the browser made of it.

    check = render("runs/x/index.html")   # {"images": [True, ...], "sections": [...], "height": 9000}
"""

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CHECK = """<script>
window.addEventListener("load", () => {
  const images = [...document.images].map(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0);
  const sections = [...document.querySelectorAll("h2")].map(h => h.textContent);
  document.body.setAttribute("data-check", JSON.stringify({images, sections, height: document.body.scrollHeight}));
});
</script>"""


def render(page: Path) -> dict:
    """Load a copy of ``page`` with a probe script added; images: whether each one decoded."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "headless Chromium is missing: `make setup` installs Debian's chromium package"
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.html"
        probe.write_text(Path(page).read_text().replace("</body>", CHECK + "</body>"))
        done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                               f"--user-data-dir={tmp}/profile", "--dump-dom", probe.as_uri()],
                              capture_output=True, text=True, timeout=180)
    match = re.search(r'data-check="([^"]*)"', done.stdout)
    assert match, f"Chromium did not render the page: {done.stderr[-2000:]}"
    return json.loads(match.group(1).replace("&quot;", '"'))
