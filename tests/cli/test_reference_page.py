"""docs/reference/cli.md is what tools/cli_reference.py makes of the typer app now, and it says what the app does:
each command's section lists the options its ``--help`` shows, the run sections the panels of ``layerscope run
STUDY --help``, and each study's section exactly the settings that study reads, as the run-time check decides
(``resolve_configs`` accepts those and rejects every other study's setting, naming it)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from layerscope.cli import app
from layerscope.run.config_file import fields, resolve_configs
from layerscope.run.registry import studies
from layerscope.study import ConfigError
from layerscope.study.config import COMMON

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "cli.md"
WIDE = {"COLUMNS": "400", "TERMINAL_WIDTH": "400"}  # one help line per option


def generator():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "tools" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_sections() -> dict[str, set[str]]:
    """The page's long options per heading (``layerscope run probe``, ``Settings every study reads``, ...)."""
    found: dict[str, set[str]] = {}
    heading = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip().strip("`")
            found[heading] = set()
        elif line.startswith("| `-"):
            found[heading] |= {o for o in re.findall(r"`(-[^`]+)`", line.split(" | ")[0]) if o.startswith("--")}
    return found


def page_keys() -> dict[str, str]:
    """The config file key the page gives each setting (its last column), by long option."""
    rows = [line.split(" | ") for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("| `--")]
    return {re.findall(r"`(--[^`]+)`", row[0])[0]: row[-1].strip(" |`") for row in rows if len(row) == 5}


def help_panels(*args: str) -> dict[str, set[str]]:
    """``layerscope ARGS --help`` as the user sees it: each panel's long options (``Options``, ``Settings of X``)
    and the ``Commands`` panel's command names."""
    result = CliRunner().invoke(app, [*args, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    panels: dict[str, set[str]] = {}
    panel = None
    for line in result.output.splitlines():
        if line.startswith("╭─"):
            panel = line.strip("╭─╮ ").rstrip("─ ")
            panels[panel] = set()
        elif line.startswith("│ ") and panel == "Commands":
            if line[2] != " ":  # not a description's second line
                panels[panel].add(line[2:].split()[0])
        elif line.startswith("│ ") and panel is not None:
            words = line.strip("│ ").replace(",", " ").split()
            panels[panel] |= {w for w in words[:2] if w.startswith("--")}  # the flags, not the help text
    return panels


def test_the_page_is_what_the_generator_makes_of_the_app_now():
    assert PAGE.read_text(encoding="utf-8") == generator().page(), (
        "docs/reference/cli.md is out of date with the command line: run `.venv/bin/python tools/cli_reference.py` "
        "and commit docs/reference/cli.md")


def test_the_page_has_a_section_per_command_with_the_options_its_help_shows():
    sections = page_sections()
    root = help_panels()
    assert sections["layerscope"] | {"--help"} == root["Options"]
    for command in root["Commands"]:
        shown = help_panels(command)
        listed = sections[f"layerscope {command}"] | {"--help"}
        if command == "run":  # every panel of `layerscope run --help`: its options, the shared and study settings
            listed |= sections["Settings every study reads"]
            listed |= set().union(*(sections[f"layerscope run {study}"] for study in studies()))
        assert listed == set().union(*shown.values()) - {None}, command


@pytest.mark.parametrize("study", list(studies()))
def test_a_studys_section_lists_the_settings_its_help_shows(study):
    sections, shown = page_sections(), help_panels("run", study)
    assert sections["layerscope run"] | {"--help"} == shown["Options"]
    assert sections["Settings every study reads"] == shown["Settings every study reads"]
    assert sections[f"layerscope run {study}"] == shown.get(f"Settings of {study}", set())


def test_a_study_reads_the_settings_of_its_section_and_rejects_every_other_studys():
    """The run-time check, one setting at a time: given on the command line, a setting of the study's section is
    accepted, and any other study's is the error that names it; the page names the key the setting has."""
    sections, keys = page_sections(), page_keys()
    run = typer.main.get_command(app).commands["run"]
    names = {o: p.name for p in run.get_params(run.make_context("run", [], resilient_parsing=True)) for o in p.opts}
    defaults = {name: field.default for name, (field, _) in fields().items()}
    own = sorted(o for o, name in names.items() if o.startswith("--") and name in defaults and name not in COMMON)
    for study in studies():
        for option in own:  # every study's own settings, as the app declares them
            assert keys.get(option) == names[option], f"{option}: no row on the page, or not its config key"
            given = {names[option]: defaults[names[option]]}
            if option in sections[f"layerscope run {study}"]:
                resolve_configs({"study": study}, given)
            else:
                # the error names the setting (as --prefix-reuse where the flag is --no-prefix-reuse)
                with pytest.raises(ConfigError, match=re.escape(names[option].replace("_", "-"))):
                    resolve_configs({"study": study}, given)
