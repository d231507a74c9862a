"""The package layers import one way: every import (module top, function body or TYPE_CHECKING block) goes
to a lower layer, so no two packages import each other in a cycle, and no study package imports another.

    cli -> sweep -> studies -> (engine, quant, report) -> models
        -> (data, io, stats, measures)
        -> (paths, provenance, progress) -> errors
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "layerscope"
LAYERS = [
    ("errors",),
    ("paths", "provenance", "progress", "lazy"),
    ("data", "io", "stats", "measures"),
    ("models",),
    ("engine", "quant", "report"),
    ("studies",),
    ("sweep",),
    ("cli",),
    ("",),  # the package itself (layerscope/__init__.py): the Python API's front door, imported by nothing inside
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> tuple[str, bool]:
    """``("layerscope.studies.phases.analysis", False)``; ``True`` for a package's ``__init__``."""
    parts = ("layerscope", *path.relative_to(SRC).with_suffix("").parts)
    return (".".join(parts[:-1]), True) if parts[-1] == "__init__" else (".".join(parts), False)


def imports(path: Path) -> list[tuple[str, int]]:
    """Every layerscope module ``path`` imports, with its line: absolute and relative, anywhere in the file."""
    module, is_package = module_name(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # `from . import x` may name a sub-module x: count it as importing that sub-module
            names = [f"{target}.{alias.name}" for alias in node.names] if not node.module else [target]
            found += [(name, node.lineno) for name in names]
    return [(name, line) for name, line in found if name == "layerscope" or name.startswith("layerscope.")]


def layer_of(module: str) -> str:
    """``"studies"`` for ``layerscope.studies.config``; ``""`` for the package itself (or a name in it)."""
    parts = module.split(".")
    if len(parts) < 2 or not ((SRC / parts[1]).is_dir() or (SRC / f"{parts[1]}.py").is_file()):
        return ""
    return parts[1]


def study_package(module: str) -> str | None:
    """``"phases"`` for ``layerscope.studies.phases.analysis``: the study package a module belongs to, if any."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "studies" and (SRC / "studies" / parts[2]).is_dir():
        return parts[2]
    return None


def violations() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        module, _ = module_name(path)
        here = layer_of(module)
        if here not in RANK:
            found.append(f"{path.relative_to(SRC)}: package {here!r} has no place in the layer order; add it to LAYERS")
            continue
        for target, line in imports(path):
            there = layer_of(target)
            if there == here:
                mine, theirs = study_package(module), study_package(target)
                if mine and theirs and mine != theirs:
                    found.append(f"{path.relative_to(SRC)}:{line}: study {mine} imports study {theirs} ({target}); "
                                 "move what they share into a shared studies module")
                continue
            if there not in RANK:
                found.append(f"{path.relative_to(SRC)}:{line}: imports {target}, whose package has no layer")
            elif RANK[there] >= RANK[here]:
                found.append(f"{path.relative_to(SRC)}:{line}: {here or 'layerscope'} imports {there or 'layerscope'}"
                             f" ({target}), which is not below it")
    return found


def test_every_import_goes_down_the_layer_order():
    assert violations() == []


def test_the_checker_finds_an_upward_import_a_cycle_and_a_sibling_study(tmp_path, monkeypatch):
    fake = tmp_path / "layerscope"
    for rel, text in {
        "__init__.py": "",
        "report/__init__.py": "",
        "report/html.py": "def f():\n    from ..studies import get_study\n",  # upward, hidden in a function
        "studies/__init__.py": "from ..report import html\n",  # with the line above: a cycle
        "studies/a/__init__.py": "",
        "studies/b/__init__.py": "from ..a import x\n",  # a sibling study
        "models/load.py": "import layerscope.data.files\n",  # downward: fine
        "data/files.py": "",
    }.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "SRC", fake)
    found = violations()
    assert len(found) == 2
    assert found[0].startswith("report/html.py:2: report imports studies")
    assert found[1].startswith("studies/b/__init__.py:1: study b imports study a")


@pytest.mark.parametrize("module, expected", [("layerscope.studies.phases.analysis", "phases"),
                                              ("layerscope.studies.config", None)])
def test_study_package_names_the_study(module, expected):
    assert study_package(module) == expected
