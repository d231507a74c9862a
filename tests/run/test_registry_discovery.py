"""Discovery order (issue 36): the built-in studies are registered before any plugin is imported, so a plugin
module may build on one while it is imported, either by looking it up (``type(get_study("divergence"))``) or
by importing its class (``from layerscope.studies.divergence import Divergence``); and a plugin built that
way still cannot take a built-in's name (tests/security/test_plugins.py has the other name rules).

Each plugin is a real package (``lsplugin_lookup/__init__.py``) plus a ``*.dist-info`` folder (METADATA,
entry_points.txt) in ``tmp_path``, as ``pip install`` would leave it, found through ``importlib.metadata``.
Discovery runs in a fresh ``python`` with ``tmp_path`` on ``PYTHONPATH``: the regression is in the registry's
first load, which a reload in this process (its built-ins already placed) would not go through again.

    .venv/bin/python -m pytest -q tests/run/test_registry_discovery.py
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import layerscope.studies as studies_package
from layerscope.run.registry import ENTRY_POINT_GROUP

BUILT_INS = sorted(p.name for p in Path(studies_package.__file__).parent.iterdir()
                   if (p / "__init__.py").is_file() and p.name != "shared")
"""The built-in studies, read off the package folder: one sub-package each, named as the study (``shared`` holds
what several use and is no study)."""

LOOKUP_PLUGIN = '''\
from layerscope import get_study
from layerscope.run import studies

SEEN = sorted(studies())                  # what a plugin sees while discovery imports it
Base = type(get_study("divergence"))      # the built-in, by name


class LookupDivergence(Base):
    name = "lookup_div"
    title = "Divergence via a lookup"
'''

IMPORT_PLUGIN = '''\
from layerscope.run import studies
from layerscope.studies.divergence import Divergence

SEEN = sorted(studies())


class ImportDivergence(Divergence):
    name = "import_div"
    title = "Divergence via an import"
'''

TWIN_PLUGIN = '''\
from layerscope import get_study


class Twin(type(get_study("divergence"))):
    title = "Divergence, but ours"        # name stays "divergence"
'''

REPORT = '''\
import json, sys
from layerscope.run import get_study, registry, studies
from layerscope.studies.divergence import Divergence

names = [n for n in studies() if n not in {built_ins!r}]
print(json.dumps({{
    "studies": sorted(studies()),
    "plugins": {{n: {{"class": f"{{registry.study_class(n).__module__}}:{{registry.study_class(n).__qualname__}}",
                     "subclass": issubclass(registry.study_class(n), Divergence),
                     "title": get_study(n).title, "origin": registry.study_origin(n)}} for n in names}},
    "divergence": [registry.study_class("divergence") is Divergence, registry.study_origin("divergence"),
                   get_study("divergence").title],
    "seen": {{m: sys.modules[m].SEEN for m in ("lsplugin_lookup", "lsplugin_import") if m in sys.modules}},
}}))
'''


def install(root: Path, package: str, source: str, entry: str) -> None:
    """What ``pip install`` leaves for the distribution ``package`` 0.1: ``package/__init__.py`` and its
    dist-info with one entry point in the studies group (``entry = "name = package:Class"``)."""
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text(source)
    info = root / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry}\n")


def discover(root: Path) -> tuple[dict, list[str]]:
    """Discovery in a fresh process with ``root`` on its path: what the registry holds, and its warning lines."""
    env = {k: v for k, v in os.environ.items() if k != "LAYERSCOPE_PLUGINS"}
    env.update(PYTHONPATH=str(root), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", REPORT.format(built_ins=BUILT_INS)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), [line for line in done.stderr.splitlines() if line.startswith("warning:")]


def test_a_plugin_builds_on_a_built_in_it_looks_up_or_imports(tmp_path):
    assert "divergence" in BUILT_INS
    install(tmp_path, "lsplugin_lookup", LOOKUP_PLUGIN, "lookup_div = lsplugin_lookup:LookupDivergence")
    install(tmp_path, "lsplugin_import", IMPORT_PLUGIN, "import_div = lsplugin_import:ImportDivergence")
    found, warnings = discover(tmp_path)
    assert warnings == []
    assert found["studies"] == sorted([*BUILT_INS, "lookup_div", "import_div"])
    assert found["plugins"] == {
        "lookup_div": {"class": "lsplugin_lookup:LookupDivergence", "subclass": True,
                       "title": "Divergence via a lookup", "origin": "lsplugin-lookup 0.1"},
        "import_div": {"class": "lsplugin_import:ImportDivergence", "subclass": True,
                       "title": "Divergence via an import", "origin": "lsplugin-import 0.1"},
    }
    assert found["seen"] == {"lsplugin_lookup": BUILT_INS, "lsplugin_import": BUILT_INS}  # every built-in, no plugin
    assert found["divergence"] == [True, "built-in", "Divergence"]


def test_a_plugin_that_looks_up_a_built_in_still_cannot_take_its_name(tmp_path):
    install(tmp_path, "lsplugin_twin", TWIN_PLUGIN, "divergence = lsplugin_twin:Twin")
    install(tmp_path, "lsplugin_import", IMPORT_PLUGIN, "import_div = lsplugin_import:ImportDivergence")
    found, warnings = discover(tmp_path)
    assert len(warnings) == 1, warnings
    assert "'divergence'" in warnings[0] and "lsplugin-twin 0.1" in warnings[0] and "lsplugin_twin:Twin" in warnings[0]
    assert "built-in study of layerscope" in warnings[0]
    assert found["divergence"] == [True, "built-in", "Divergence"]
    assert found["studies"] == sorted([*BUILT_INS, "import_div"])
    assert list(found["plugins"]) == ["import_div"] and found["plugins"]["import_div"]["subclass"] is True
