"""`layerscope run` with no study: all five into one folder, config reuse, resume after an interruption."""

import json

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from layerscope.cli import app
from layerscope.run.config_file import SUITE
from layerscope.run.registry import studies
from layerscope.study import StudyResult

runner = CliRunner()


def run(*args):
    return runner.invoke(app, ["run", *map(str, args)])


def tables(folder, names=SUITE):
    return {name: pd.read_csv(folder / name / "table.csv") for name in names}


def three_studies(tmp_path):
    path = tmp_path / "three.yaml"
    path.write_text("studies: [divergence, scaling, phases]\n")
    return path


def test_suite_writes_every_study_config_and_index(tiny_suite):
    folder, args = tiny_suite
    assert {p.name for p in folder.iterdir()} == {*SUITE, "config.yaml", "index.html", ".layerscope.json"}
    for name in SUITE:
        result = StudyResult.load(folder / name)
        assert result.study == name and len(result.table) > 0
        assert result.config["models"] == [args[1], args[3]]  # every study on the models given
    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert list(config["studies"]) == list(SUITE)
    assert config["studies"]["phases"]["n_bootstrap"] == 200 and config["studies"]["ablation"]["bits"] == 4
    assert not [p for p in folder.parent.iterdir() if p.name.endswith(".partial")]


@pytest.mark.slow
def test_saved_config_reproduces_the_run(tiny_suite, tmp_path, monkeypatch):
    folder, _ = tiny_suite
    monkeypatch.chdir(tmp_path)  # relative paths in the saved config must not depend on the working folder
    result = run("--config", folder / "config.yaml", "--out", tmp_path / "again")
    assert result.exit_code == 0, result.output
    again = tables(tmp_path / "again")
    for name, table in tables(folder).items():
        pd.testing.assert_frame_equal(table, again[name], obj=name)
    assert (tmp_path / "again" / "config.yaml").read_text() == (folder / "config.yaml").read_text()


def test_one_study_of_a_suite_config(tiny_suite, tmp_path):
    folder, _ = tiny_suite
    result = run("divergence", "--config", folder / "config.yaml", "--out", tmp_path / "div")
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "div" / "table.csv"), tables(folder)["divergence"])
    single = yaml.safe_load((tmp_path / "div" / "config.yaml").read_text())
    assert single["study"] == "divergence"  # a one-study folder's config reruns that study alone


@pytest.mark.slow
def test_interrupted_suite_resumes_with_identical_results(tiny_suite, tmp_path, monkeypatch):
    folder, args = tiny_suite
    out = tmp_path / "run"
    phases = studies()["phases"]

    def interrupted(self, config):
        raise KeyboardInterrupt

    config = three_studies(tmp_path)
    with monkeypatch.context() as mp:  # Ctrl-C in the third study
        mp.setattr(type(phases), "run", interrupted)
        result = run("--config", config, *args, "--out", out)
    assert result.exit_code != 0 and not out.exists()
    partial = tmp_path / ".run.partial"
    assert {p.name for p in partial.iterdir()} == {"config.yaml", "divergence", "scaling"}
    done_before = (partial / "divergence" / "result.json").read_text()

    result = run("--config", config, *args, "--out", out)
    assert result.exit_code == 0, result.output
    assert "divergence: finished in an earlier, interrupted run" in result.output
    assert (out / "divergence" / "result.json").read_text() == done_before  # reused, not recomputed
    assert not partial.exists()
    resumed, whole = tables(out, ["divergence", "scaling", "phases"]), tables(folder)
    for name in resumed:
        pd.testing.assert_frame_equal(resumed[name], whole[name], obj=name)


def test_an_unfinished_run_of_another_config_is_not_reused(tmp_path, tiny_suite):
    _, args = tiny_suite
    partial = tmp_path / ".run.partial"
    (partial / "divergence").mkdir(parents=True)
    (partial / "config.yaml").write_text("# some other config\n")
    (partial / "divergence" / "result.json").write_text("{}")
    result = run("--config", three_studies(tmp_path), *args, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert "earlier, interrupted run" not in result.output
    data = json.loads((tmp_path / "run" / "divergence" / "result.json").read_text())
    assert data["study"] == "divergence"


@pytest.mark.parametrize("suffix, text", [
    (".yaml", "studies: [divergence, phases]\nseed: 3\nphases:\n  n_bootstrap: 150\n"),
    (".toml", 'studies = ["divergence", "phases"]\nseed = 3\n[phases]\nn_bootstrap = 150\n'),
])
def test_a_suite_config_file_runs_its_studies_with_shared_and_own_settings(tmp_path, tiny_suite, suffix, text):
    _, args = tiny_suite
    path = tmp_path / f"suite{suffix}"
    path.write_text(text)
    result = run("--config", path, "--model", args[1], "--n-permutations", 150, "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    assert {p.name for p in (tmp_path / "o").iterdir()} == {"divergence", "phases", "config.yaml", "index.html",
                                                          ".layerscope.json"}
    phases = StudyResult.load(tmp_path / "o" / "phases").config
    divergence = StudyResult.load(tmp_path / "o" / "divergence").config
    assert (phases["seed"], phases["n_bootstrap"], divergence["seed"]) == (3, 150, 3)
    assert "n_bootstrap" not in divergence  # issue 13: a study's saved config holds its own settings only
    assert phases["models"] == [args[1]] and phases["n_permutations"] == 150  # the command line wins
