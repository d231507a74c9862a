"""Every result number in README.md and docs/ comes from the one recorded `make run` kept in docs/results/make-run/
(and the tuned lens it trained, in docs/results/tuned-lens-smollm2/), or from the benchmark outputs kept in
benchmarks/results/ (tests/test_bench_pages.py): the generated blocks are what the tools write from those files,
and no page states a result number or a time outside such a block.

    .venv/bin/python -m pytest -q tests/test_result_pages.py
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CONSTANTS = {
    "0.05": "the default significance level", "0.001": "ablation's floor for the high-resource degradation",
    "0.1": "a method constant (a tolerance, a threshold, a dose, a learning rate)",
    "-0.1": "phases' inversion threshold",
    "0.2": "divergence's label thresholds", "-0.2": "divergence's label thresholds", "0.5": "a threshold or a dose",
    "-0.5": "divergence's label thresholds", "0.15": "phases' pattern thresholds",
    "+0.15": "phases' pattern thresholds",
    "-0.15": "phases' pattern thresholds", "+0.1": "phases' pattern thresholds", "0.25": "probe's steering dose",
    "0.9": "SGD's momentum", "3.5": "a column's width in inches", "1.443": "1 / ln 2, bits per nat",
}
"""Numbers that are settings or thresholds of a method, not results: allowed anywhere."""
VERSION = re.compile(r"(?:Python|torch|layerscope|version(?:s)? from|arXiv:)\s*\d+\.\d+|\b\d+\.\d+'s\b")
BLOCK = re.compile(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", re.S)
FENCE = re.compile(r"^( *)(```|~~~).*?^\1\2 *$", re.S | re.M)
NUMBER = re.compile(r"(?<![\w.\-/])[+\-−]?\d+\.\d+(?![\w.])")
TIME = re.compile(r"\b\d+(?:\.\d+)? ?(?:min|minutes|seconds|s|h|hours)\b")


def prose(text: str) -> str:
    """``text`` without generated blocks, fenced code, code spans, link targets, HTML comments and version numbers."""
    for pattern in (BLOCK, FENCE, re.compile(r"`[^`\n]*`"), re.compile(r"\]\([^)]*\)"),
                    re.compile(r"<!--.*?-->", re.S), VERSION):
        text = pattern.sub(" ", text)
    return text


def typed_results(text: str) -> list[str]:
    """The numbers and times ``text`` states by hand: decimals that are no method constant, and durations."""
    body = prose(text)
    return [n for n in NUMBER.findall(body) if n not in CONSTANTS] + TIME.findall(body)


def test_the_scan_finds_a_typed_result_and_leaves_generated_blocks_code_and_constants_alone():
    page = ("r = +0.669 at the last layer; it took 3 min.\n<!-- x:start -->\nr = +0.226\n<!-- x:end -->\n"
            "```text\nq = 0.622\n```\n`--alpha 0.37`, [a](b/1.5.md), Python 3.11, q < 0.05.\n")
    assert typed_results(page) == ["+0.669", "3 min"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_states_a_result_by_hand(page):
    found = typed_results(page.read_text(encoding="utf-8"))
    assert not found, (f"{page.relative_to(ROOT)} states {found} outside a generated block: a result comes from "
                       "the recorded make run (tools/run_findings.py writes it between <!-- NAME:start --> and "
                       "<!-- NAME:end -->; a speed, tools/bench_findings.py from benchmarks/results/); a method "
                       "constant goes into CONSTANTS here with its reason")


def test_the_pages_are_what_the_recorded_run_gives():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "run_findings.py"), "check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_recorded_run_is_one_run_of_the_default_suite():
    made = json.loads((ROOT / "docs" / "results" / "make-run" / "made.json").read_text())
    hashes = set()
    for study in ("divergence", "scaling", "phases", "anisotropy", "ablation", "atlas", "surgery", "probe"):
        result = json.loads((ROOT / "docs" / "results" / "make-run" / study / "result.json").read_text())
        assert result["study"] == study and result["config"].get("compat") is None  # the default, not seed compat
        assert result["manifest"]["seed"] == 42
        hashes |= {m["weights_hash"] for m in result["manifest"]["models"] if m["name"] == "smollm2-135m"}
    assert len(hashes) == 1, "the studies' SmolLM2 weights differ: not one run"
    lens = json.loads((ROOT / "docs" / "results" / "tuned-lens-smollm2" / "config.json").read_text())
    assert lens["layerscope"]["weights_hash"] == hashes.pop()  # the lens was trained on those weights
    lens_made = json.loads((ROOT / "docs" / "results" / "tuned-lens-smollm2" / "made.json").read_text())
    assert (lens_made["lens"]["commit"], lens_made["lens"]["day"]) == (made["commit"], made["day"])
    assert made["command"] == "make run" and made["run_s"] > made.get("setup_s", 0) > 0


def test_the_kept_lens_is_the_default_recipe_and_names_its_weights():
    config = json.loads((ROOT / "docs" / "results" / "tuned-lens-smollm2" / "config.json").read_text())
    record = config["layerscope"]
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert record["model"] == "smollm2-135m" and len(config["unembed_hash"]) == 64
    assert (record["steps"], record["tokens_per_step"], record["init"]) == (40, 512, "lstsq")
    tokens = record["tokens"]
    assert tokens["token_draws"] == record["steps"] * record["tokens_per_step"]
    assert tokens["paper_tokens_per_step"] == 2**18 and tokens["distinct_train_rows"] <= tokens["train_rows"]
    held = record["heldout"]
    assert held["tokens"] == tokens["heldout_rows"] and held["metrics"]["tuned_kl"][-1] == 0


def test_every_image_a_page_shows_is_there_and_a_png():
    image = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")
    shown = [(page, page.parent / target) for page in PAGES for target in image.findall(page.read_text("utf-8"))]
    assert any(p.name == "verdicts.png" for _, p in shown), "the docs index's gallery shows no verdict table"
    for page, path in shown:
        assert path.is_file(), f"{page.relative_to(ROOT)} shows {path}, which is missing"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"


def test_the_validation_page_and_the_bundled_card_are_what_the_recorded_card_gives():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "validation_findings.py"), "check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    kept = json.loads((ROOT / "docs" / "results" / "validation" / "result.json").read_text())
    assert kept["meta"]["model"] == "smollm2-135m" and kept["meta"]["seed"] == 42
