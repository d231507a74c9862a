from pathlib import Path

import pandas as pd
import pytest

from layerscope.errors import OutputError
from layerscope.study import StudyConfig
from layerscope.study.config import ConfigError
from layerscope.sweep import SweepPlan, dump_plan, load_sweep_file, split_revision, training_step
from layerscope.sweep.gather import profile_rows
from layerscope.sweep.plan import task_slug
from layerscope.sweep.run import prepare_out


def test_revisions_and_training_steps_by_hand(tmp_path):
    assert split_revision("EleutherAI/pythia-410m@step3000") == ("EleutherAI/pythia-410m", "step3000")
    assert split_revision("smollm2-135m") == ("smollm2-135m", None)
    odd = tmp_path / "model@v2"
    odd.mkdir()
    assert split_revision(str(odd)) == (str(odd), None)  # an existing folder is a path, not NAME@REVISION
    assert training_step("step3000") == 3000
    assert training_step("stage1-step140000-tokens587B") == 140000
    assert training_step("step_512") == 512 and training_step("1000") == 1000
    assert training_step("main") is None and training_step("v1.0") is None and training_step(None) is None
    assert training_step("laststep") is None  # 'step' inside a word names no step
    assert task_slug("EleutherAI/pythia-410m@step3000") == "EleutherAI--pythia-410m@step3000"
    assert task_slug("/tmp/x/m 1") == "tmp--x--m_1"


def config(**kwargs):
    return StudyConfig(study="scaling", **{"models": ("org/a", "org/b"), **kwargs})


def test_plan_expands_revisions_per_model_in_order():
    plan = SweepPlan(config(), revisions=("step1", "step2"))
    assert plan.specs == ("org/a@step1", "org/a@step2", "org/b@step1", "org/b@step2")
    tasks = plan.tasks(Path("/out"))
    assert [(t.name, t.revision, t.step) for t in tasks[:2]] == [("org/a", "step1", 1), ("org/a", "step2", 2)]
    assert tasks[3].folder == Path("/out/tasks/org--b@step2")
    assert plan.task_config(tasks[1]).models == ("org/a@step2",) and plan.task_config(tasks[1]).study == "scaling"


@pytest.mark.parametrize("kwargs, message", [
    ({"executor": "dask"}, "unknown executor 'dask'"),
    ({"ray_address": "auto"}, "need --executor ray"),
    ({"executor": "ray", "workers": 0}, "at least 1"),
    ({"executor": "ray", "workers": 2, "ray_address": "auto"}, "leave it out with --ray-address"),
    ({"config": config(models=())}, "a sweep needs models"),
    ({"config": config(models=("org/a@step1",)), "revisions": ("step2",)}, "not both"),
    # specs that share a slug get their own folders (test_sweep_failures.py); only a spec that spells
    # another's hashed name exactly can still collide
    ({"config": config(models=("org/a b", "org/a_b", "org/a_b-10c61feb"))}, "same task folder"),
])
def test_bad_plans_are_clear_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SweepPlan(**{"config": config(), **kwargs})


def test_a_sweep_file_round_trips_through_the_saved_config(tmp_path):
    (tmp_path / "pairs.json").write_text('{"c": {"pairs": [["a b", "c d"], ["e f", "g h"]]}}')
    (tmp_path / "sweep.yaml").write_text("study: phases\nmodels: [org/a, org/b]\nrevisions: [step10, 20]\n"
                                         "executor: ray\nworkers: 2\ndataset: pairs.json\nn_bootstrap: 300\n")
    plan = load_sweep_file(tmp_path / "sweep.yaml")
    assert plan.revisions == ("step10", "20") and plan.executor == "ray" and plan.workers == 2
    assert plan.config.dataset == str(tmp_path / "pairs.json") and plan.config.n_bootstrap == 300
    (tmp_path / "saved.yaml").write_text(dump_plan(plan))
    assert load_sweep_file(tmp_path / "saved.yaml") == plan
    serial = load_sweep_file(tmp_path / "sweep.yaml", {"models": ("org/c",)}, executor="serial", workers=None,
                             revisions=("step5",))
    assert serial.specs == ("org/c@step5",) and serial.executor == "serial"
    assert serial.workers is None  # the file's Ray settings do not apply to a serial run


@pytest.mark.parametrize("text, message", [
    ("studies: [phases]\nmodels: [a]\n", "a sweep runs one study"),
    ("models: [a]\n", "a sweep runs one study"),
    ("study: phases\nmodels: [a]\nrevisions: step1\n", "'revisions' must be a list"),
    ("study: phases\nmodels: [a]\nrevisions: []\n", "non-empty list"),
    ("study: phases\nmodels: [a]\nworkers: two\n", "'workers' must be a whole number"),
    ("study: phases\nmodels: [a]\nexecutor: ray\nworkers: true\n", "'workers' must be a whole number"),
    ("study: phases\nmodels: [a]\nrevison: [x]\n", "unknown setting 'revison'"),
])
def test_bad_sweep_files_name_the_key(tmp_path, text, message):
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_sweep_file(tmp_path / "s.yaml")


def test_an_out_folder_of_another_sweep_or_anything_else_needs_force(tmp_path):
    out = tmp_path / "sweep"
    prepare_out(SweepPlan(config()), out, force=False)
    (out / "tasks" / "org--a").mkdir()
    prepare_out(SweepPlan(config(models=("org/a", "org/c"))), out, force=False)  # same settings: resumed
    assert (out / "tasks" / "org--a").is_dir() and "org/c" in (out / "config.yaml").read_text()
    with pytest.raises(OutputError, match=r"other settings \(seed: 42 -> 7\).*force=True"):  # Python's spelling
        prepare_out(SweepPlan(config(seed=7)), out, force=False)
    assert (out / "tasks" / "org--a").is_dir()
    prepare_out(SweepPlan(config(seed=7)), out, force=True)
    assert list((out / "tasks").iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="not empty"):
        prepare_out(SweepPlan(config()), mine, force=False)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_profile_rows_keep_the_main_view_and_average_the_rest():
    base = {"revision": None, "step": None, "n_layers": 2}
    table = pd.DataFrame([
        {**base, "model": "m", "layer": 1, "depth": 0.5, "metric": "r", "value": 0.2, "pooling": "mean",
         "subset": "all"},
        {**base, "model": "m", "layer": 1, "depth": 0.5, "metric": "r", "value": 0.9, "pooling": "last",
         "subset": "all"},
        {**base, "model": "m", "layer": 1, "depth": 0.5, "metric": "r", "value": 0.7, "pooling": "mean",
         "subset": "without c"},
        {**base, "model": "m", "layer": 1, "depth": 0.5, "metric": "ua", "value": 5.0, "pooling": "mean",
         "subset": "all", "category": "c"},
        {**base, "model": "m", "layer": None, "depth": None, "metric": "pref", "value": 1.0, "pooling": None,
         "subset": "all"},
        {**base, "model": "m", "layer": 0, "depth": 0.0, "metric": "ppl", "value": 3.0, "lang": "en"},
        {**base, "model": "m", "layer": 0, "depth": 0.0, "metric": "ppl", "value": 5.0, "lang": "de"},
    ])
    table["step"] = table["step"].astype("Int64")
    rows = profile_rows(table, StudyConfig(study="divergence")).set_index(["metric", "layer"])["value"]
    assert rows.to_dict() == {("r", 1): 0.2, ("ppl", 0): 4.0}
