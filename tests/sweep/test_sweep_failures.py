"""Sweeps as a first-time user meets them: every task failing, and model specs that make odd folder names."""

import hashlib
import json
import re

import pandas as pd
from typer.testing import CliRunner

import tiny
from layerscope.cli import app
from layerscope.study import StudyResult
from layerscope.sweep.plan import task_folders, task_slug

runner = CliRunner()


def short_hash(spec: str) -> str:
    return hashlib.sha256(spec.encode()).hexdigest()[:8]


def test_a_sweep_where_every_task_fails_writes_the_page_of_failures_and_exits_1(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pairs.json").write_text(json.dumps(tiny.pairs(4, 5)))
    text = "study: scaling\nmodels: [./no-such-model, ./nor-this-one]\ndataset: pairs.json\n"
    (tmp_path / "sweep.yaml").write_text(text)
    for _attempt in range(2):  # and again: the failed tasks are retried, and fail the same way
        result = runner.invoke(app, ["sweep", "--config", "sweep.yaml", "--out", "out"])
        assert result.exit_code == 1, result.output
        assert "Traceback" not in result.output and "KeyError" not in result.output
        errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert errors == ["error: 2 of 2 tasks failed (see out/sweep.json); fix them and run the same command "
                          "again: finished tasks are kept"], result.output
        saved = json.loads((tmp_path / "out" / "sweep.json").read_text())
        assert saved["n_done"] == 0 and saved["n_failed"] == 2
        assert [(t["spec"], t["status"]) for t in saved["tasks"]] == [("./no-such-model", "failed"),
                                                                       ("./nor-this-one", "failed")]
        for task in saved["tasks"]:
            assert task["spec"].lstrip("./") in task["error"] and "does not exist" in task["error"]
        page = (tmp_path / "out" / "index.html").read_text()
        report = (tmp_path / "out" / "report.md").read_text()
        assert "0 of 2 tasks finished, 2 failed" in report and "## Failed tasks" in report
        for task in saved["tasks"]:
            assert f"- **{task['spec']}**: {task['error']}" in report
            assert task["spec"] in page and task["error"] in page
        assert "Figures" not in page and not list((tmp_path / "out").glob("*.png"))
        assert list(pd.read_csv(tmp_path / "out" / "table.csv").columns) == ["model", "revision", "step"]
        assert not list((tmp_path / "out" / "tasks").iterdir())  # no half-written task folder
    assert (tmp_path / "sweep.yaml").read_text() == text


def test_task_folder_names_are_safe_and_unique():
    specs = ["./tiny-gpt2", "tiny-gpt2", "../models/m", "models/m", "-rf", ".hidden/x", "org/a b", "org/a_b",
             "Org/A_B", "EleutherAI/pythia-410m@step3000", "/tmp/x/m 1", ".", "a" * 150]
    names = task_folders(specs)
    assert names == {
        "./tiny-gpt2": f"tiny-gpt2-{short_hash('./tiny-gpt2')}",  # collides with the hub-style name
        "tiny-gpt2": "tiny-gpt2",                                 # which spells itself: kept
        "../models/m": f"models--m-{short_hash('../models/m')}",
        "models/m": "models--m",
        "-rf": "rf",
        ".hidden/x": "hidden--x",
        "org/a b": f"org--a_b-{short_hash('org/a b')}",
        "org/a_b": f"org--a_b-{short_hash('org/a_b')}",  # three share a name but for case: none spells itself alone
        "Org/A_B": f"Org--A_B-{short_hash('Org/A_B')}",
        "EleutherAI/pythia-410m@step3000": "EleutherAI--pythia-410m@step3000",
        "/tmp/x/m 1": "tmp--x--m_1",
        ".": f"model-{short_hash('.')}",
        "a" * 150: "a" * 91 + "-" + short_hash("a" * 150),
    }
    assert all(re.fullmatch(r"[A-Za-z0-9_@=+][A-Za-z0-9._@=+-]*", n) and len(n) <= 100 for n in names.values())
    assert len({n.casefold() for n in names.values()}) == len(specs)
    assert task_slug("./tiny-gpt2") == "tiny-gpt2"  # alone in a sweep, a local folder keeps its plain name
    assert task_folders(["./tiny-gpt2", "org/b"]) == {"./tiny-gpt2": "tiny-gpt2", "org/b": "org--b"}


def test_two_model_folders_whose_names_clash_run_into_their_own_task_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, seed in (("a b", 0), ("a_b", 1)):
        tiny.save(tmp_path / name, "llama", adds_bos=False, n_layers=2, seed=seed)
    (tmp_path / "pairs.json").write_text(json.dumps(tiny.pairs(4, 5)))
    (tmp_path / "sweep.yaml").write_text("study: scaling\nmodels: ['a b', a_b]\ndataset: pairs.json\n"
                                         "n_permutations: 200\n")
    result = runner.invoke(app, ["sweep", "--config", "sweep.yaml", "--out", "out"])
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [t["status"] for t in saved["tasks"]] == ["done", "done"]
    specs = [t["spec"] for t in saved["tasks"]]
    assert [s.rsplit("/", 1)[-1] for s in specs] == ["a b", "a_b"]
    # both spell folder .../a_b once '/' becomes '--' and ' ' becomes '_': each gets a hash of its own spec
    expected = [f"{s.strip('/').replace('/', '--').replace(' ', '_')[:91]}-{short_hash(s)}" for s in specs]
    assert [t["folder"] for t in saved["tasks"]] == [f"tasks/{e}" for e in expected]
    assert sorted(p.name for p in (tmp_path / "out" / "tasks").iterdir()) == sorted(expected)
    hashes = {StudyResult.load(tmp_path / "out" / t["folder"]).manifest["models"][0]["weights_hash"]
              for t in saved["tasks"]}
    assert len(hashes) == 2  # each folder holds its own model's run
