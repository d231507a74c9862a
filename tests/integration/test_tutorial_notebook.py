"""The tutorial notebook (docs/tutorial.py, jupytext percent format) runs top to bottom on the real SmolLM2, in a
Jupyter kernel, as a newcomer runs it; its outputs show what the page promises: the verdict table and the
study's figure, the logit lens's grid, and the probe's figure.

Run it alone (integration tier; about a minute on a 2-core CPU):

    .venv/bin/python -m pytest -q tests/integration/test_tutorial_notebook.py

The notebook is read with jupytext and executed with nbclient in the virtualenv's own ``python3`` kernel
(ipykernel's), in a temporary working folder (its ``runs/tutorial`` lands there) with its own empty activation
cache (``$LAYERSCOPE_CACHE``; the converted zoo models are linked in from the real model cache, as
tests/conftest.py does, so nothing is converted or downloaded). A newcomer runs the same file with
``.venv/bin/jupytext --to ipynb --execute --run-path . docs/tutorial.py -o runs/tutorial.ipynb``.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from layerscope.paths import models_dir

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "tutorial.py"
USER_MODELS = models_dir()
"""The converted zoo models in the real cache, found before any test redirects $LAYERSCOPE_CACHE (as in
tests/conftest.py): linked into the notebook's own cache so no model is converted again."""
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CELL_TIMEOUT_S = 600
"""The most one cell may take (the study's cell is the longest: about 30 s on 2 cores)."""


def outputs(nb, output_type: str | None = None) -> list[dict]:
    """Every output of every code cell, in order (of one type when given)."""
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
            if output_type is None or o["output_type"] == output_type]


def html_outputs(nb) -> list[str]:
    return [o["data"]["text/html"] for o in outputs(nb) if "text/html" in o.get("data", {})]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """``(notebook, seconds)``: the tutorial after one run in a fresh kernel, and the run's wall time."""
    import jupytext
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] in ("python", "python3", sys.executable), (
        f"the python3 kernel runs {spec.argv[0]}, not this virtualenv's python ({sys.executable})")

    root = tmp_path_factory.mktemp("tutorial")
    work, cache = root / "work", root / "cache"
    work.mkdir()
    cache.mkdir()
    USER_MODELS.mkdir(parents=True, exist_ok=True)
    (cache / "models").symlink_to(USER_MODELS, target_is_directory=True)
    env = {key: value for key, value in os.environ.items() if key != "MPLBACKEND"}  # the kernel's inline figures
    env.update(LAYERSCOPE_CACHE=str(cache), HF_HUB_OFFLINE="1")

    nb = jupytext.read(NOTEBOOK)
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(work)}})
    start = time.perf_counter()
    try:
        client.execute(env=env)
        failure = None
    except CellExecutionError as exc:
        failure = ANSI.sub("", str(exc))  # the kernel's traceback, without its terminal colours
    if failure is not None:
        pytest.fail(f"a cell of {NOTEBOOK.relative_to(ROOT)} raised:\n{failure}", pytrace=False)
    seconds = time.perf_counter() - start
    print(f"\n{NOTEBOOK.relative_to(ROOT)} ran in {seconds:.1f} s")
    return nb, seconds, work


def test_every_cell_runs_without_error(executed):
    nb, _, work = executed
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code and all(cell.get("execution_count") for cell in code), "a code cell did not run"
    assert not outputs(nb, "error")
    assert (work / "runs" / "tutorial" / "divergence" / "index.html").is_file()


def test_the_verdict_table_and_the_study_figure_are_shown(executed):
    nb, _, _ = executed
    pages = [h for h in html_outputs(nb) if 'class="layerscope-output"' in h]
    assert len(pages) == 1, "the study result was not displayed as its report section"
    page = pages[0]
    table = re.search(r'<table class="summary-table">.*?</table>', page, re.S)
    assert table, "no verdict table in the study's output"
    assert "Divergence" in table.group(0) and "smollm2-135m" in table.group(0)
    assert re.search(r'<img alt="divergence[^"]*" src="data:image/png;base64,', page), "no study figure shown"


def test_the_logit_lens_grid_is_shown(executed):
    nb, _, _ = executed
    grids = [h for h in html_outputs(nb) if "<th>layer</th>" in h and "font-family: monospace" in h]
    assert len(grids) == 1, "the lens grid was not displayed"
    rows = re.findall(r"<tr><th>(\d+)</th>", grids[0])
    assert rows == [str(layer) for layer in range(31)]  # SmolLM2: the embeddings and 30 blocks
    last = re.search(r"<tr><th>30</th>(.*?)</tr>", grids[0], re.S).group(1)
    assert "·Paris" in last  # the model's own next token after "The capital of France is"


def test_the_probe_figure_is_shown(executed):
    nb, _, _ = executed
    images = [o for o in outputs(nb) if "image/png" in o.get("data", {})]
    assert len(images) == 1, "the probe's figure was not displayed inline"
    streams = "".join(o["text"] for o in outputs(nb, "stream") if o["name"] == "stdout")
    assert re.search(r"decodable from state: (\d+|None)", streams)


def test_it_stays_fast(executed):
    """CI runs it on every push: a bounded run, not the full studies (about a minute on 2 shared cores)."""
    _, seconds, _ = executed
    assert seconds < 300, f"the tutorial took {seconds:.0f} s; keep its runs bounded"
