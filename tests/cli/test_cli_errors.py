"""Usage errors of every command as one `error:` line (issue 11), settings validated before any model
loads, an error for an option a study does not read, and saved configs that rerun from another folder."""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import tiny
from layerscope.cli import app

runner = CliRunner()


def snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


def one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert not any(mark in output for mark in ("Usage:", "╭", "│", "Traceback")), output
    return lines[0]


@pytest.mark.parametrize("args, message", [
    (["run", "divergence", "--batch-size", "0"],
     "error: Invalid value for '--batch-size': Input should be greater than or equal to 1; "
     "see `layerscope run --help`"),
    (["run", "--seed", "abc"], "Invalid value for '--seed'"),
    (["run", "--dtype", "float8"], "Invalid value for '--dtype'"),
    (["run", "--n-boot", "5"], "No such option: --n-boot"),
    (["extract", "--batch-size", "many"], "see `layerscope extract --help`"),
    (["sweep", "--model", "a"], "Missing option '--config'"),
    (["report"], "Missing argument 'FOLDER'; see `layerscope report --help`"),
    (["nope"], "error: No such command 'nope'; see `layerscope --help`"),
])
def test_usage_errors_of_every_command_are_one_line_with_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("mine")
    before = snapshot(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in one_error_line(result.output)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [[], ["run"], ["extract"], ["sweep"], ["report"]])
def test_help_still_works(command):
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0 and "Usage: layerscope" in result.output and "error:" not in result.output


def test_no_command_shows_the_help():
    result = runner.invoke(app, [])
    assert "Usage: layerscope" in result.output and "error:" not in result.output


def test_the_installed_script_prints_the_same_line(tmp_path):
    script = shutil.which("layerscope", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "layerscope.cli"]
    done = subprocess.run([*command, "run", "--seed", "abc"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("error: Invalid value for '--seed': Input should be a valid integer, unable to parse "
                           "string as an integer; see `layerscope run --help`\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, files", [
    (["run", "phases", "--seed", "-1", "--model", "no-such-model-xyz"], {}),
    (["run", "--seed", str(2**32), "--model", "no-such-model-xyz"], {}),
    (["run", "scaling", "--seed", "-1", "--model", "no-such-a", "--model", "no-such-b", "--executor", "serial"], {}),
    (["run", "--config", "c.yaml"], {"c.yaml": "study: phases\nmodels: [no-such-model-xyz]\nseed: -1\n"}),
    (["sweep", "--config", "s.yaml"], {"s.yaml": "study: phases\nmodels: [no-such-a, no-such-b]\nseed: -1\n"}),
])
def test_a_seed_out_of_range_fails_before_any_model_loads(tmp_path, monkeypatch, args, files):
    """The models do not exist: a seed checked after loading would report them instead."""
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    before = snapshot(tmp_path)
    result = runner.invoke(app, [*args, "--out", "out"])
    assert result.exit_code == 2
    assert "is out of range; use a whole number from 0 to 4294967295" in one_error_line(result.output)
    assert snapshot(tmp_path) == before


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("work")
    tiny.save(root / "tm", "llama", adds_bos=False)
    return root


def test_an_unused_option_is_one_error_and_the_saved_config_reruns_from_elsewhere(tiny_model, tmp_path,
                                                                                  monkeypatch):
    work = tiny_model
    monkeypatch.chdir(work)
    prompts = work / "prompts.txt"
    prompts.write_text("The cat sat on the mat.\nPrices rose by four percent.\nIce floats on water.\n")
    args = ["run", "anisotropy", "--model", "./tm", "--prompts", "prompts.txt", "--out", str(tmp_path / "first")]
    refused = runner.invoke(app, [*args, "--bits", "3"])  # issue 13: an option the study does not read is an error
    assert refused.exit_code == 2 and not (tmp_path / "first").exists()
    assert one_error_line(refused.output) == ("error: --bits is not used by anisotropy; leave it out (see "
                                              "`layerscope run anisotropy --help` for its options)")
    refused = runner.invoke(app, [*args, "--no-prefix-reuse"])  # named as typed, not as the setting's on-flag
    assert one_error_line(refused.output).startswith("error: --no-prefix-reuse is not used by anisotropy; ")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith(("warning:", "error:"))]
    assert warnings == []
    saved = yaml.safe_load((tmp_path / "first" / "config.yaml").read_text())
    assert saved["models"] == [str(work / "tm")] and saved["prompts"] == str(prompts) and "bits" not in saved

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    before = snapshot(work)
    again = runner.invoke(app, ["run", "--config", str(tmp_path / "first" / "config.yaml"), "--out", "second"])
    assert again.exit_code == 0, again.output
    pd.testing.assert_frame_equal(pd.read_csv(elsewhere / "second" / "table.csv"),
                                  pd.read_csv(tmp_path / "first" / "table.csv"))
    assert snapshot(work) == before
