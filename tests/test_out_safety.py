"""Output folders never cost the user a file (issue 11): what ``--force`` (``force=True``) may replace,
``layerscope report`` over a page of the user's, sweep reruns, what killed writes leave behind, a full
disk, and the fix spelled for the CLI or for Python. Every case checks the user's files byte for byte."""

import errno
import hashlib
import json
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

import tiny
from conftest import MARK, error_line
from layerscope.cli import app
from layerscope.errors import DiskFullError, OutputError
from layerscope.io import MARKER, atomic_file, read_marker, staged_dir
from layerscope.report.html import GENERATOR
from layerscope.study import StudyConfig, StudyResult
from layerscope.sweep import SweepPlan, run_sweep

runner = CliRunner()

model = pytest.fixture(scope="module", name="model")(lambda out_model: out_model)  # conftest's tiny model


def snapshot(folder) -> dict[str, str]:
    """Every path under ``folder`` with the SHA-256 of its bytes ("dir" for folders)."""
    return {p.relative_to(folder).as_posix(): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(pathlib.Path(folder).rglob("*"))}


def plant(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)




# -- --force (force=True) replaces only a folder layerscope wrote, and never a protected one --

PROTECTED = [  # (name, files, working folder, arguments after `run divergence`, reason in the error)
    ("--out . --force", {"work/notes.txt": "mine", "work/" + MARKER: MARK}, "work", ["--out", "."],
     "it is the current folder"),
    ("cd work; --out ../work --force", {"work/notes.txt": "mine"}, "work", ["--out", "../work"],
     "it is the current folder"),
    ("--out an ancestor of the current folder", {MARKER: MARK, "work/sub/notes.txt": "mine"}, "work/sub",
     ["--out", "{tmp}"], "it holds the current folder"),
    ("--out $HOME --force", {"home/notes.txt": "mine", "home/" + MARKER: MARK}, ".", ["--out", "{tmp}/home"],
     "it is your home folder"),
    ("--out the folder holding the dataset", {"data/d.json": json.dumps(tiny.pairs(4, 5)), "data/" + MARKER: MARK},
     ".", ["--dataset", "data/d.json", "--out", "data"], "it holds {tmp}/data/d.json, an input of this run"),
    ("--out the model folder", {}, ".", ["--model", "{tmp}/model", "--out", "{tmp}/model"],
     "it is {tmp}/model, an input of this run"),
    ("--out a folder layerscope did not write", {"out/notes.txt": "mine", "out/result.json": "{}"}, ".",
     ["--out", "out"], "layerscope did not write it (it has no .layerscope.json)"),
    ("--out the folder holding the config file", {"prev/c.yaml": "study: divergence\n", "prev/" + MARKER: MARK}, ".",
     ["--config", "prev/c.yaml", "--out", "prev"], "it holds prev/c.yaml, an input of this run"),
]


@pytest.mark.parametrize("case", PROTECTED, ids=[c[0] for c in PROTECTED])
def test_force_refuses_a_folder_it_may_not_replace_and_does_not_suggest_force(tmp_path, monkeypatch, model, case):
    _, files, cwd, args, reason = case
    plant(tmp_path, files)
    shutil.copytree(model, tmp_path / "model")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / cwd).mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(tmp_path / cwd)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    extra = [] if "--model" in args else ["--model", str(tmp_path / "model")]
    before = snapshot(tmp_path)
    line = error_line(runner.invoke(app, ["run", "divergence", *args, *extra, "--force"]))
    assert reason.replace("{tmp}", str(tmp_path)) in line and "--force" not in line and "choose another --out" in line
    assert snapshot(tmp_path) == before  # nothing moved, nothing deleted, no .old or .partial folder


def test_force_replaces_a_folder_layerscope_wrote_and_only_then_is_suggested(tmp_path, model, finished):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    (out / "result.json").write_text("{}")  # so that the rewrite shows
    line = error_line(runner.invoke(app, ["run", "divergence", "--model", model, "--n-permutations", "100",
                                          "--out", str(out)]))
    assert "pass --force to replace it" in line
    result = runner.invoke(app, ["run", "divergence", "--model", model, "--n-permutations", "100", "--out", str(out),
                                 "--force"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "result.json").read_text())["study"] == "divergence"
    assert read_marker(out)["kind"] == "run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no .old, no .partial beside it


def test_python_says_force_true_and_the_cli_says_force(tmp_path, finished):
    result = StudyResult.load(finished)
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    with pytest.raises(OutputError) as refused:
        result.write(out)
    assert "pass force=True to replace it" in str(refused.value) and "--force" not in str(refused.value)
    assert "pass --force to replace it" in refused.value.cli_message()
    assert "force=True" not in refused.value.cli_message()
    result.write(out, force=True)
    assert read_marker(out)["kind"] == "run" and StudyResult.load(out).summary == result.summary

    mine = tmp_path / "mine"
    plant(mine, {"notes.txt": "mine", "result.json": "{}"})
    before = snapshot(tmp_path / "mine")
    with pytest.raises(OutputError, match="layerscope did not write it") as refused:
        result.write(mine, force=True)
    message = str(refused.value).replace(str(mine), "")
    assert "choose another out folder" in message and "force" not in message
    assert snapshot(mine) == before


def test_a_suite_and_a_sweep_keep_the_current_folder(tmp_path, monkeypatch, model):
    plant(tmp_path, {"notes.txt": "mine", MARKER: MARK, "s.yaml": f"study: divergence\nmodels: [{model}]\n"})
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    for args in (["run", "--model", model, "--out", ".", "--force"],
                 ["sweep", "--config", "s.yaml", "--out", ".", "--force"]):
        line = error_line(runner.invoke(app, args))
        assert "it is the current folder" in line and "--force" not in line
    assert snapshot(tmp_path) == before


# -- layerscope report: never over an index.html of the user's --

def test_report_keeps_a_users_own_index_html(tmp_path, finished):
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    (folder / "index.html").write_bytes(b"<html><body>my own notes</body></html>\n")
    before = snapshot(folder)
    line = error_line(runner.invoke(app, ["report", str(folder)]))
    assert "index.html was not written by layerscope" in line
    assert snapshot(folder) == before


def test_report_renders_again_over_its_own_page_and_an_earlier_versions(tmp_path, finished):
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    page = (folder / "index.html").read_text()
    assert GENERATOR in page
    (folder / "index.html").write_text(page.replace(GENERATOR, ""))  # as versions before the marker wrote it
    result = runner.invoke(app, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert GENERATOR in (folder / "index.html").read_text()


# -- sweep reruns delete only the files layerscope wrote --

def test_a_sweep_rerun_deletes_only_figures_it_wrote(tmp_path, monkeypatch, model):
    monkeypatch.chdir(tmp_path)
    plan = SweepPlan(StudyConfig(study="divergence", models=(model,), n_permutations=100))
    out = tmp_path / "sweep"
    run_sweep(plan, out)
    figures = read_marker(out)["figures"]
    assert figures and figures == sorted(p.name for p in out.glob("*.png"))
    plant(out, {"holiday.png": "not a png, but mine", "notes.txt": "mine"})
    (out / "gone_metric.png").write_bytes(b"an earlier gather's figure")  # listed in the marker below
    marker = read_marker(out)
    (out / MARKER).write_text(json.dumps({**marker, "figures": [*figures, "gone_metric.png"]}))
    mine = {name: (out / name).read_bytes() for name in ("holiday.png", "notes.txt")}

    run_sweep(plan, out)
    assert {name: (out / name).read_bytes() for name in mine} == mine
    assert not (out / "gone_metric.png").exists()
    assert read_marker(out)["figures"] == figures
    assert figures == sorted(p.name for p in out.glob("*.png") if p.name != "holiday.png")


# -- what a killed write leaves behind is removed by the next write of the same target --

KILLED_WRITE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from layerscope.io import staged_dir
    with staged_dir(Path(sys.argv[1]), kind=sys.argv[2]) as tmp:
        (tmp / "weights.bin").write_bytes(bytes(2**20))
        if sys.argv[3] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        print("staging", flush=True)
        sys.stdin.readline()  # held open until the test says go
""")


def killed_write(target, kind="run"):
    """Start writing ``target`` in another process and SIGKILL it half-way; returns the partial it left."""
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(target), kind, "kill"], capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()
    partial, = target.parent.glob(f".{target.name}.*.partial")
    assert (partial / MARKER).is_file() and (partial / "weights.bin").stat().st_size == 2**20
    return partial


def test_the_next_write_removes_a_killed_writes_partial_and_nothing_else(tmp_path):
    out = tmp_path / "div"
    stale = killed_write(out)
    keep = {".div.partial/config.yaml": "studies: [divergence]\n",  # a suite's resumable staging folder
            ".other.abcd1234.partial/" + MARKER: MARK,  # another target's
            ".div.mine1234.partial/notes.txt": "mine",  # a name like ours, but no marker: not ours
            "notes.txt": "mine"}
    plant(tmp_path, keep)
    before = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith(stale.name)}
    with staged_dir(out, kind="run") as tmp:
        (tmp / "result.json").write_text("{}")
    assert not stale.exists() and (out / "result.json").read_text() == "{}"
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("div")} == before


def test_a_partial_that_a_live_process_is_writing_is_kept(tmp_path):
    out = tmp_path / "div"
    live = subprocess.Popen([sys.executable, "-c", KILLED_WRITE, str(out), "run", "hold"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline() == "staging\n"
        partial, = tmp_path.glob(".div.*.partial")
        with staged_dir(out, kind="run") as tmp:
            (tmp / "mine.txt").write_text("this process")
        assert (partial / "weights.bin").stat().st_size == 2**20  # not taken for stale
        live.stdin.write("go\n")
        live.stdin.flush()
        assert live.wait(timeout=60) == 0
    finally:
        live.kill()
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "weights.bin"] and not partial.exists()


def test_a_killed_zoo_conversion_is_cleared_by_the_next_one(tmp_path, monkeypatch):
    from layerscope.models import zoo

    dest = tmp_path / "models" / "smollm2-135m-0.1"
    stale = killed_write(dest, kind="model")
    converted = []

    def convert(gguf, out):
        converted.append((out / "model.safetensors").write_text("w"))

    monkeypatch.setattr(zoo, "_convert", convert)
    assert zoo._convert_once(dest, lambda scratch: tmp_path / "x.gguf") == dest
    assert converted and not stale.exists()
    assert sorted(p.name for p in dest.parent.iterdir() if not p.name.endswith(".lock")) == [dest.name]
    assert sorted(p.name for p in dest.iterdir()) == [MARKER, "model.safetensors"]


def test_a_resumed_suite_holds_no_partial_of_a_killed_study_write(tmp_path, monkeypatch, model):
    from layerscope.run import suite

    configs = {"divergence": StudyConfig(study="divergence", models=(model,), n_permutations=100),
               "anisotropy": StudyConfig(study="anisotropy", models=(model,))}
    real = suite.run_study

    def interrupted(config):
        if config.study == "anisotropy":
            raise KeyboardInterrupt
        return real(config)

    out = tmp_path / "run"
    with monkeypatch.context() as mp:
        mp.setattr(suite, "run_study", interrupted)
        with pytest.raises(KeyboardInterrupt):
            suite.run_suite(configs, out, echo=lambda line: None)
    staging = tmp_path / ".run.partial"
    stale = killed_write(staging / "anisotropy")  # as a kill while anisotropy's folder was written leaves it
    suite.run_suite(configs, out, echo=lambda line: None)
    assert not stale.exists() and not staging.exists()
    assert not [p for p in out.rglob("*") if p.name.endswith((".partial", ".old"))]
    assert read_marker(out)["kind"] == "suite" and read_marker(out / "anisotropy")["kind"] == "run"


# -- a full disk: one line with the folder and the bytes, nothing left --

def test_a_full_disk_is_one_line_naming_the_folder_and_bytes_and_leaves_nothing(tmp_path, monkeypatch, model,
                                                                                finished):
    monkeypatch.chdir(tmp_path)
    plant(tmp_path, {"notes.txt": "mine"})
    before = snapshot(tmp_path)
    write_bytes = pathlib.Path.write_bytes

    def full(path, data):
        if path.parent.name.endswith(".partial") and path.name == "table.csv":
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_bytes(path, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    line = error_line(runner.invoke(app, ["run", "divergence", "--model", model, "--n-permutations", "100",
                                          "--out", "out"]))
    assert snapshot(tmp_path) == before  # no out/, no .out.*.partial
    assert line.startswith("error: the disk is full: writing out needs about ") and "choose another --out" in line
    needed = int(line.split("needs about ")[1].split(" bytes")[0].replace(",", ""))
    written = sum(p.stat().st_size for p in finished.iterdir())  # what such a run folder holds
    assert 0.8 * written < needed < 1.5 * written


def test_a_full_disk_in_a_single_file_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("old")
    with pytest.raises(DiskFullError, match=rf"writing {path} needs more than 5 bytes"):
        with atomic_file(path, "w") as f:
            f.write("12345")
            f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]
