"""The import contracts in pyproject.toml (checked by ``lint-imports`` in ``make lint``) hold on the source tree,
and each one fails on a tree that breaks it: a study package importing the runner, a study importing another, a
module of the core importing upward (even inside a function), two modules of any package importing each other,
and an engine room importing one it may not.

    cli -> sweep -> run -> studies -> study -> (engine | quant | report) -> models
        -> (data | io | stats | measures) -> (paths | provenance | progress | lazy | modes) -> errors
    engine: (atlas | interventions) -> lenses -> forward -> cache; lenses and interventions independent

A last test finds import cycles in the whole source tree with a plain depth-first search over grimp's graph
(every import statement, function bodies included), independently of import-linter's contracts.

The broken trees are fixtures: empty packages named as layerscope's, one import added, and the contracts read
from the project's own pyproject.toml, so the test fails when a contract is dropped or loosened.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def named(start: str) -> str:
    """The full name of the one contract whose name starts with ``start``."""
    (name,) = [c["name"] for c in CONTRACTS["contracts"] if c["name"].startswith(start)]
    return name


LAYERS, FORBIDDEN, STUDIES = named("Packages import one way"), named("The plugin surface"), named("No study imports")
CIRCLES, ROOMS, ROOMS_APART = named("No circles"), named("The engine's rooms"), named("The lenses and the")
NAMES = {c["name"]: c["name"] for c in CONTRACTS["contracts"]}


def lint(root: Path, config: Path) -> tuple[int, set[str]]:
    """``lint-imports`` on the package under ``root`` with the contracts in ``config``: its exit code and the
    names of the contracts it reports broken."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([str(LINT), "--no-cache", "--no-logo", str(config)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    text = " ".join((done.stdout + done.stderr).split())  # contract names are wrapped over lines
    broken = {name for name in NAMES.values() if re.search(re.escape(" ".join(name.split())) + r" BROKEN", text)}
    return done.returncode, broken


def fixture_tree(tmp_path: Path, extra: dict[str, str]) -> Path:
    """A package ``layerscope`` with an empty module for every layer and study the contracts name, the contracts'
    config beside it, and ``extra`` ({relative path: source}) written on top."""
    root = tmp_path / "tree"
    files = {"layerscope/__init__.py": ""}
    for contract in CONTRACTS["contracts"]:
        layers = [name.strip() for line in contract.get("layers", []) for name in line.split("|")]
        containers = contract.get("containers", ["layerscope"])
        modules = [*(f"{c}.{name}" for c in containers for name in layers), *contract.get("modules", []),
                   *contract.get("source_modules", []), *contract.get("forbidden_modules", []),
                   *contract.get("ancestors", [])]
        for module in modules:
            files[module.replace(".", "/") + "/__init__.py"] = ""
    files.update(extra)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    return root


def test_the_source_tree_keeps_every_contract():
    code, broken = lint(ROOT / "src", ROOT / "pyproject.toml")
    assert (code, broken) == (0, set())


@pytest.mark.parametrize("extra, expected", [
    ({}, set()),  # the empty tree keeps them all: what follows fails for the import it adds
    ({"layerscope/studies/divergence/analysis.py": "from ...run import registry\n"},  # a study imports the runner
     {FORBIDDEN, LAYERS}),
    ({"layerscope/study/config.py": "def f():\n    from ..run import registry\n"},  # the API, inside a function
     {FORBIDDEN, LAYERS}),
    ({"layerscope/studies/scaling/analysis.py": "from ..divergence import analysis\n",
      "layerscope/studies/divergence/analysis.py": ""}, {STUDIES}),
    ({"layerscope/report/html.py": "def f():\n    from ..studies import divergence\n"}, {LAYERS}),
    ({"layerscope/study/result.py": "from . import output\n", "layerscope/study/output.py": "from . import result\n"},
     {CIRCLES}),
    ({"layerscope/run/pages.py": "from .registry import x\n",
      "layerscope/run/registry.py": "def f():\n    from .output import y\n",
      "layerscope/run/output.py": "from .pages import z\n"}, {CIRCLES}),  # through another
    ({"layerscope/models/checks.py": "def f():\n    from .info import x\n",  # a package no contract names
      "layerscope/models/info.py": "from .checks import y\n"}, {CIRCLES}),
    ({"layerscope/engine/cache/store.py": "from .views import x\n",  # two levels down
      "layerscope/engine/cache/views.py": "def f():\n    from .store import y\n"}, {CIRCLES}),
    ({"layerscope/studies/divergence/analysis.py": "from .checks import x\n",  # inside one study
      "layerscope/studies/divergence/checks.py": "from .analysis import y\n"}, {CIRCLES}),
    ({"layerscope/engine/forward/extract.py": "def f():\n    from ..lenses import logit\n"}, {ROOMS}),
    ({"layerscope/engine/cache/store.py": "from ..forward import batching\n"}, {ROOMS}),
    ({"layerscope/engine/atlas/stream.py": "from ..interventions import surgery\n"}, {ROOMS}),
    ({"layerscope/engine/interventions/steering.py": "from ..lenses import tuned\n"}, {ROOMS_APART}),
    ({"layerscope/engine/lenses/tuned.py": "from ..interventions import steering\n"}, {ROOMS, ROOMS_APART}),
], ids=["clean", "study-imports-runner", "api-imports-upward-in-function", "study-imports-study",
        "report-imports-studies", "core-circle", "core-circle-through-another", "models-circle", "cache-circle",
        "study-circle", "forward-imports-lenses", "cache-imports-forward", "atlas-imports-interventions",
        "interventions-import-lenses", "lenses-import-interventions"])
def test_each_contract_fails_on_a_tree_that_breaks_it(tmp_path, extra, expected):
    tree = fixture_tree(tmp_path, extra)
    code, broken = lint(tree, tree / "pyproject.toml")
    assert broken == expected
    assert (code != 0) == bool(expected)


def test_the_independence_contract_names_every_study_package_on_disk():
    """A study dropped from the contract's list could import another unchecked: the list is the study packages
    under src/layerscope/studies (every folder with an __init__.py but the shared one)."""
    (contract,) = [c for c in CONTRACTS["contracts"] if c["name"] == STUDIES]
    studies = ROOT / "src" / "layerscope" / "studies"
    on_disk = {f"layerscope.studies.{p.parent.name}" for p in studies.glob("*/__init__.py")
               if p.parent.name != "shared"}
    assert len(on_disk) >= 8 and set(contract["modules"]) == on_disk


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle of ``edges`` found by a depth-first search: one path per back edge."""
    found, state, path = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_the_cycle_search_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_module_of_layerscope_imports_itself_through_others():
    """Zero cycles among all of layerscope's modules (packages' ``__init__`` included, so a package and one of its
    own modules importing each other counts too), every import statement counted, function bodies included."""
    import grimp

    graph = grimp.build_graph("layerscope", include_external_packages=False)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert len(edges) > 150
    assert cycles(edges) == []


def drawn(block: str, layers: list[str]) -> bool:
    """Whether the text diagram ``block`` has one line per layer, in the contract's order, each starting with the
    layer's names as the contract writes them (``atlas | interventions``)."""
    lines = [" ".join(line.split()) for line in block.splitlines()]
    at = [next((i for i, line in enumerate(lines) if line == layer or line.startswith(layer + " ")), -1)
          for layer in layers]
    return -1 not in at and at == sorted(at)


def test_the_architecture_page_draws_the_layers_the_contracts_enforce():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```text\n(.*?)```", page, re.S)
    layered = [c for c in CONTRACTS["contracts"] if c["type"] == "layers"]
    assert len(layered) == 2
    for contract in layered:
        layers = [" ".join(line.split()) for line in contract["layers"]]
        assert any(drawn(block, layers) for block in blocks), contract["name"]
    assert not drawn("atlas | interventions  x\nforward  y\nlenses  z\ncache  w", ["atlas | interventions", "lenses",
                                                                                  "forward", "cache"])
