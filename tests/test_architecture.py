"""The import contracts in pyproject.toml (checked by ``lint-imports`` in ``make lint``) hold on the source tree,
and each one fails on a tree that breaks it: a study package importing the runner, a study importing another, a
module of the core importing upward (even inside a function), and two core modules importing each other.

    cli -> sweep -> run -> studies -> study -> (engine | quant | report) -> models
        -> (data | io | stats | measures) -> (paths | provenance | progress | lazy) -> errors

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
NAMES = {c["type"]: c["name"] for c in CONTRACTS["contracts"]}


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
        modules = [*(f"layerscope.{name}" for name in layers), *contract.get("modules", []),
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
     {NAMES["forbidden"], NAMES["layers"]}),
    ({"layerscope/study/config.py": "def f():\n    from ..run import registry\n"},  # the API, inside a function
     {NAMES["forbidden"], NAMES["layers"]}),
    ({"layerscope/studies/scaling/analysis.py": "from ..divergence import analysis\n",
      "layerscope/studies/divergence/analysis.py": ""}, {NAMES["independence"]}),
    ({"layerscope/report/html.py": "def f():\n    from ..studies import divergence\n"}, {NAMES["layers"]}),
    ({"layerscope/study/result.py": "from . import output\n", "layerscope/study/output.py": "from . import result\n"},
     {NAMES["acyclic_siblings"]}),
    ({"layerscope/run/pages.py": "from .registry import x\n",
      "layerscope/run/registry.py": "def f():\n    from .output import y\n",
      "layerscope/run/output.py": "from .pages import z\n"}, {NAMES["acyclic_siblings"]}),  # through another
], ids=["clean", "study-imports-runner", "api-imports-upward-in-function", "study-imports-study",
        "report-imports-studies", "core-circle", "core-circle-through-another"])
def test_each_contract_fails_on_a_tree_that_breaks_it(tmp_path, extra, expected):
    tree = fixture_tree(tmp_path, extra)
    code, broken = lint(tree, tree / "pyproject.toml")
    assert broken == expected
    assert (code != 0) == bool(expected)


def test_the_independence_contract_names_every_study_package_on_disk():
    """A study dropped from the contract's list could import another unchecked: the list is the study packages
    under src/layerscope/studies (every folder with an __init__.py but the shared one)."""
    (contract,) = [c for c in CONTRACTS["contracts"] if c["type"] == "independence"]
    studies = ROOT / "src" / "layerscope" / "studies"
    on_disk = {f"layerscope.studies.{p.parent.name}" for p in studies.glob("*/__init__.py")
               if p.parent.name != "shared"}
    assert len(on_disk) >= 8 and set(contract["modules"]) == on_disk
