"""On the command line ``--compat notebooks`` and ``--layers notebooks`` are the names; ``seed``, their spelling
up to 0.4.0, still runs, with one ``note:`` line on stderr naming the new spelling, and the run folder records
``notebooks``. A run folder written with ``compat: seed`` reruns from its config.yaml and its report rebuilds."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

import tiny
from layerscope.cli import app

runner = CliRunner()
NOTE = "note: compat 'seed' is deprecated: use compat 'notebooks'"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(tiny.save(tmp_path_factory.mktemp("models") / "deep", "llama", adds_bos=False, n_layers=6))


def run(*args):
    return runner.invoke(app, [*map(str, args)])


def saved(folder):
    data = json.loads((folder / "result.json").read_text())
    return data, yaml.safe_load((folder / "config.yaml").read_text())


def test_compat_seed_runs_as_compat_notebooks_with_a_note(tmp_path, model):
    new = run("run", "phases", "--model", model, "--compat", "notebooks", "--out", tmp_path / "new",
              "--n-bootstrap", 200)
    old = run("run", "phases", "--model", model, "--compat", "seed", "--out", tmp_path / "old", "--n-bootstrap", 200)
    assert new.exit_code == old.exit_code == 0, old.output
    assert "note:" not in new.stderr and old.stderr.count(NOTE) == 1  # once, however often the config is read
    (new_data, new_config), (old_data, old_config) = saved(tmp_path / "new"), saved(tmp_path / "old")
    assert old_data["config"] == new_data["config"] and old_config == new_config
    assert old_data["config"]["compat"] == "notebooks" and old_data["config"]["seed"] == 42
    assert old_data["summary"]["models"][model]["layers"] == [0, 4, 6]
    assert old_data["summary"] == new_data["summary"]


def test_layers_seed_is_layers_notebooks(tmp_path, model):
    done = run("run", "phases", "--model", model, "--layers", "seed", "--out", tmp_path / "o", "--n-bootstrap", 200)
    assert done.exit_code == 0, done.output
    assert "note: layers 'seed' is deprecated: use layers 'notebooks'" in done.stderr
    data, config = saved(tmp_path / "o")
    assert data["config"]["layers"] == config["layers"] == "notebooks"
    assert data["summary"]["models"][model]["layers"] == [0, 4, 6]


def test_an_old_run_folder_with_compat_seed_reruns_and_reports(tmp_path, model):
    folder = tmp_path / "old"
    assert run("run", "phases", "--model", model, "--compat", "notebooks", "--layers", "notebooks", "--out", folder,
               "--n-bootstrap", 200).exit_code == 0
    for name in ("config.yaml", "result.json"):  # as layerscope 0.4.0 wrote them
        path = folder / name
        text = path.read_text()
        assert text.count("notebooks") == 2
        path.write_text(text.replace('"notebooks"', '"seed"').replace("notebooks", "seed"))
    report = run("report", folder)
    assert report.exit_code == 0, report.output
    assert "--compat notebooks" in (folder / "index.html").read_text()
    again = run("run", "--config", folder / "config.yaml", "--out", tmp_path / "again")
    assert again.exit_code == 0, again.output
    assert NOTE in again.stderr
    data, config = saved(tmp_path / "again")
    assert (data["config"]["compat"], data["config"]["layers"]) == ("notebooks", "notebooks")
    assert config["compat"] == "notebooks"


def test_extract_compat_seed_notes_and_records_notebooks(tmp_path, model):
    done = run("extract", "--model", model, "--out", tmp_path / "x", "--compat", "seed", "--no-cache")
    assert done.exit_code == 0, done.output
    assert done.stderr.count(NOTE) == 1
    assert json.loads((tmp_path / "x" / "manifest.json").read_text())["settings"]["compat"] == "notebooks"


@pytest.mark.parametrize("command", [["run", "phases"], ["extract"]])
def test_an_unknown_compat_names_notebooks(command):
    done = run(*command, "--compat", "notebook")
    assert done.exit_code == 2 and "'notebooks'" in done.stderr and "error:" in done.stderr
