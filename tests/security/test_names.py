"""Names that become file or folder names (issue 26): a language code, a study name, a figure key a study
returns, a model name, a sweep task folder. One that could step out of its folder (``..``, ``/``, ``\\``), hide
(control characters, NUL), be nothing (empty) or break on Windows (CON, NUL.txt, Com1, ...) is refused with a
clear error, or, where layerscope derives it (a task folder from a model spec, a sweep figure from a metric),
made safe; nothing is written anywhere, inside or outside ``--out``."""

import hashlib
import json
import sys

import pandas as pd
import pytest
from matplotlib.figure import Figure
from typer.testing import CliRunner

from layerscope.cli import app
from layerscope.data.languages import load_languages
from layerscope.errors import DatasetError, LayerscopeError
from layerscope.paths import UnsafeNameError, name_problem, safe_name, safe_slug
from layerscope.run import output as output_module
from layerscope.study import Settings, StudyConfig, StudyResult, hooks
from layerscope.study.config import ConfigError
from layerscope.sweep import SweepPlan
from layerscope.sweep import run as sweep_run
from layerscope.sweep.plan import MAX_SLUG, task_slug

runner = CliRunner()

BAD = [  # (value, a part of the rule the error states)
    ("..", "'..'"),
    ("../evil", "path separator ('/')"),
    ("a/b", "path separator ('/')"),
    ("a\\b", "path separator ('\\\\')"),
    ("up..here", "'..'"),
    ("nul\x00byte", "control character '\\x00'"),
    ("bell\x07", "control character '\\x07'"),
    ("line\nbreak", "control character '\\n'"),
    ("esc\x1b[31m", "control character '\\x1b'"),
    ("del\x7f", "control character '\\x7f'"),
    ("", "empty"),
    ("   ", "empty"),
    (".", "names the folder itself"),
    ("CON", "device name Windows reserves"),
    ("con", "device name Windows reserves"),
    ("Aux", "device name Windows reserves"),
    ("prn.txt", "device name Windows reserves"),
    ("NUL.tar.gz", "device name Windows reserves"),
    ("com1", "device name Windows reserves"),
    ("COM9.png", "device name Windows reserves"),
    ("Lpt5", "device name Windows reserves"),
    ("lpt1 ", "device name Windows reserves"),
]
"""Every class of unsafe name, each spelled a few ways."""

GOOD = ["en", "pt-BR", "zh_Hant", "layer_profile", "ablation_notebook_scheme", "v1.0", "CONSOLE", "com10",
        "lpt", "auxiliary.png", "nul_ratio", "über", "a.b.c"]
"""Names that look close to a bad one but are fine everywhere."""


def snapshot(folder) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(autouse=True)
def no_model_loads(monkeypatch):
    """Every ``load_model`` a layerscope module holds raises: a refused name must stop the run before a model."""
    refuse_model_loads(monkeypatch)


def refuse_model_loads(monkeypatch) -> None:
    """Make ``load_model`` raise wherever layerscope holds it (modules imported later take the patched one)."""
    import layerscope.models.load  # noqa: F401 - where every other binding comes from

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    for name, module in list(sys.modules.items()):
        if name.startswith("layerscope") and callable(getattr(module, "load_model", None)):
            monkeypatch.setattr(module, "load_model", refuse)


# -- the helper itself --

@pytest.mark.parametrize("value, rule", BAD, ids=[repr(v) for v, _ in BAD])
def test_each_class_of_unsafe_name_is_refused_naming_the_value_and_the_rule(value, rule):
    with pytest.raises(UnsafeNameError) as err:
        safe_name(value, "figure name")
    message = str(err.value)
    assert message.startswith(f"figure name {value!r} cannot be used as a file name: it ")
    assert rule in message and "rename it" in message
    assert isinstance(err.value, LayerscopeError) and isinstance(err.value, ValueError)  # CLI: one line, exit 2


@pytest.mark.parametrize("value", GOOD)
def test_names_close_to_the_bad_ones_are_kept_as_they_are(value):
    assert safe_name(value, "name") == value and name_problem(value) is None


def test_a_name_that_is_not_a_string_is_refused():
    with pytest.raises(UnsafeNameError, match="is not a string but of type int"):
        safe_name(3, "figure name")


@pytest.mark.parametrize("value, slug", [
    ("org/My Model..v2", "org_My_Model.v2"),
    ("CON", "_CON"), ("nul.txt", "_nul.txt"), ("com1", "_com1"),
    ("..", "unnamed"), ("", "unnamed"), ("../../etc/passwd", "_._etc_passwd"),
    ("a\x00b\nc", "a_b_c"), ("a\\b", "a_b"), ("-.-x", "x"), ("plain-name_1.5", "plain-name_1.5"),
])
def test_a_derived_name_is_made_safe(value, slug):
    assert safe_slug(value) == slug and name_problem(slug) is None


# -- language codes (--texts) --

HIGH = {"resource": "high", "texts": ["The cat sat on the mat.", "Prices rose."]}
LOW = {"resource": "low", "texts": ["Ice floats on water.", "Bread dough rises."]}


@pytest.mark.parametrize("code, rule", [(v, r) for v, r in BAD if v.strip()], ids=[repr(v) for v, _ in BAD
                                                                                    if v.strip()])
def test_a_bad_language_code_is_one_error_exit_2_and_nothing_written(tmp_path, monkeypatch, code, rule):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text(json.dumps({"en": HIGH, code: LOW}))
    before = snapshot(tmp_path)
    result = runner.invoke(app, ["run", "ablation", "--model", "smollm2-135m", "--texts", "t.json", "--out", "out"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output
    assert f"t.json: the language code {code!r} cannot be used as a file name: it " in lines[0]
    assert rule in lines[0]
    assert snapshot(tmp_path) == before  # no out/, no partial folder, nothing beside it


def test_an_empty_language_code_is_refused(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps({"en": HIGH, "": LOW}))
    with pytest.raises(DatasetError, match="empty code"):
        load_languages(tmp_path / "t.json")


def test_the_bundled_language_codes_are_safe():
    assert all(name_problem(lang.code) is None for lang in load_languages().languages)


# -- study names (a plugin's) --

class FakeStudy:
    """Stands in for a registered plugin study whose name is unsafe (the registry may accept it)."""

    Settings = Settings


@pytest.mark.parametrize("name", ["con", "nul", "aux", "com1", "lpt9"])
def test_a_study_named_like_a_windows_device_is_refused_before_it_runs(monkeypatch, name):
    monkeypatch.setitem(hooks._jobs, "study_class", lambda study: FakeStudy)
    with pytest.raises(UnsafeNameError, match=f"study name '{name}' cannot be used as a file name: it is "
                                              f"'{name}', a device name Windows reserves"):
        StudyConfig(study=name)


# -- figure keys a study returns (out/<key>.png) --

class FigureStudy:
    def __init__(self, key):
        self.key = key

    def figures(self, result):
        return {"fine": Figure(), self.key: Figure()}

    def report(self, result):
        return "# never written\n"


@pytest.mark.parametrize("key, rule", BAD, ids=[repr(v) for v, _ in BAD])
def test_an_unsafe_figure_key_is_refused_and_nothing_is_written(tmp_path, monkeypatch, key, rule):
    monkeypatch.setattr(output_module, "get_study", lambda name: FigureStudy(key))
    result = StudyResult(study="plugin", config={}, manifest={}, summary={}, table=pd.DataFrame({"a": [1]}))
    (tmp_path / "work").mkdir()
    before = snapshot(tmp_path)
    with pytest.raises(UnsafeNameError) as err:
        result.write(tmp_path / "work" / "out")
    assert f"figure name of study plugin {key!r}" in str(err.value) and rule in str(err.value)
    assert snapshot(tmp_path) == before  # no out/, no evil.png above it, no partial folder


# -- model names --

@pytest.mark.parametrize("model", ["tiny\x1b[2J", "a\x00b", "line\nbreak"])
def test_a_model_name_with_a_control_character_is_refused(tmp_path, monkeypatch, model):
    with pytest.raises(ConfigError, match="holds the control character"):
        StudyConfig(study="divergence", models=(model,))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "divergence", "--model", model.replace("\x00", "\x01"), "--out", "out"])
    assert result.exit_code == 2 and "control character" in result.output, result.output
    assert list(tmp_path.iterdir()) == []


# -- sweep task folders (derived from model specs) and sweep figures (derived from metric names) --

EVIL_SPECS = ["CON", "nul.txt", "com1", "Com1@main", "org/../../x", "org/a..b", "\\\\server\\share", "-rf",
              ".hidden", "a/b/c@step1", "x" * 300]
"""Model specs that name no existing path (``..`` would: it is made absolute first, see test_task_slug_by_hand)."""


def spec_hash(spec: str) -> str:
    return hashlib.sha256(spec.encode()).hexdigest()[:8]


def test_task_folders_of_odd_specs_are_safe_names_inside_tasks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = SweepPlan(StudyConfig(study="scaling", models=tuple(EVIL_SPECS)))
    out = tmp_path / "sweep"
    for task in plan.tasks(out):
        assert task.folder.parent == out / "tasks", task
        assert name_problem(task.folder.name) is None, task.folder.name
        assert len(task.folder.name) <= MAX_SLUG
    assert len({t.folder.name.casefold() for t in plan.tasks(out)}) == len(EVIL_SPECS)


@pytest.mark.parametrize("spec, slug", [
    ("CON", "_CON"), ("nul.txt", "_nul.txt"), ("com1", "_com1"),
    ("Com1@main", "Com1@main"),  # Windows reserves COM1 and COM1.anything, not COM1@main
    ("org/a..b", "org--a.b"), ("org/../../x", "org--.--.--x"), ("\\\\server\\share", "__server_share"),
    ("..", f"model-{spec_hash('..')}"),  # nothing left once leading dots go: the hash of the spec
    ("../..", f"model-{spec_hash('../..')}"),  # "..--.." -> ".--." -> "": the hash
    ("EleutherAI/pythia-410m@step3000", "EleutherAI--pythia-410m@step3000"),
])
def test_task_slug_by_hand(spec, slug):
    assert task_slug(spec) == slug and name_problem(slug) is None


def test_sweep_figures_named_after_odd_metrics_stay_inside_the_folder(tmp_path, monkeypatch):
    plan = SweepPlan(StudyConfig(study="scaling", models=("org/a",)))
    out = tmp_path / "sweep"
    sweep_run.prepare_out(plan, out, force=False)
    odd = {"../../evil": Figure(), "CON": Figure(), "r_centroid": Figure()}
    monkeypatch.setattr(sweep_run, "metric_figures", lambda profiles: odd)
    monkeypatch.setattr(sweep_run, "profile_rows", lambda table, config: table)
    sweep_run.gather(plan, out, {}, 0.0)
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(["_CON.png", "_._evil.png", "r_centroid.png"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # nothing above the sweep folder
