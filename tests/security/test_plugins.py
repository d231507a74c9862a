"""Study plugins cannot take over a name: a built-in study always keeps its own, two plugins under one name
leave it unavailable until ``LAYERSCOPE_PLUGINS`` picks one, and every study's origin is recorded and listed.

Each plugin is a real module file plus a ``*.dist-info`` folder (METADATA, entry_points.txt) in a temporary
folder put on ``sys.path``, as ``pip install`` would leave it; ``reload_plugins()`` finds it through
``importlib.metadata`` as an installed package. The registry is reloaded without them after each test.

    .venv/bin/python -m pytest -q tests/security/test_plugins.py
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import layerscope.studies as studies_package
from layerscope.cli import app
from layerscope.run import registry, run_study
from layerscope.study import ConfigError, StudyConfig

STUDIES_DIR = Path(studies_package.__file__).parent
BUILT_INS = sorted(p.name for p in STUDIES_DIR.iterdir() if (p / "__init__.py").is_file() and p.name != "shared")
"""The built-in studies, read off the package folder: one sub-package each, named as the study (``shared`` holds
what several use and is no study)."""

NO_MODEL_STUDY = '''\
from dataclasses import dataclass

from layerscope.study import Settings, Study, StudyResult
from layerscope.study.result import make_table


@dataclass(frozen=True)
class NoSettings(Settings):
    pass


class {cls}(Study):
    name = {name!r}
    title = {title!r}
    question = "Which package ran?"
    Settings = NoSettings

    def run(self, config):
        return StudyResult(study=self.name, config=config.to_dict(), table=make_table([]),
                           manifest={{"study_origin": "built-in", "models": []}},  # a lie the registry overwrites
                           summary={{"models": {{}}, "warnings": [], "ran": {title!r}}})

    def figures(self, result):
        return {{}}

    def report(self, result):
        return ""

    def headline(self, result):
        return []

    def numbers(self, result, model):
        return {{}}
'''

DIVERGENCE_TWIN = '''\
from layerscope.studies.divergence import Divergence


class Twin(Divergence):
    title = "Divergence, but ours"         # name stays "divergence"
'''

SELF_REGISTERING_TWIN = '''\
from layerscope.study import register_study
from layerscope.studies.divergence import Divergence


@register_study                               # while being imported, and posing as the built-in's module
class Twin(Divergence):
    __module__ = "layerscope.studies.divergence"
    title = "Divergence, but ours"
'''


def install(root: Path, dist: str, version: str, module: str, source: str, entry: str) -> None:
    """Write what ``pip install`` leaves for the distribution ``dist``: ``module.py`` and its dist-info with one
    ``layerscope.studies`` entry point (``entry = "name = module:Class"``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[layerscope.studies]\n{entry}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on ``sys.path`` to install plugins into; afterwards the registry holds the real packages only."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv(registry.PICK_VARIABLE, raising=False)
    registry._warned.clear()
    yield root
    monkeypatch.undo()
    for name in [m for m in sys.modules if m.startswith("sec_plugin_")]:
        del sys.modules[name]
    registry._warned.clear()
    registry.reload_plugins()


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


@pytest.mark.parametrize("source", [DIVERGENCE_TWIN, SELF_REGISTERING_TWIN], ids=["entry point", "decorator"])
def test_a_plugin_named_like_a_built_in_is_refused_in_one_warning(site, capsys, source):
    from layerscope.studies.divergence import Divergence

    install(site, "div-twin", "0.3", "sec_plugin_twin", source, "divergence = sec_plugin_twin:Twin")
    registry.reload_plugins()
    lines = warnings(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert "div-twin 0.3" in lines[0] and "sec_plugin_twin:Twin" in lines[0]  # the intruding package
    assert "built-in study of layerscope" in lines[0] and "layerscope.studies.divergence" in lines[0]
    assert registry.study_class("divergence") is Divergence
    assert registry.get_study("divergence").title == "Divergence"
    assert registry.study_origin("divergence") == "built-in"
    assert sorted(registry.studies()) == BUILT_INS


def test_two_plugins_under_one_name_run_only_once_one_is_picked(site, capsys, monkeypatch):
    for dist, version, module, title in (("norms-a", "1.0", "sec_plugin_a", "Norms A"),
                                         ("norms-b", "2.0", "sec_plugin_b", "Norms B")):
        install(site / dist, dist, version, module, NO_MODEL_STUDY.format(cls="Norms", name="norms", title=title),
                f"norms = {module}:Norms")
        monkeypatch.syspath_prepend(str(site / dist))
    registry.reload_plugins()
    lines = warnings(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert "norms-a 1.0" in lines[0] and "norms-b 2.0" in lines[0] and "LAYERSCOPE_PLUGINS=norms=" in lines[0]
    assert "norms" not in registry.studies()
    with pytest.raises(ConfigError, match=r"norms-a 1\.0.*norms-b 2\.0.*LAYERSCOPE_PLUGINS"):
        registry.get_study("norms")
    with pytest.raises(ConfigError, match="offered by several plugins"):
        run_study(StudyConfig(study="norms", models=("unused",)))

    monkeypatch.setenv("LAYERSCOPE_PLUGINS", "norms=Norms_B")  # PyPI spelling: Norms_B is norms-b
    registry.reload_plugins()
    assert warnings(capsys.readouterr().err) == []
    assert registry.get_study("norms").title == "Norms B" and registry.study_origin("norms") == "norms-b 2.0"
    result = run_study(StudyConfig(study="norms", models=("unused",)))
    assert result.summary["ran"] == "Norms B" and result.manifest["study_origin"] == "norms-b 2.0"

    monkeypatch.setenv("LAYERSCOPE_PLUGINS", "norms=norms-c")  # installed by nobody: still neither runs
    registry.reload_plugins()
    (line,) = warnings(capsys.readouterr().err)
    assert "'norms-c'" in line and "is not one of them" in line and "norms" not in registry.studies()


def test_a_pick_cannot_replace_a_built_in_and_a_malformed_one_is_named(site, capsys, monkeypatch):
    install(site, "div-twin", "0.3", "sec_plugin_twin2", DIVERGENCE_TWIN, "divergence = sec_plugin_twin2:Twin")
    monkeypatch.setenv("LAYERSCOPE_PLUGINS", "divergence=div-twin,oops")
    registry.reload_plugins()
    lines = warnings(capsys.readouterr().err)
    assert len(lines) == 3, lines
    assert any("'oops'" in line and "name=distribution" in line for line in lines)
    assert any("'divergence'" in line and "built-in study, which always runs" in line for line in lines)
    assert registry.study_origin("divergence") == "built-in"


def test_the_manifest_records_the_origin_of_the_study_that_ran(site):
    install(site, "origin-probe", "4.2", "sec_plugin_probe", NO_MODEL_STUDY.format(cls="Origin", name="origin",
            title="Origin"), "origin = sec_plugin_probe:Origin")
    registry.reload_plugins()
    result = run_study(StudyConfig(study="origin", models=("unused",)))
    assert result.manifest["study_origin"] == "origin-probe 4.2"  # not the "built-in" the study wrote
    assert result.manifest["models"] == []
    assert result.to_json()["manifest"]["study_origin"] == "origin-probe 4.2"


def test_studies_command_lists_every_study_its_origin_and_title_as_plain_text(site):
    title = "Red \x1b[31malert\x1b[0m\x07 \u202eevil"  # colour codes, a bell, a right-to-left override
    install(site, "toy-x", "0.5", "sec_plugin_toyx", NO_MODEL_STUDY.format(cls="ToyX", name="toyx", title=title),
            "toyx = sec_plugin_toyx:ToyX")
    for dist in ("twice-a", "twice-b"):
        module = f"sec_plugin_{dist.replace('-', '_')}"
        install(site / dist, dist, "1.0", module, NO_MODEL_STUDY.format(cls="Twice", name="twice", title=dist),
                f"twice = {module}:Twice")
        sys.path.insert(0, str(site / dist))
    try:
        registry.reload_plugins()
        listed = CliRunner().invoke(app, ["studies"])
        also = CliRunner().invoke(app, ["run", "--list"])
    finally:
        for dist in ("twice-a", "twice-b"):
            sys.path.remove(str(site / dist))
    assert listed.exit_code == 0, listed.output
    assert also.exit_code == 0 and also.stdout == listed.stdout
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert sorted(rows) == sorted([*BUILT_INS, "toyx", "twice"])
    for name in BUILT_INS:
        assert re.fullmatch(rf"{name} +built-in +\S.*", rows[name])
    assert re.fullmatch(r"toyx +toy-x 0\.5 +Red \\x1b\[31malert\\x1b\[0m\\x07 \\u202eevil", rows["toyx"])
    assert re.fullmatch(r"twice +unavailable +.*LAYERSCOPE_PLUGINS=twice=DISTRIBUTION", rows["twice"])
    assert not any(ch in listed.stdout for ch in "\x1b\x07\u202e")


def test_layerscope_studies_in_a_fresh_process_names_both_packages(tmp_path):
    """The command as a user runs it: the plugins installed in another folder on PYTHONPATH."""
    install(tmp_path / "a", "twin-one", "1.1", "sec_plugin_one", DIVERGENCE_TWIN, "divergence = sec_plugin_one:Twin")
    install(tmp_path / "a", "probe-pkg", "0.2", "sec_plugin_p2",
            NO_MODEL_STUDY.format(cls="Pkg", name="pkg_study", title="Pkg study"), "pkg_study = sec_plugin_p2:Pkg")
    env = {k: v for k, v in os.environ.items() if k != "LAYERSCOPE_PLUGINS"}
    env.update(PYTHONPATH=str(tmp_path / "a"), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "layerscope.cli", "studies"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    (line,) = warnings(done.stderr)
    assert "twin-one 1.1" in line and "built-in study of layerscope" in line
    rows = {row.split()[0]: row for row in done.stdout.splitlines()[1:]}
    assert re.fullmatch(r"divergence +built-in +Divergence", rows["divergence"])
    assert re.fullmatch(r"pkg_study +probe-pkg 0\.2 +Pkg study", rows["pkg_study"])
