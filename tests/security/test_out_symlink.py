"""``--out`` given as a symbolic link (issue 26): the link is followed, never replaced. A link to a folder of the
user's is protected exactly like that folder; a link to a folder layerscope wrote updates that folder and the
link stays a link to it; a link to nothing (or to itself) is one clear error. Every case checks the link, its
target and everything beside them."""

import hashlib
import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from conftest import MARK, error_line
from layerscope.cli import app
from layerscope.errors import OutputError
from layerscope.io import MARKER, check_out_dir, read_marker
from layerscope.study import StudyConfig, StudyResult
from layerscope.sweep import SweepPlan
from layerscope.sweep.run import prepare_out

runner = CliRunner()

model = pytest.fixture(scope="module", name="model")(lambda out_model: out_model)  # conftest's tiny model


def snapshot(folder) -> dict[str, str]:
    """Every path under ``folder`` (links not followed) with the SHA-256 of its bytes, 'dir', or 'link -> target'."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            key = os.path.relpath(path, folder)
            if os.path.islink(path):
                found[key] = f"link -> {os.readlink(path)}"
            elif os.path.isdir(path):
                found[key] = "dir"
            else:
                with open(path, "rb") as f:
                    found[key] = hashlib.sha256(f.read()).hexdigest()
    return found


def run(model, out, *extra):
    return runner.invoke(app, ["run", "divergence", "--model", model, "--n-permutations", "100", "--out", str(out),
                               *extra])


# -- a link to a folder of the user's: protected like the folder --

@pytest.mark.parametrize("force", [False, True])
def test_a_link_to_a_folder_of_yours_is_refused_with_or_without_force(tmp_path, model, force):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    (mine / "result.json").write_text("{}")
    (tmp_path / "out").symlink_to(mine, target_is_directory=True)
    before = snapshot(tmp_path)
    line = error_line(run(model, tmp_path / "out", *(["--force"] if force else [])))
    assert f"{tmp_path / 'out'} (a link to {mine})" in line
    assert "layerscope did not write it (it has no .layerscope.json)" in line and "choose another --out" in line
    assert snapshot(tmp_path) == before  # the link, the folder and its files as they were; nothing beside them


def test_a_link_to_the_current_folder_is_refused(tmp_path, monkeypatch, model):
    work = tmp_path / "work"
    work.mkdir()
    (work / MARKER).write_text(MARK)
    (work / "notes.txt").write_text("mine")
    (work / "here").symlink_to(work, target_is_directory=True)
    monkeypatch.chdir(work)
    before = snapshot(tmp_path)
    line = error_line(run(model, "here", "--force"))
    assert f"will not write into here (a link to {work}): it is the current folder; choose another --out" in line
    assert snapshot(tmp_path) == before


def test_a_link_to_a_file_is_refused(tmp_path, model):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "out").symlink_to(tmp_path / "notes.txt")
    before = snapshot(tmp_path)
    line = error_line(run(model, tmp_path / "out", "--force"))
    assert "exists and is not a folder" in line
    assert snapshot(tmp_path) == before


# -- a link to a folder layerscope wrote: the target is updated, the link stays --

def test_force_through_a_link_rewrites_the_target_and_keeps_the_link(tmp_path, model, finished):
    target = tmp_path / "runs" / "div"
    shutil.copytree(finished, target)
    (target / "result.json").write_text("{}")  # so that the rewrite shows
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "latest"
    link.symlink_to(target, target_is_directory=True)
    line = error_line(run(model, link))
    assert "pass --force to replace it" in line and json.loads((target / "result.json").read_text()) == {}
    result = run(model, link, "--force")
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads((target / "result.json").read_text())["study"] == "divergence"
    assert read_marker(target)["kind"] == "run"
    assert os.listdir(tmp_path / "links") == ["latest"]  # no .old or .partial beside the link
    assert os.listdir(tmp_path / "runs") == ["div"]  # nor beside the target


def test_python_write_through_a_link_keeps_the_link(tmp_path, finished):
    target = tmp_path / "div"
    shutil.copytree(finished, target)
    (target / "stale.png").write_text("a figure an earlier run wrote")
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(OutputError, match=r"pass force=True to replace it"):
        StudyResult.load(finished).write(link)
    StudyResult.load(finished).write(link, force=True)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert not (target / "stale.png").exists()  # the target was replaced as a whole
    assert sorted(os.listdir(target)) == sorted(os.listdir(finished))
    assert sorted(os.listdir(tmp_path)) == ["div", "link"]


def test_a_link_to_an_empty_folder_is_written_through(tmp_path, finished):
    empty = tmp_path / "empty"
    empty.mkdir()
    link = tmp_path / "link"
    link.symlink_to(empty, target_is_directory=True)
    StudyResult.load(finished).write(link)
    assert link.is_symlink() and (empty / "result.json").is_file() and read_marker(empty)["kind"] == "run"
    assert sorted(os.listdir(tmp_path)) == ["empty", "link"]


def test_check_out_dir_returns_the_target_of_a_link(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target, target_is_directory=True)
    assert check_out_dir(tmp_path / "link", force=False) == target.resolve()
    assert check_out_dir(tmp_path / "plain", force=False) == tmp_path / "plain"  # not a link: as given


# -- a link to nothing --

def test_a_dangling_link_is_one_clear_error_and_nothing_is_created(tmp_path, model):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere", target_is_directory=True)
    before = snapshot(tmp_path)
    line = error_line(run(model, link, "--force"))
    assert (f"output path {link} is a symbolic link to {tmp_path / 'nowhere'}, which does not exist; create that "
            "folder, or choose another --out") in line
    assert snapshot(tmp_path) == before and not (tmp_path / "nowhere").exists()


def test_a_link_loop_is_one_clear_error(tmp_path, model):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    before = snapshot(tmp_path)
    line = error_line(run(model, tmp_path / "a"))
    assert "is a symbolic link that leads back to itself; choose another --out" in line
    assert snapshot(tmp_path) == before


# -- sweeps --

def sweep_plan(seed=42):
    return SweepPlan(StudyConfig(study="scaling", models=("org/a",), seed=seed))


def test_a_sweep_through_a_link_replaces_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "sweep"
    prepare_out(sweep_plan(), target, force=False)
    (target / "tasks" / "org--a").mkdir()
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    prepare_out(sweep_plan(), link, force=False)  # same settings: resumed through the link
    assert (target / "tasks" / "org--a").is_dir()
    with pytest.raises(OutputError, match="other settings"):
        prepare_out(sweep_plan(seed=7), link, force=False)
    prepare_out(sweep_plan(seed=7), link, force=True)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert list((target / "tasks").iterdir()) == [] and read_marker(target)["kind"] == "sweep"
    assert "seed: 7" in (target / "config.yaml").read_text()
    assert sorted(os.listdir(tmp_path)) == ["link", "sweep"]


def test_a_sweep_into_a_link_to_a_folder_of_yours_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "holiday.png").write_text("mine")
    (tmp_path / "link").symlink_to(mine, target_is_directory=True)
    before = snapshot(tmp_path)
    with pytest.raises(OutputError, match="layerscope did not write it"):
        prepare_out(sweep_plan(), tmp_path / "link", force=True)
    assert snapshot(tmp_path) == before
