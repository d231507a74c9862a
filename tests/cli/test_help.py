"""`layerscope --help` without torch, and `layerscope run`'s options made from the studies' settings (issue 13)."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

import layerscope.run.suite
import layerscope.studies
from layerscope.cli import app
from layerscope.study import ConfigError

runner = CliRunner()


@pytest.mark.parametrize("args, shown", [(["--help"], "Usage:"), (["--version"], "layerscope ")])
def test_help_and_version_do_not_import_torch(args, shown):
    code = ("import sys\n"
            "from layerscope.cli import main\n"
            f"sys.argv = ['layerscope', *{args!r}]\n"
            "try:\n"
            "    main()\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('torch imported:', 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert shown in done.stdout
    assert done.stdout.rstrip().endswith("torch imported: False"), done.stdout


def test_root_help_still_lists_run():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0 and "run" in result.output and "Run one study" in result.output


def options(output: str) -> set[str]:
    return {word.strip("│,") for line in output.splitlines() for word in line.split() if word.startswith("--")}


def test_one_studys_help_shows_the_shared_options_and_its_own_only():
    result = runner.invoke(app, ["run", "anisotropy", "--help"])
    assert result.exit_code == 0, result.output
    shown = options(result.output)
    assert {"--prompts", "--exclude-bos", "--reference-lstar", "--seed", "--model", "--out", "--config"} <= shown
    assert not {"--bits", "--dataset", "--n-bootstrap", "--texts", "--layers"} & shown


def test_run_help_without_a_study_shows_every_option():
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0, result.output
    assert {"--bits", "--prompts", "--dataset", "--exclude-bos", "--seed", "--no-cache"} <= options(result.output)


@pytest.fixture
def ran(monkeypatch, tmp_path):
    """Runs `layerscope run ARGS` up to the study itself; returns the config it would have run (or None)."""
    monkeypatch.chdir(tmp_path)
    seen = []

    def stop(config):
        seen.append(config)
        raise ConfigError("stopped before the model loads")

    monkeypatch.setattr(layerscope.run, "run_study", stop)
    monkeypatch.setattr(layerscope.run.suite, "check_inputs", lambda config: None)  # p.txt need not parse

    def invoke(*args):
        result = runner.invoke(app, ["run", *args, "--out", str(tmp_path / "out")])
        assert result.exit_code == 2, result.output
        return seen.pop() if seen else result.output

    return invoke


def test_a_bool_setting_is_a_flag_that_takes_no_value(ran):
    assert ran("anisotropy", "--model", "m", "--exclude-bos").exclude_bos is True
    assert ran("anisotropy", "--model", "m").exclude_bos is False
    assert "unexpected extra argument(s) (yes)" in ran("anisotropy", "--model", "m", "--exclude-bos", "yes")


def test_settings_reach_the_config_with_their_types(ran, tmp_path):
    (tmp_path / "p.txt").write_text("")
    path = str((tmp_path / "p.txt").resolve())
    config = ran("anisotropy", "-m", "a", "--model", "b", "--no-cache", "--prompts", "p.txt", "--seed", "7",
                 "--reference-lstar", "3", "--dtype", "bfloat16")
    assert config.models == ("a", "b") and config.cache is False and config.seed == 7
    assert config.prompts == path and config.reference_lstar == 3 and config.dtype == "bfloat16"
    phases = ran("phases", "-m", "a", "--layers", "0,2", "-d", "p.txt", "--n-bootstrap", "500", "--ci-level", "0.9")
    assert phases.layers == "0,2" and phases.dataset == path
    assert phases.n_bootstrap == 500 and phases.ci_level == 0.9 and phases.cache is True


def test_another_studys_option_is_one_error_naming_it_and_the_study(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "phases", "--bits", "3"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--bits" in lines[0] and "phases" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_flag_that_turns_a_setting_off_reads_as_one_sentence_after_the_settings_help():
    import dataclasses

    from layerscope.cli.run_options import option_help
    from layerscope.studies.surgery import SurgerySettings

    field = next(f for f in dataclasses.fields(SurgerySettings) if f.name == "prefix_reuse")
    assert option_help(field, inverted=True) == f"{field.metadata['help']} On by default: this flag turns it off."
