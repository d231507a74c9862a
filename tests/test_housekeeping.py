"""The house-keeping files agree with the package: LICENSE is the licence pyproject.toml names, CITATION.cff cites
the version being released."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_licence_file_is_the_licence_pyproject_names():
    assert project()["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    head = [line.strip() for line in text.splitlines()[:2]]
    assert head == ["Apache License", "Version 2.0, January 2004"]
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_citation_file_cites_this_version_under_that_licence():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    assert cff["version"] == project()["version"]
    assert cff["license"] == "Apache-2.0"
    assert cff["title"].startswith(project()["name"]) and cff["authors"]
